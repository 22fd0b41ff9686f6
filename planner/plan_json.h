// The static arena plan and its file format, "memplan.plan/1" (docs/plan-json.md): what `memplan plan`
// writes and the validation harness replays. Writing is deterministic: keys in a fixed order, buffers in
// buffer-id order, no floating point.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/invariants.h"
#include "planner/packing.h"
#include "planner/program.h"

namespace memplan {

inline constexpr const char* kPlanSchema = "memplan.plan/1";

struct PlanBuffer {
  std::string tensor;
  uint64_t bytes = 0;
  uint64_t offset = 0;
  int32_t first = 0;  // inclusive schedule step indices
  int32_t last = 0;
};

struct PlanResident {
  std::string tensor;
  uint64_t bytes = 0;
};

struct Plan {
  std::string model;
  uint64_t arena_bytes = 0;
  uint64_t lower_bound_bytes = 0;  // peak live bytes of the schedule (exact sizes, no alignment)
  uint64_t alignment = kDefaultAlignment;
  std::string packing_algorithm;   // the algorithm whose offsets these are
  std::vector<std::string> schedule;  // step names in execution order
  std::vector<PlanBuffer> buffers;    // non-resident buffers, in buffer-id order
  std::vector<PlanResident> resident; // resident buffers, outside the arena, in buffer-id order
};

// Liveness, choose_best packing and the invariant checker over `program` in its own order. Tensor names
// are made unique: the k-th buffer (k >= 2, in buffer order) with an already used name is called
// "name#k". Throws InternalError if the chosen plan fails the checker (a planner bug).
Plan make_plan(const Program& program, const std::string& model, uint64_t alignment = kDefaultAlignment);

nlohmann::ordered_json plan_to_json(const Plan& plan);
std::string plan_to_json_text(const Plan& plan);  // 2-space indented, trailing newline

// Parses and validates the format (schema string, required keys and types, 0 <= first <= last < number of
// steps, alignment >= 1, no tensor named twice). Throws InputError naming the first problem. Does not check overlaps: run
// check_plan on the result for that.
Plan plan_from_json(const nlohmann::json& json);
Plan plan_from_json_text(const std::string& text);

// check_plan over a plan's buffers, naming them by tensor.
std::vector<PlanViolation> check_plan(const Plan& plan);

}  // namespace memplan
