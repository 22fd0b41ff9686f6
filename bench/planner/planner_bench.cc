// Planning time and quality on a synthetic 100,000-node program, beside two baselines measured in the same
// run: no reuse (every buffer its own bytes) and an online first-fit heap in program order (what a simple
// runtime allocator without planning would reach). Usage: memplan_planner_bench [steps] [seed]
#include <ctime>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>

#include "planner/invariants.h"
#include "planner/liveness.h"
#include "planner/packing.h"
#include "planner/packing_place.h"
#include "planner/schedule.h"
#include "synthetic_program.h"

namespace {

using memplan::UsageRecord;
// Process CPU time: the benchmark is single-threaded, and CPU time stays meaningful on a shared machine
// where wall time depends on the other jobs.
struct Clock {
  using time_point = std::clock_t;
  static time_point now() { return std::clock(); }
};

double ms_since(Clock::time_point start) { return 1000.0 * static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC; }

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// Baseline: allocate in program order at the lowest free address that fits (address-ordered first fit,
// coalescing free neighbours), free after the last use. Returns the heap's high-water mark.
uint64_t first_fit_heap(const std::vector<UsageRecord>& records, uint64_t alignment) {
  int32_t steps = 0;
  for (const auto& r : records) steps = std::max(steps, r.last + 1);
  std::vector<std::vector<int32_t>> starts(steps), ends(steps);
  for (size_t i = 0; i < records.size(); ++i) {
    starts[records[i].first].push_back(static_cast<int32_t>(i));
    ends[records[i].last].push_back(static_cast<int32_t>(i));
  }
  std::map<uint64_t, uint64_t> free_blocks;  // offset -> size, below the top
  std::vector<uint64_t> offset(records.size());
  uint64_t top = 0, high = 0;
  auto size_of = [&](int32_t i) { return (records[i].bytes + alignment - 1) / alignment * alignment; };
  for (int32_t s = 0; s < steps; ++s) {
    for (int32_t i : starts[s]) {
      const uint64_t size = size_of(i);
      if (size == 0) continue;
      auto it = free_blocks.begin();
      while (it != free_blocks.end() && it->second < size) ++it;
      if (it != free_blocks.end()) {
        offset[i] = it->first;
        const uint64_t rest = it->second - size;
        free_blocks.erase(it);
        if (rest) free_blocks[offset[i] + size] = rest;
      } else {
        offset[i] = top;
        top += size;
        high = std::max(high, top);
      }
    }
    for (int32_t i : ends[s]) {
      uint64_t start = offset[i], size = size_of(i);
      if (size == 0) continue;
      auto next = free_blocks.lower_bound(start);
      if (next != free_blocks.end() && next->first == start + size) {
        size += next->second;
        next = free_blocks.erase(next);
      }
      if (next != free_blocks.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == start) {
          start = prev->first;
          size += prev->second;
          free_blocks.erase(prev);
        }
      }
      if (start + size == top) {
        top = start;  // the heap shrinks back when its last block is freed
      } else {
        free_blocks[start] = size;
      }
    }
  }
  return high;
}

// The two placements of packing_place.h on one program, greedy_by_size's order: CPU ms of each, their arena
// (which must be the same), and the mean records live at a step that place_in_order chooses by.
void scan_against_runs(const char* label, const memplan::Program& program, uint64_t alignment) {
  const auto records = memplan::usage_records(program, memplan::compute_liveness(program)).records;
  const auto sizes = memplan::detail::aligned_sizes(records, alignment);
  const memplan::detail::OverlapIndex index(records, memplan::detail::validate_records(records));
  const auto order = memplan::detail::greedy_by_size_order(records, sizes);
  auto t = Clock::now();
  const auto scan = memplan::detail::place_by_scan(records, sizes, order, index);
  const double scan_ms = ms_since(t);
  t = Clock::now();
  const auto runs = memplan::detail::place_by_runs(records, sizes, order, index.steps());
  const double runs_ms = ms_since(t);
  std::printf("%-34s %10.1f %10.1f %10.1f %12.1f  %s\n", label, index.mean_live(), scan_ms, runs_ms,
              mib(scan.arena_bytes), scan.offsets == runs.offsets ? "same offsets" : "DIFFERENT OFFSETS");
}

}  // namespace

int main(int argc, char** argv) {
  memplan::SyntheticOptions options;
  if (argc > 1) options.steps = std::atoi(argv[1]);
  if (argc > 2) options.seed = std::strtoull(argv[2], nullptr, 10);
  const uint64_t alignment = memplan::kDefaultAlignment;

  auto t = Clock::now();
  const memplan::Program program = memplan::synthetic_program(options);
  const double build_ms = ms_since(t);
  std::printf("synthetic program: %d steps, %zu buffers, seed %llu (built in %.1f ms)\n\n", options.steps,
              program.buffers.size(), static_cast<unsigned long long>(options.seed), build_ms);

  // The planning pipeline, timed as a whole: liveness, choose_best, memory-aware schedule.
  const auto wall_start = std::chrono::steady_clock::now();
  t = Clock::now();
  const auto ranges = memplan::compute_liveness(program);
  const auto live = memplan::compute_live_bytes(program, ranges);
  const auto pr = memplan::usage_records(program, ranges);
  const double liveness_ms = ms_since(t);
  t = Clock::now();
  const memplan::BestPacking best = memplan::choose_best(pr.records, alignment);
  const double choose_ms = ms_since(t);
  t = Clock::now();
  const auto schedule = memplan::memory_aware_schedule(program);
  const double schedule_ms = ms_since(t);
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count();
  const uint64_t aligned_bound = memplan::aligned_lower_bound(pr.records, alignment);

  std::printf("%-24s %12s %10s %10s\n", "", "arena MiB", "/ bound", "cpu ms");
  std::printf("%-24s %12.1f %10s %10.1f\n", "lower bound (exact)", mib(live.peak_bytes), "", liveness_ms);
  std::printf("%-24s %12.1f %10.4f\n", "lower bound (aligned)", mib(aligned_bound), 1.0);
  // Each algorithm alone (building its own overlap index), with the invariant checker on its plan.
  double check_ms = 0;
  for (int a = 0; a < memplan::kNumPackingAlgorithms; ++a) {
    const auto algorithm = static_cast<memplan::PackingAlgorithm>(a);
    t = Clock::now();
    const auto r = memplan::pack(algorithm, pr.records, alignment);
    const double ms = ms_since(t);
    t = Clock::now();
    const bool valid = memplan::check_plan(pr.records, r.offsets, r.arena_bytes, alignment).empty();
    check_ms = ms_since(t);
    std::printf("%-24s %12.1f %10.4f %10.1f%s\n", memplan::packing_algorithm_name(algorithm), mib(r.arena_bytes),
                static_cast<double>(r.arena_bytes) / aligned_bound, ms, valid ? "" : "  INVALID");
  }
  // choose_best runs the algorithms up to the first that reaches the aligned bound (all four when none does).
  const std::string ran = "choose_best (" + std::to_string(best.arena_by_algorithm.size()) + " run)";
  std::printf("%-24s %12.1f %10.4f %10.1f  (%s)\n", ran.c_str(), mib(best.result.arena_bytes),
              static_cast<double>(best.result.arena_bytes) / aligned_bound, choose_ms,
              memplan::packing_algorithm_name(best.algorithm));

  uint64_t no_reuse = 0;
  for (const auto& r : pr.records) no_reuse += (r.bytes + alignment - 1) / alignment * alignment;
  t = Clock::now();
  const uint64_t first_fit = first_fit_heap(pr.records, alignment);
  const double first_fit_ms = ms_since(t);

  std::printf("\nbaselines (same run)\n");
  std::printf("%-22s %12.1f %10.4f\n", "no reuse (sum)", mib(no_reuse), static_cast<double>(no_reuse) / aligned_bound);
  std::printf("%-22s %12.1f %10.4f %10.1f\n", "online first fit", mib(first_fit),
              static_cast<double>(first_fit) / aligned_bound, first_fit_ms);

  std::printf("\nmemory-aware schedule: bound %.1f MiB -> %.1f MiB (%s), %.1f ms\n", mib(schedule.original_peak_bytes),
              mib(schedule.greedy_peak_bytes), schedule.reordered ? "reordered" : "original kept", schedule_ms);
  std::printf("invariant check of one plan: %.1f ms CPU\n", check_ms);
  std::printf("\nplanning total (liveness + choose_best + schedule): %.1f ms CPU, %.1f ms wall\n",
              liveness_ms + choose_ms + schedule_ms, wall_ms);

  // Dense programs: with long skips most records live across much of the program, as a training step's saved
  // activations do from forward to backward; place_in_order switches from the scan to the runs above 256.
  std::printf("\nplacement by scan and by runs (greedy_by_size order)\n");
  std::printf("%-34s %10s %10s %10s %12s\n", "program", "mean live", "scan ms", "runs ms", "arena MiB");
  scan_against_runs("this program", program, alignment);
  for (const int32_t reach : {200, 2000, 20000}) {
    memplan::SyntheticOptions dense = options;
    dense.skip_per_mille = 500;
    dense.skip_reach = reach;
    const std::string label = "skips 500/1000, reach " + std::to_string(reach);
    scan_against_runs(label.c_str(), memplan::synthetic_program(dense), alignment);
  }
  return 0;
}
