// Builds small plans in code for the replay tests: {tensor, bytes, offset, first, last} rows.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "validate/plan.h"

namespace memplan::validate::testing {

inline Plan make_plan(uint64_t arena_bytes, uint64_t steps, std::vector<PlanBuffer> buffers,
                      std::vector<ResidentTensor> resident = {}) {
  Plan plan;
  plan.source = "test";
  plan.arena_bytes = arena_bytes;
  for (uint64_t s = 0; s < steps; ++s) plan.schedule.push_back("step" + std::to_string(s));
  plan.buffers = std::move(buffers);
  plan.resident = std::move(resident);
  plan.lower_bound_bytes = live_bytes_lower_bound(plan);
  return plan;
}

// The fixture folder and the binary under test; the environment overrides the build paths, so the carried
// test binary can run on the GPU machine from another checkout (validate/gpu/run_gpu.sh).
inline std::string plans_dir() {
  const char* env = std::getenv("MEMPLAN_VALIDATE_PLANS");
  return env != nullptr ? env : MEMPLAN_VALIDATE_PLANS;
}

inline std::string validate_binary() {
  const char* env = std::getenv("MEMPLAN_VALIDATE_BIN");
  return env != nullptr ? env : MEMPLAN_VALIDATE_BIN;
}

}  // namespace memplan::validate::testing
