// Greedy by breadth (TFLite GPU delegate, memory_management/greedy_by_breadth_assignment.cc): visit the
// steps from the widest (most live bytes) to the narrowest; at each, place the records live there that
// are not placed yet, largest first. Ties: the earlier step, then the lower record index.
//
// Implemented without per-step record lists: a record is placed at the first visited step inside its
// live range, i.e. the minimum visit rank over [first, last], found with a sparse table in O(1).
#include <algorithm>
#include <bit>
#include <numeric>

#include "onnx_import/checked.h"
#include "planner/packing.h"
#include "planner/packing_place.h"

namespace memplan {
namespace {

// Range-minimum over a fixed array: O(T log T) to build, O(1) per query.
class RangeMin {
 public:
  explicit RangeMin(std::vector<int32_t> values) {
    levels_.push_back(std::move(values));
    for (size_t width = 2; width <= levels_[0].size(); width *= 2) {
      const std::vector<int32_t>& prev = levels_.back();
      std::vector<int32_t> next(levels_[0].size() - width + 1);
      for (size_t i = 0; i < next.size(); ++i) next[i] = std::min(prev[i], prev[i + width / 2]);
      levels_.push_back(std::move(next));
    }
  }
  int32_t min(int32_t lo, int32_t hi) const {  // inclusive
    const int level = std::bit_width(static_cast<uint32_t>(hi - lo + 1)) - 1;
    return std::min(levels_[level][lo], levels_[level][hi - (1 << level) + 1]);
  }

 private:
  std::vector<std::vector<int32_t>> levels_;
};

}  // namespace

std::vector<int32_t> detail::greedy_by_breadth_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes) {
  int32_t steps = 0;  // records are validated by the caller (pack)
  for (const UsageRecord& r : records) steps = std::max(steps, r.last + 1);
  if (steps == 0) return {};

  // Breadth of each step: live aligned bytes (difference array, prefix sum).
  std::vector<uint64_t> starts(steps + 1, 0), ends(steps + 1, 0), breadth(steps, 0);
  for (size_t i = 0; i < records.size(); ++i) {
    starts[records[i].first] = checked_add(starts[records[i].first], sizes[i], "step breadth");
    ends[records[i].last + 1] = checked_add(ends[records[i].last + 1], sizes[i], "step breadth");
  }
  uint64_t live = 0;
  for (int32_t s = 0; s < steps; ++s) breadth[s] = live = checked_add(live, starts[s], "step breadth") - ends[s];

  std::vector<int32_t> visit(steps);
  std::iota(visit.begin(), visit.end(), 0);
  std::sort(visit.begin(), visit.end(), [&](int32_t a, int32_t b) {
    return breadth[a] != breadth[b] ? breadth[a] > breadth[b] : a < b;
  });
  std::vector<int32_t> rank(steps);
  for (int32_t r = 0; r < steps; ++r) rank[visit[r]] = r;
  const RangeMin first_visit(std::move(rank));

  std::vector<int32_t> key(records.size());
  for (size_t i = 0; i < records.size(); ++i) key[i] = first_visit.min(records[i].first, records[i].last);
  std::vector<int32_t> order(records.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (key[a] != key[b]) return key[a] < key[b];
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    return a < b;
  });
  return order;
}

}  // namespace memplan
