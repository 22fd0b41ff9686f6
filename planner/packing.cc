// The packing registry: dispatch by name, choose the best, and the glue from a Program to records.
#include "planner/packing.h"

#include <future>
#include <optional>
#include <string>
#include <thread>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "planner/packing_place.h"

namespace memplan {

const char* packing_algorithm_name(PackingAlgorithm a) {
  switch (a) {
    case PackingAlgorithm::GreedyBySize: return "greedy_by_size";
    case PackingAlgorithm::BestFitSpatial: return "best_fit_spatial";
    case PackingAlgorithm::BestFitTemporal: return "best_fit_temporal";
    case PackingAlgorithm::GreedyByBreadth: return "greedy_by_breadth";
  }
  return "greedy_by_size";
}

namespace {

// From how many records choose_best places the orders on threads: below, a placement takes milliseconds and a
// thread's start would be a visible part of it (a speed choice, not a model of any runtime).
constexpr size_t kParallelPackingRecords = 10000;

std::vector<int32_t> order_of(PackingAlgorithm algorithm, const std::vector<UsageRecord>& records,
                              const std::vector<uint64_t>& sizes) {
  switch (algorithm) {
    case PackingAlgorithm::GreedyBySize: return detail::greedy_by_size_order(records, sizes);
    case PackingAlgorithm::BestFitSpatial: return detail::best_fit_spatial_order(records, sizes);
    case PackingAlgorithm::BestFitTemporal: return detail::best_fit_temporal_order(records, sizes);
    case PackingAlgorithm::GreedyByBreadth: return detail::greedy_by_breadth_order(records, sizes);
  }
  throw InternalError("unknown packing algorithm " + std::to_string(static_cast<int>(algorithm)));
}

}  // namespace

PackingResult pack(PackingAlgorithm algorithm, const std::vector<UsageRecord>& records, uint64_t alignment) {
  const std::vector<uint64_t> sizes = detail::aligned_sizes(records, alignment);
  const detail::OverlapIndex index(records, detail::validate_records(records));
  return detail::place_in_order(records, sizes, order_of(algorithm, records, sizes), index);
}

PackingResult pack_greedy_by_size(const std::vector<UsageRecord>& records, uint64_t alignment) {
  return pack(PackingAlgorithm::GreedyBySize, records, alignment);
}
PackingResult pack_best_fit_spatial(const std::vector<UsageRecord>& records, uint64_t alignment) {
  return pack(PackingAlgorithm::BestFitSpatial, records, alignment);
}
PackingResult pack_best_fit_temporal(const std::vector<UsageRecord>& records, uint64_t alignment) {
  return pack(PackingAlgorithm::BestFitTemporal, records, alignment);
}
PackingResult pack_greedy_by_breadth(const std::vector<UsageRecord>& records, uint64_t alignment) {
  return pack(PackingAlgorithm::GreedyByBreadth, records, alignment);
}

std::vector<PackingResult> pack_all(const std::vector<UsageRecord>& records, uint64_t alignment) {
  const std::vector<uint64_t> sizes = detail::aligned_sizes(records, alignment);
  const detail::OverlapIndex index(records, detail::validate_records(records));  // shared by every order
  std::vector<PackingResult> out;
  for (int a = 0; a < kNumPackingAlgorithms; ++a)
    out.push_back(detail::place_in_order(records, sizes, order_of(static_cast<PackingAlgorithm>(a), records, sizes), index));
  return out;
}

BestPacking choose_best(const std::vector<UsageRecord>& records, uint64_t alignment) {
  const std::vector<uint64_t> sizes = detail::aligned_sizes(records, alignment);
  const detail::OverlapIndex index(records, detail::validate_records(records));
  const uint64_t bound = aligned_lower_bound(records, alignment);
  auto place = [&](int a) {
    return detail::place_in_order(records, sizes, order_of(static_cast<PackingAlgorithm>(a), records, sizes), index);
  };
  // The four orders are independent (the index and the sizes are only read): on a large program, where placing
  // takes seconds (a mixture of experts' training step: hundreds of thousands of records), each runs on its own
  // thread, and the early stop below picks from their results what the sequential run would have kept.
  std::vector<std::optional<PackingResult>> results(kNumPackingAlgorithms);
  if (records.size() >= kParallelPackingRecords && std::thread::hardware_concurrency() > 1) {
    std::vector<std::future<PackingResult>> runs;
    for (int a = 1; a < kNumPackingAlgorithms; ++a) runs.push_back(std::async(std::launch::async, place, a));
    results[0] = place(0);
    for (int a = 1; a < kNumPackingAlgorithms; ++a) results[a] = runs[a - 1].get();
  }
  BestPacking best;
  for (int a = 0; a < kNumPackingAlgorithms; ++a) {
    PackingResult r = results[a] ? std::move(*results[a]) : place(a);
    best.arena_by_algorithm.push_back(r.arena_bytes);
    if (a == 0 || r.arena_bytes < best.result.arena_bytes) {  // strict: the earlier algorithm wins ties
      best.algorithm = static_cast<PackingAlgorithm>(a);
      best.result = std::move(r);
    }
    if (best.result.arena_bytes == bound) break;  // no arena is below the bound: the later ones cannot win
  }
  return best;
}

ProgramRecords usage_records(const Program& program, const std::vector<LiveRange>& ranges) {
  if (ranges.size() != program.buffers.size())
    throw InternalError("live ranges for " + std::to_string(ranges.size()) + " buffers, program has " +
                        std::to_string(program.buffers.size()));
  ProgramRecords out;
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    if (program.buffers[i].resident) continue;
    out.records.push_back({program.buffers[i].bytes, ranges[i].first, ranges[i].last});
    out.buffer_ids.push_back(static_cast<int32_t>(i));
  }
  return out;
}

uint64_t aligned_lower_bound(const std::vector<UsageRecord>& records, uint64_t alignment) {
  const std::vector<uint64_t> sizes = detail::aligned_sizes(records, alignment);
  const int32_t steps = detail::validate_records(records);
  std::vector<uint64_t> starts(steps + 1, 0), ends(steps + 1, 0);
  for (size_t i = 0; i < records.size(); ++i) {
    starts[records[i].first] = checked_add(starts[records[i].first], sizes[i], "live bytes");
    ends[records[i].last + 1] = checked_add(ends[records[i].last + 1], sizes[i], "live bytes");
  }
  uint64_t live = 0, peak = 0;
  for (int32_t s = 0; s < steps; ++s) {
    live = checked_add(live, starts[s], "live bytes") - ends[s];
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace memplan
