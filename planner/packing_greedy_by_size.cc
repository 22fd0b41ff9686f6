// Greedy by size (TFLite GPU delegate, memory_management/greedy_by_size_assignment.cc): place the largest
// records first, each into the best-fitting gap. Ties in size go to the lower record index.
#include <algorithm>
#include <numeric>

#include "planner/packing.h"
#include "planner/packing_place.h"

namespace memplan {

std::vector<int32_t> detail::greedy_by_size_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes) {
  std::vector<int32_t> order(records.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return sizes[a] != sizes[b] ? sizes[a] > sizes[b] : a < b;
  });
  return order;
}

}  // namespace memplan
