// Decreasing-size best fit, in the two orders XLA's heap simulator tries
// (xla/service/heap_simulator/heap_simulator.h: GlobalDecreasingSizeBestFitHeap with kSpatial and
// kTemporal, run side by side by ChooseBestHeapAlgorithm):
//  - spatial: size descending, then longer live range first, then record index;
//  - temporal: longer live range first, then size descending, then record index.
// Long-lived records placed early sit low in the arena and leave the short-lived ones to share the top.
#include <algorithm>
#include <numeric>

#include "planner/packing.h"
#include "planner/packing_place.h"

namespace memplan {
namespace {

int64_t span(const UsageRecord& r) { return static_cast<int64_t>(r.last) - r.first; }

}  // namespace

std::vector<int32_t> detail::best_fit_spatial_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes) {
  std::vector<int32_t> order(records.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    if (span(records[a]) != span(records[b])) return span(records[a]) > span(records[b]);
    return a < b;
  });
  return order;
}

std::vector<int32_t> detail::best_fit_temporal_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes) {
  std::vector<int32_t> order(records.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (span(records[a]) != span(records[b])) return span(records[a]) > span(records[b]);
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    return a < b;
  });
  return order;
}

}  // namespace memplan
