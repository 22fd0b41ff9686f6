// Liveness: the live range of every buffer on the schedule's clock, and the lower bound it implies.
// A pure pass over a fixed order (as XLA's HloLiveRange); packing and simulation consume its output.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "planner/program.h"

namespace memplan {

// One inclusive range per buffer, indexed by buffer id.
//  - a buffer lives from the step that writes it (step 0 if live_at_start) to its last reader
//    (the last step if live_at_end); written and never read, it lives only at its own step;
//  - resident buffers get the whole program [0, last step] (they are never packed);
//  - a buffer read before it is written, written twice, written while live_at_start, never written
//    nor live at start, or named by an out-of-range id throws memplan::InternalError: the cost model
//    built an inconsistent program.
std::vector<LiveRange> compute_liveness(const Program& program);

// Live bytes of the non-resident buffers over the schedule. The peak is the lower bound of any
// allocator for this order (XLA's NoFragmentationStatsHeap): arena − bound is fragmentation.
struct LiveBytes {
  uint64_t peak_bytes = 0;      // max over steps of live bytes (the lower bound)
  int32_t peak_step = 0;        // first step where the peak is reached (0 for an empty program)
  uint64_t resident_bytes = 0;  // sum of resident buffers, reported apart
  std::vector<uint64_t> per_step;                                     // live bytes at each step
  std::vector<std::array<uint64_t, kNumCategories>> per_step_by_category;  // same, split by Category
};

// Byte sums are overflow-checked (ShapeOverflow).
LiveBytes compute_live_bytes(const Program& program, const std::vector<LiveRange>& ranges);

// The lower bound alone: compute_live_bytes(program, compute_liveness(program)).peak_bytes.
uint64_t lower_bound(const Program& program);

}  // namespace memplan
