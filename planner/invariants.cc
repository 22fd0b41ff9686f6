#include "planner/invariants.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

namespace memplan {
namespace {

std::string label(int32_t i, const std::vector<std::string>* names) {
  if (names && static_cast<size_t>(i) < names->size()) return "'" + (*names)[i] + "'";
  return "record " + std::to_string(i);
}

// [start, end) of a record's bytes, with end saturated so a huge offset cannot wrap around.
uint64_t end_of(uint64_t offset, uint64_t bytes) {
  uint64_t end;
  return __builtin_add_overflow(offset, bytes, &end) ? UINT64_MAX : end;
}

}  // namespace

std::vector<PlanViolation> check_plan(const std::vector<UsageRecord>& records,
                                      const std::vector<uint64_t>& offsets, uint64_t arena_bytes,
                                      uint64_t alignment, const std::vector<std::string>* names) {
  std::vector<PlanViolation> out;
  if (offsets.size() != records.size()) {
    out.push_back({PlanViolation::Kind::BadInput, -1, -1,
                   std::to_string(offsets.size()) + " offsets for " + std::to_string(records.size()) + " records"});
    return out;
  }
  std::vector<int32_t> live;  // records that take space, with a valid range
  for (size_t i = 0; i < records.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const UsageRecord& r = records[i];
    if (r.first < 0 || r.last < r.first) {
      out.push_back({PlanViolation::Kind::BadInput, id, -1, label(id, names) + " has an invalid live range"});
      continue;
    }
    if (alignment > 1 && offsets[i] % alignment != 0)
      out.push_back({PlanViolation::Kind::Misaligned, id, -1,
                     label(id, names) + " at offset " + std::to_string(offsets[i]) + " is not aligned to " +
                         std::to_string(alignment)});
    if (r.bytes == 0) continue;
    if (end_of(offsets[i], r.bytes) > arena_bytes)
      out.push_back({PlanViolation::Kind::OutsideArena, id, -1,
                     label(id, names) + " [" + std::to_string(offsets[i]) + ", +" + std::to_string(r.bytes) +
                         ") ends past the arena of " + std::to_string(arena_bytes) + " bytes"});
    live.push_back(id);
  }

  // Events in time order; at a step, the records that ended at the previous step leave before the
  // records that start at this step arrive.
  std::vector<int32_t> by_first = live, by_last = live;
  std::stable_sort(by_first.begin(), by_first.end(),
                   [&](int32_t a, int32_t b) { return records[a].first < records[b].first; });
  std::stable_sort(by_last.begin(), by_last.end(),
                   [&](int32_t a, int32_t b) { return records[a].last < records[b].last; });
  std::set<std::pair<uint64_t, int32_t>> by_offset;  // live records keyed by (offset, id)
  size_t next_end = 0;
  auto overlap = [&](int32_t a, int32_t b) {
    const uint64_t lo = std::max(offsets[a], offsets[b]);
    const uint64_t hi = std::min(end_of(offsets[a], records[a].bytes), end_of(offsets[b], records[b].bytes));
    if (lo >= hi) return;
    out.push_back({PlanViolation::Kind::Overlap, std::min(a, b), std::max(a, b),
                   label(a, names) + " and " + label(b, names) + " are live at a common step and share bytes [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + ")"});
  };
  for (int32_t id : by_first) {
    const int32_t now = records[id].first;
    while (next_end < by_last.size() && records[by_last[next_end]].last < now) {
      by_offset.erase({offsets[by_last[next_end]], by_last[next_end]});
      ++next_end;
    }
    auto [it, inserted] = by_offset.insert({offsets[id], id});
    // Every live record that starts below us and reaches into us: walk down while they overlap. The
    // set is disjoint when the plan is valid, so the walk stops at the first neighbour in that case.
    for (auto below = it; below != by_offset.begin();) {
      --below;
      if (end_of(below->first, records[below->second].bytes) <= offsets[id]) break;
      overlap(below->second, id);
    }
    for (auto above = std::next(it); above != by_offset.end() && above->first < end_of(offsets[id], records[id].bytes);
         ++above)
      overlap(id, above->second);
  }
  return out;
}

}  // namespace memplan
