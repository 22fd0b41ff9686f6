// Replays a plan on a Device, step by step, in one allocation mode, and measures what it used.
//
// At each schedule step: every buffer whose first step it is is allocated (malloc/pool) or placed at its
// offset (arena) and filled with its own pattern; the device's usage is sampled; then every buffer whose last
// step it is has its pattern verified and is released. Buffers live at the same step therefore coexist in
// memory, and a byte of one overwritten by another is found at the victim's last step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "validate/device.h"
#include "validate/plan.h"

namespace memplan::validate {

// A buffer whose pattern was damaged while it was live: the plan let another live buffer overlap it.
struct Overlap {
  std::string victim;
  std::string culprit;  // the buffer whose pattern was found in the victim's bytes; empty if none matched
  uint64_t victim_index = 0;  // indices in the plan's buffers: names need not be unique
  std::optional<uint64_t> culprit_index;
  uint64_t first_bad_offset = 0;  // in the arena (arena mode) or in the victim (other modes)
  uint64_t mismatched_bytes = 0;
  uint64_t detected_at_step = 0;  // the victim's last step
  uint64_t culprit_first_step = 0;
};

struct ModeResult {
  Mode mode = Mode::kArena;
  uint64_t predicted_bytes = 0;  // arena: arena_bytes; malloc/pool: the lower bound; both + resident bytes
  uint64_t baseline_bytes = 0;   // device usage before the mode allocated anything
  uint64_t peak_used_bytes = 0;  // max device usage sampled after each step's allocations
  uint64_t measured_bytes = 0;   // peak_used_bytes - baseline_bytes
  uint64_t peak_step = 0;        // the step where the peak was sampled
  AllocatorHighWater allocator;  // the pool's own high-water marks (pool mode)
  std::vector<Overlap> overlaps;

  // (measured - predicted) / predicted in percent; none when nothing was predicted.
  std::optional<double> error_pct() const;
};

ModeResult replay(const Plan& plan, Mode mode, Device& device);

}  // namespace memplan::validate
