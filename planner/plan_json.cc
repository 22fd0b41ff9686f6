#include "planner/plan_json.h"

#include <map>
#include <set>

#include "onnx_import/errors.h"
#include "planner/liveness.h"

namespace memplan {
namespace {

// Tensor names in a plan are unique (consumers key on them): the k-th repeat of a name (k >= 2), in buffer
// order, becomes "name#k" (a per-step "cublas_workspace" becomes "cublas_workspace#2", ...). Suffixes skip
// names already taken.
std::vector<std::string> unique_names(const Program& program) {
  std::set<std::string> taken;
  for (const Buffer& b : program.buffers) taken.insert(b.name);
  std::map<std::string, int> seen;
  std::vector<std::string> out;
  for (const Buffer& b : program.buffers) {
    int& count = seen[b.name];
    if (++count == 1) {
      out.push_back(b.name);
      continue;
    }
    std::string name = b.name + "#" + std::to_string(count);
    while (taken.count(name)) name = b.name + "#" + std::to_string(++count);
    taken.insert(name);
    out.push_back(name);
  }
  return out;
}

}  // namespace

Plan make_plan(const Program& program, const std::string& model, uint64_t alignment) {
  const std::vector<LiveRange> ranges = compute_liveness(program);
  const ProgramRecords pr = usage_records(program, ranges);
  const BestPacking best = choose_best(pr.records, alignment);

  Plan plan;
  plan.model = model;
  plan.arena_bytes = best.result.arena_bytes;
  plan.lower_bound_bytes = compute_live_bytes(program, ranges).peak_bytes;
  plan.alignment = alignment;
  plan.packing_algorithm = packing_algorithm_name(best.algorithm);
  for (const Step& s : program.steps) plan.schedule.push_back(s.name);
  const std::vector<std::string> names = unique_names(program);
  for (size_t i = 0; i < pr.records.size(); ++i) {
    const int32_t id = pr.buffer_ids[i];
    plan.buffers.push_back({names[id], program.buffers[id].bytes, best.result.offsets[i], pr.records[i].first,
                            pr.records[i].last});
  }
  for (size_t id = 0; id < program.buffers.size(); ++id)
    if (program.buffers[id].resident) plan.resident.push_back({names[id], program.buffers[id].bytes});

  if (const auto violations = check_plan(plan); !violations.empty())
    throw InternalError("the " + plan.packing_algorithm + " plan of '" + model + "' is invalid: " + violations[0].message);
  return plan;
}

nlohmann::ordered_json plan_to_json(const Plan& plan) {
  nlohmann::ordered_json j;
  j["schema"] = kPlanSchema;
  j["model"] = plan.model;
  j["arena_bytes"] = plan.arena_bytes;
  j["lower_bound_bytes"] = plan.lower_bound_bytes;
  j["alignment"] = plan.alignment;
  j["packing_algorithm"] = plan.packing_algorithm;
  j["schedule"] = plan.schedule;
  nlohmann::ordered_json buffers = nlohmann::ordered_json::array();
  for (const PlanBuffer& b : plan.buffers) {
    nlohmann::ordered_json e;
    e["tensor"] = b.tensor;
    e["bytes"] = b.bytes;
    e["offset"] = b.offset;
    e["first"] = b.first;
    e["last"] = b.last;
    buffers.push_back(std::move(e));
  }
  j["buffers"] = std::move(buffers);
  nlohmann::ordered_json resident = nlohmann::ordered_json::array();
  for (const PlanResident& r : plan.resident) {
    nlohmann::ordered_json e;
    e["tensor"] = r.tensor;
    e["bytes"] = r.bytes;
    resident.push_back(std::move(e));
  }
  j["resident"] = std::move(resident);
  return j;
}

// Tensor names come from ONNX strings, which need not be valid UTF-8: replace bad bytes rather than fail.
std::string plan_to_json_text(const Plan& plan) {
  return plan_to_json(plan).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

namespace {

const nlohmann::json& field(const nlohmann::json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) throw InputError("plan: " + where + " is not an object");
  auto it = obj.find(key);
  if (it == obj.end()) throw InputError("plan: " + where + " has no \"" + key + "\"");
  return *it;
}

uint64_t unsigned_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  const nlohmann::json& v = field(obj, key, where);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throw InputError("plan: " + where + " \"" + key + "\" is not a non-negative integer");
  return v.get<uint64_t>();
}

std::string string_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  const nlohmann::json& v = field(obj, key, where);
  if (!v.is_string()) throw InputError("plan: " + where + " \"" + key + "\" is not a string");
  return v.get<std::string>();
}

const nlohmann::json& array_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  const nlohmann::json& v = field(obj, key, where);
  if (!v.is_array()) throw InputError("plan: " + where + " \"" + key + "\" is not an array");
  return v;
}

}  // namespace

Plan plan_from_json(const nlohmann::json& j) {
  const std::string top = "the top level";
  Plan plan;
  if (const std::string schema = string_field(j, "schema", top); schema != kPlanSchema)
    throw InputError("plan: schema is \"" + schema + "\", expected \"" + kPlanSchema + "\"");
  plan.model = string_field(j, "model", top);
  plan.arena_bytes = unsigned_field(j, "arena_bytes", top);
  plan.lower_bound_bytes = unsigned_field(j, "lower_bound_bytes", top);
  plan.alignment = unsigned_field(j, "alignment", top);
  if (plan.alignment == 0) throw InputError("plan: alignment must be at least 1");
  if (j.contains("packing_algorithm")) plan.packing_algorithm = string_field(j, "packing_algorithm", top);
  for (const auto& s : array_field(j, "schedule", top)) {
    if (!s.is_string()) throw InputError("plan: a schedule entry is not a string");
    plan.schedule.push_back(s.get<std::string>());
  }
  const auto steps = static_cast<uint64_t>(plan.schedule.size());
  for (const auto& e : array_field(j, "buffers", top)) {
    const std::string where = "buffer " + std::to_string(plan.buffers.size());
    PlanBuffer b;
    b.tensor = string_field(e, "tensor", where);
    b.bytes = unsigned_field(e, "bytes", where);
    b.offset = unsigned_field(e, "offset", where);
    const uint64_t first = unsigned_field(e, "first", where), last = unsigned_field(e, "last", where);
    if (first > last || last >= steps)
      throw InputError("plan: " + where + " ('" + b.tensor + "') has live range [" + std::to_string(first) + ", " +
                       std::to_string(last) + "] outside a schedule of " + std::to_string(steps) + " steps");
    b.first = static_cast<int32_t>(first);
    b.last = static_cast<int32_t>(last);
    plan.buffers.push_back(std::move(b));
  }
  if (j.contains("resident"))
    for (const auto& e : array_field(j, "resident", top)) {
      const std::string where = "resident " + std::to_string(plan.resident.size());
      plan.resident.push_back({string_field(e, "tensor", where), unsigned_field(e, "bytes", where)});
    }
  std::set<std::string> names;
  for (const PlanBuffer& b : plan.buffers)
    if (!names.insert(b.tensor).second) throw InputError("plan: tensor '" + b.tensor + "' is listed twice");
  for (const PlanResident& r : plan.resident)
    if (!names.insert(r.tensor).second) throw InputError("plan: tensor '" + r.tensor + "' is listed twice");
  return plan;
}

Plan plan_from_json_text(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw InputError("plan: not valid JSON");
  return plan_from_json(j);
}

std::vector<PlanViolation> check_plan(const Plan& plan) {
  std::vector<UsageRecord> records;
  std::vector<uint64_t> offsets;
  std::vector<std::string> names;
  for (const PlanBuffer& b : plan.buffers) {
    records.push_back({b.bytes, b.first, b.last});
    offsets.push_back(b.offset);
    names.push_back(b.tensor);
  }
  return check_plan(records, offsets, plan.arena_bytes, plan.alignment, &names);
}

}  // namespace memplan
