#include "planner/packing_place.h"

#include <algorithm>
#include <string>
#include <utility>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan::detail {

// Two static indexes in flat arrays (no per-node allocation):
//  - a segment tree over steps, each record stored at the O(log T) canonical nodes of its range, so the
//    records containing a step are those on the root-to-leaf path (a stabbing query);
//  - the records sorted by first step, so those starting inside (first, last] are one contiguous run.
// Together they give every record sharing a step with [first, last], each exactly once.
OverlapIndex::OverlapIndex(const std::vector<UsageRecord>& records, int32_t steps) : steps_(std::max(steps, 1)) {
  for (size_t i = 0; i < records.size(); ++i)
    if (records[i].bytes != 0) by_first_.push_back(static_cast<int32_t>(i));
  std::stable_sort(by_first_.begin(), by_first_.end(),
                   [&](int32_t a, int32_t b) { return records[a].first < records[b].first; });
  start_begin_.assign(static_cast<size_t>(steps_) + 2, 0);  // start_begin_[t]: first position with first >= t
  for (int32_t id : by_first_) ++start_begin_[records[id].first + 1];
  for (size_t t = 1; t < start_begin_.size(); ++t) start_begin_[t] += start_begin_[t - 1];

  const size_t nodes = 4 * static_cast<size_t>(steps_);
  node_begin_.assign(nodes + 1, 0);
  for (size_t k = 0; k < by_first_.size(); ++k)  // count per node, then prefix sums, then fill (CSR)
    add_canonical(1, 0, steps_ - 1, records[by_first_[k]], static_cast<uint32_t>(k), true);
  for (size_t i = 1; i <= nodes; ++i) node_begin_[i] += node_begin_[i - 1];
  node_positions_.resize(node_begin_[nodes]);
  fill_.assign(node_begin_.begin(), node_begin_.end() - 1);
  for (size_t k = 0; k < by_first_.size(); ++k)
    add_canonical(1, 0, steps_ - 1, records[by_first_[k]], static_cast<uint32_t>(k), false);
  fill_ = {};
}

void OverlapIndex::add_canonical(size_t node, int32_t lo, int32_t hi, const UsageRecord& r, uint32_t position,
                                 bool count_only) {
  if (r.first <= lo && hi <= r.last) {
    if (count_only) {
      ++node_begin_[node + 1];
    } else {
      node_positions_[fill_[node]++] = position;
    }
    return;
  }
  const int32_t mid = lo + (hi - lo) / 2;
  if (r.first <= mid) add_canonical(2 * node, lo, mid, r, position, count_only);
  if (r.last > mid) add_canonical(2 * node + 1, mid + 1, hi, r, position, count_only);
}

template <typename F>
void OverlapIndex::for_each_containing(int32_t step, F&& f) const {
  size_t node = 1;
  int32_t lo = 0, hi = steps_ - 1;
  while (true) {
    for (size_t k = node_begin_[node]; k < node_begin_[node + 1]; ++k) f(node_positions_[k]);
    if (lo == hi) break;
    const int32_t mid = lo + (hi - lo) / 2;
    if (step <= mid) {
      node = 2 * node;
      hi = mid;
    } else {
      node = 2 * node + 1;
      lo = mid + 1;
    }
  }
}

int32_t validate_records(const std::vector<UsageRecord>& records) {
  int32_t steps = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const UsageRecord& r = records[i];
    if (r.first < 0 || r.last < r.first)
      throw InternalError("usage record " + std::to_string(i) + " has an invalid live range [" +
                          std::to_string(r.first) + ", " + std::to_string(r.last) + "]");
    steps = std::max(steps, r.last + 1);
  }
  return steps;
}

std::vector<uint64_t> aligned_sizes(const std::vector<UsageRecord>& records, uint64_t alignment) {
  if (alignment == 0) throw InputError("arena alignment must be at least 1 byte");
  std::vector<uint64_t> sizes(records.size());
  for (size_t i = 0; i < records.size(); ++i) sizes[i] = round_up(records[i].bytes, alignment);
  return sizes;
}

PackingResult place_in_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes,
                             const std::vector<int32_t>& order, const OverlapIndex& index) {
  PackingResult out;
  out.offsets.assign(records.size(), 0);
  // Where each placed record sits, by its position in the index; end == 0 means not placed yet (placed
  // records all have a size above 0).
  struct Slot {
    uint64_t offset = 0, end = 0;
  };
  std::vector<Slot> slots(index.by_first().size());
  std::vector<uint32_t> position(records.size(), 0);
  for (size_t k = 0; k < index.by_first().size(); ++k) position[index.by_first()[k]] = static_cast<uint32_t>(k);
  std::vector<std::pair<uint64_t, uint64_t>> neighbours;  // [offset, end) of placed records sharing a step
  const auto add_if_placed = [&](size_t k) {
    if (slots[k].end != 0) neighbours.emplace_back(slots[k].offset, slots[k].end);
  };
  for (int32_t id : order) {
    const uint64_t size = sizes[id];
    if (size == 0) continue;  // takes no space, overlaps nothing
    neighbours.clear();
    index.for_each_containing(records[id].first, add_if_placed);
    const auto [begin, end] = index.starting_within(records[id].first, records[id].last);
    for (size_t k = begin; k < end; ++k) add_if_placed(k);
    std::sort(neighbours.begin(), neighbours.end());
    // Walk the neighbours by offset; `top` is the end of everything seen so far, so a neighbour that
    // starts above it opens a gap [top, its offset). The smallest gap that fits wins, the lowest on a tie.
    uint64_t top = 0, best_offset = 0, best_gap = UINT64_MAX;
    bool found = false;
    for (const auto& [start, end] : neighbours) {
      if (start > top) {
        const uint64_t gap = start - top;
        if (gap >= size && gap < best_gap) {
          best_gap = gap;
          best_offset = top;
          found = true;
        }
      }
      top = std::max(top, end);
    }
    const uint64_t offset = found ? best_offset : top;
    const uint64_t end_of_id = checked_add(offset, size, "arena bytes");
    slots[position[id]] = {offset, end_of_id};
    out.offsets[id] = offset;
    out.arena_bytes = std::max(out.arena_bytes, end_of_id);
  }
  return out;
}

}  // namespace memplan::detail
