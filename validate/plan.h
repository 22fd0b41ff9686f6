// The arena plan that `memplan plan` writes (docs/plan-json.md, schema "memplan.plan/1"), read and checked
// independently of the planner that made it: the harness must not trust what it is validating.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace memplan::validate {

// One tensor placed in the arena, live from step `first` to step `last` inclusive.
struct PlanBuffer {
  std::string tensor;  // for reports; not unique (a made-up name for a workspace may repeat)
  uint64_t bytes = 0;
  uint64_t offset = 0;
  uint64_t first = 0;
  uint64_t last = 0;
};

// A tensor kept outside the arena for the whole run (weights, graph constants).
struct ResidentTensor {
  std::string tensor;
  uint64_t bytes = 0;
};

struct Plan {
  std::string source;  // file name, for messages
  std::string model;
  uint64_t arena_bytes = 0;
  uint64_t lower_bound_bytes = 0;
  uint64_t alignment = 0;  // 0: the plan states none
  std::vector<std::string> schedule;
  std::vector<PlanBuffer> buffers;
  std::vector<ResidentTensor> resident;
};

inline constexpr const char* kPlanSchema = "memplan.plan/1";

// Parses and checks a plan; throws memplan::InputError (exit 2) naming the file and the offending entry when
// a field is missing or mistyped, a step is out of range, first > last, a buffer leaves the arena, or an
// offset breaks the plan's own alignment. Tensor names may repeat (docs/plan-json.md): indices are the identity.
Plan parse_plan(const nlohmann::json& doc, const std::string& source);
Plan load_plan(const std::string& path);

// The peak over steps of the bytes of buffers live at that step (inclusive lifetimes): what no allocator can
// beat for this schedule. Recomputed here so the plan's own lower_bound_bytes can be checked.
uint64_t live_bytes_lower_bound(const Plan& plan);

uint64_t resident_bytes(const Plan& plan);

}  // namespace memplan::validate
