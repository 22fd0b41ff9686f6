// Fuzz target: random memory programs (a DAG of steps over buffers with random sizes, categories and
// lifetimes) through the whole planner, checking every promise its headers make:
//   liveness      the live bytes' peak is the lower bound; a program the cost model could not have built
//                 (raw mode) is refused with InternalError by compute_liveness and by nothing later;
//   packing       every algorithm's plan passes check_plan, respects alignment, is at least the aligned
//                 lower bound, is deterministic, and choose_best keeps the smallest;
//   plan.json     make_plan's plan round-trips through the file format unchanged and still checks;
//   scheduling    the memory-aware order is topological, its bound is what it claims and never worse;
//   allocators    the PyTorch caching allocator and ORT BFC simulators never crash, reserve at least
//                 what they allocate, and allocate at least the exact live bytes (no capacity set).
// Sizes near 2^64 may throw ShapeOverflow (an InputError): that is the documented answer.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_checks.h"
#include "onnx_import/checked.h"
#include "planner/alloc_ort_bfc.h"
#include "planner/alloc_pytorch.h"
#include "planner/invariants.h"
#include "planner/liveness.h"
#include "planner/packing.h"
#include "planner/plan_json.h"
#include "planner/schedule.h"
#include "planner/summary.h"

namespace memplan::fuzz {
namespace {

// Reads the fuzzer's bytes as a stream of choices; past the end every choice is 0.
class Choices {
 public:
  Choices(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t u64(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | byte();
    return v;
  }
  uint32_t below(uint32_t n) { return n == 0 ? 0 : static_cast<uint32_t>(u64(2) % n); }  // [0, n)
  bool one_in(uint32_t n) { return below(n) == 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Sizes from every regime the allocators treat differently: zero, below 512 B, PyTorch's small pool
// (<= 1 MiB), the 1-10 MiB band that takes a 20 MiB segment, large, and past what any GPU holds.
uint64_t buffer_bytes(Choices& c) {
  switch (c.below(8)) {
    case 0: return 0;
    case 1: return c.u64(1);
    case 2: return c.u64(2) + 1;
    case 3: return c.u64(3);                  // up to 16 MiB
    case 4: return (c.u64(1) + 1) << 20;      // whole MiBs up to 256 MiB
    case 5: return c.u64(5);                  // up to 1 TiB
    case 6: return c.u64(8) >> c.below(64);   // anything, including sizes near 2^64
    default: return 512 * c.u64(1);
  }
}

Program random_program(Choices& c, bool raw) {
  Program p;
  const uint32_t n_steps = 1 + c.below(48);
  const uint32_t n_buffers = c.below(96);
  p.steps.resize(n_steps);
  for (uint32_t s = 0; s < n_steps; ++s) {
    p.steps[s].name = "step" + std::to_string(s);
    p.steps[s].op = "Op";
    p.steps[s].phase = static_cast<Phase>(c.below(3));
  }
  for (uint32_t i = 0; i < n_buffers; ++i) {
    Buffer b;
    b.name = "buf" + std::to_string(i);
    b.bytes = buffer_bytes(c);
    b.category = static_cast<Category>(c.below(kNumCategories));
    const uint32_t kind = c.below(16);
    b.resident = kind == 0;
    b.live_at_start = kind == 1 || kind == 2;
    b.live_at_end = c.one_in(6);
    const auto id = static_cast<int32_t>(p.buffers.size());
    p.buffers.push_back(b);
    if (raw) {
      // Anything goes: ids may repeat, be read before written, or be out of range.
      const uint32_t writes = c.below(3), reads = c.below(4);
      for (uint32_t k = 0; k < writes; ++k) p.steps[c.below(n_steps)].writes.push_back(id + c.below(3) - 1);
      for (uint32_t k = 0; k < reads; ++k) p.steps[c.below(n_steps)].reads.push_back(id + c.below(3) - 1);
      continue;
    }
    // Consistent: one writer (none for resident and live-at-start buffers), readers at or after it.
    uint32_t first = 0;
    if (!b.resident && !b.live_at_start) {
      first = c.below(n_steps);
      p.steps[first].writes.push_back(id);
    }
    const uint32_t reads = c.below(5);
    for (uint32_t k = 0; k < reads; ++k) p.steps[first + c.below(n_steps - first)].reads.push_back(id);
  }
  return p;
}

std::string label(PackingAlgorithm a, uint64_t alignment) {
  return std::string(packing_algorithm_name(a)) + " (alignment " + std::to_string(alignment) + ")";
}

void check_packing(const std::vector<UsageRecord>& records, uint64_t alignment, uint64_t exact_peak) {
  const uint64_t bound = aligned_lower_bound(records, alignment);
  require(bound >= exact_peak, "aligned lower bound below the exact lower bound");
  const std::vector<PackingResult> all = pack_all(records, alignment);
  require(all.size() == kNumPackingAlgorithms, "pack_all did not run every algorithm");
  uint64_t smallest = UINT64_MAX;
  for (int i = 0; i < kNumPackingAlgorithms; ++i) {
    const auto algorithm = static_cast<PackingAlgorithm>(i);
    const PackingResult& r = all[static_cast<size_t>(i)];
    require(r.offsets.size() == records.size(), label(algorithm, alignment) + ": one offset per record");
    const std::vector<PlanViolation> violations = check_plan(records, r.offsets, r.arena_bytes, alignment);
    require(violations.empty(),
            label(algorithm, alignment) + ": " + (violations.empty() ? "" : violations.front().message));
    require(r.arena_bytes >= bound, label(algorithm, alignment) + ": arena below the aligned lower bound");
    const PackingResult again = pack(algorithm, records, alignment);
    require(again.offsets == r.offsets && again.arena_bytes == r.arena_bytes,
            label(algorithm, alignment) + ": pack() and pack_all() disagree (non-deterministic?)");
    smallest = std::min(smallest, r.arena_bytes);
  }
  const BestPacking best = choose_best(records, alignment);
  require(best.result.arena_bytes == smallest, "choose_best did not keep the smallest arena");
  require(all[static_cast<size_t>(best.algorithm)].arena_bytes == smallest, "choose_best names the wrong algorithm");
}

void check_allocator(const char* name, const AllocatorReplay& r, uint64_t exact_peak_with_resident) {
  require(r.peak_reserved_bytes >= r.peak_allocated_bytes, std::string(name) + ": reserved below allocated");
  require(r.allocated_per_step.size() == r.reserved_per_step.size(), std::string(name) + ": series differ in length");
  for (size_t s = 0; s < r.allocated_per_step.size(); ++s)
    require(r.reserved_per_step[s] >= r.allocated_per_step[s], std::string(name) + ": reserved below allocated at a step");
  if (!r.out_of_memory)
    require(r.peak_allocated_bytes >= exact_peak_with_resident,
            std::string(name) + ": allocated peak below the exact live bytes");
}

void check_program(const Program& p, Choices& c) {
  const std::vector<LiveRange> ranges = compute_liveness(p);
  const LiveBytes live = compute_live_bytes(p, ranges);
  require(live.per_step.size() == p.steps.size(), "live bytes: one entry per step");
  require(*std::max_element(live.per_step.begin(), live.per_step.end()) == live.peak_bytes, "peak is not the max");
  require(lower_bound(p) == live.peak_bytes, "lower_bound() differs from compute_live_bytes");

  const ProgramRecords records = usage_records(p, ranges);
  const uint64_t alignments[] = {1, 256, uint64_t{1} << c.below(24)};
  for (uint64_t alignment : alignments) check_packing(records.records, alignment, live.peak_bytes);

  const Plan plan = make_plan(p, "fuzz", alignments[c.below(3)]);
  require(check_plan(plan).empty(), "make_plan's plan fails check_plan");
  require(plan.lower_bound_bytes == live.peak_bytes, "plan lower bound differs from liveness");
  const std::string text = plan_to_json_text(plan);
  const Plan reread = plan_from_json_text(text);
  require(plan_to_json_text(reread) == text, "plan.json does not round-trip");

  const ScheduleResult schedule = memory_aware_schedule(p);
  const std::string order_problem = check_topological_order(p, schedule.order);
  require(order_problem.empty(), "memory-aware order is not topological: " + order_problem);
  require(schedule.original_peak_bytes == live.peak_bytes, "schedule's original peak differs from liveness");
  require(schedule.chosen_peak_bytes <= schedule.original_peak_bytes, "memory-aware schedule made the bound worse");
  require(lower_bound(apply_order(p, schedule.order)) == schedule.chosen_peak_bytes,
          "the chosen order's bound is not what the schedule reports");
  summarize_planning(p);

  const uint64_t with_resident = checked_add(live.peak_bytes, live.resident_bytes);
  check_allocator("pytorch", simulate_pytorch(p), with_resident);
  check_allocator("ort_bfc", simulate_ort_bfc(p), with_resident);
  check_allocator("ort_memory_pattern", simulate_ort_memory_pattern(p, plan.arena_bytes), 0);
  // A capacity: replays stop at the first request that does not fit, and still keep their promises.
  const uint64_t capacity = uint64_t{1} << (20 + c.below(24));
  check_allocator("pytorch capped", simulate_pytorch(p, PytorchAllocatorOptions{capacity}), with_resident);
  BfcOptions bfc;
  bfc.memory_limit_bytes = capacity;
  check_allocator("ort_bfc capped", simulate_ort_bfc(p, bfc), with_resident);
}

}  // namespace
}  // namespace memplan::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memplan;
  fuzz::Choices c(data, size);
  const bool raw = c.one_in(8);
  const Program p = fuzz::random_program(c, raw);
  if (raw) {
    // A program no cost model builds: liveness must refuse it with InternalError or accept it whole.
    try {
      compute_liveness(p);
    } catch (const InternalError&) {
      return 0;
    }
  }
  fuzz::expect_success_or_input_error([&] { fuzz::check_program(p, c); });
  return 0;
}
