// The placement rule shared by every packing order (internal to the planner).
// Records are placed one by one in a given order; each goes into the smallest gap, among the records
// already placed that share a step with it, that can hold it (lowest offset on a tie), or above the
// highest of them when no gap fits. This is TFLite's greedy_by_size gap search and XLA's best-fit free
// chunk; the algorithms differ only in the order they pass in.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "planner/packing.h"

namespace memplan::detail {

// Rounds each record's bytes up to the alignment (validating the alignment).
std::vector<uint64_t> aligned_sizes(const std::vector<UsageRecord>& records, uint64_t alignment);

// Which records share a step with a given one (see packing_place.cc). Built once per set of records and
// shared by every order placed over them.
class OverlapIndex {
 public:
  OverlapIndex(const std::vector<UsageRecord>& records, int32_t steps);
  // Records are named by their position in by_first(): the non-empty records sorted by first step (then
  // index). Neighbours in time are then neighbours in memory, which keeps the scans below cache-friendly.
  const std::vector<int32_t>& by_first() const { return by_first_; }
  int32_t steps() const { return steps_; }
  // Records live at a step, on average over the steps (the sum of the non-empty records' lengths / steps).
  double mean_live() const { return mean_live_; }
  // Calls f(position) for every non-empty record whose range contains `step`.
  template <typename F>
  void for_each_containing(int32_t step, F&& f) const;
  // Positions [begin, end) of the records starting in (first, last]. With for_each_containing(first) this
  // names every record sharing a step with [first, last], each once.
  std::pair<size_t, size_t> starting_within(int32_t first, int32_t last) const {
    return {start_begin_[first + 1], start_begin_[last + 1]};
  }

 private:
  void add_canonical(size_t node, int32_t lo, int32_t hi, const UsageRecord& r, uint32_t position, bool count_only);
  int32_t steps_;
  double mean_live_ = 0;
  std::vector<size_t> node_begin_, fill_;
  std::vector<uint32_t> node_positions_;
  std::vector<int32_t> by_first_;
  std::vector<size_t> start_begin_;
};

// Places records in `order` (a permutation of record indices). Two exact implementations of the one rule
// (tests/planner/packing_test.cc checks both against it by brute force), chosen by how many records are live
// at a step on average:
//  - place_by_scan gathers and sorts the K placed records sharing a step with each record: O(log T + K log K),
//    cheapest when few are live together (an inference graph);
//  - place_by_runs keeps the placed records' bytes as merged runs in a segment tree over steps and walks the
//    runs beside each record, not the records: a training step's tens of thousands of saved tensors, live
//    together from forward to backward, are a few runs (O(log T) run-set updates a record, plus the walk).
PackingResult place_in_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes,
                             const std::vector<int32_t>& order, const OverlapIndex& index);
PackingResult place_by_scan(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes,
                            const std::vector<int32_t>& order, const OverlapIndex& index);
PackingResult place_by_runs(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes,
                            const std::vector<int32_t>& order, int32_t steps);

// The orders of the algorithms (each in its own file); `sizes` are the aligned sizes.
std::vector<int32_t> greedy_by_size_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes);
std::vector<int32_t> best_fit_spatial_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes);
std::vector<int32_t> best_fit_temporal_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes);
std::vector<int32_t> greedy_by_breadth_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes);

// Validates the records (first <= last, first >= 0) and returns the number of steps (max last + 1).
int32_t validate_records(const std::vector<UsageRecord>& records);

}  // namespace memplan::detail
