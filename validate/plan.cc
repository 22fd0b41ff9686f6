#include "validate/plan.h"

#include <algorithm>
#include <fstream>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan::validate {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw InputError(source + ": " + what);
}

const json& member(const json& obj, const char* key, const std::string& where, const std::string& source) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(source, where + " has no \"" + key + "\"");
  return *it;
}

uint64_t as_u64(const json& value, const std::string& where, const std::string& source) {
  if (!value.is_number_unsigned()) fail(source, where + " must be a non-negative integer, got " + value.dump());
  return value.get<uint64_t>();
}

std::string as_string(const json& value, const std::string& where, const std::string& source) {
  if (!value.is_string()) fail(source, where + " must be a string, got " + value.dump());
  return value.get<std::string>();
}

uint64_t u64_member(const json& obj, const char* key, const std::string& where, const std::string& source) {
  return as_u64(member(obj, key, where, source), where + "." + key, source);
}

std::string buffer_where(size_t index, const std::string& tensor) {
  return "buffers[" + std::to_string(index) + "] ('" + tensor + "')";
}

PlanBuffer parse_buffer(const json& entry, size_t index, const std::string& source) {
  std::string where = "buffers[" + std::to_string(index) + "]";
  if (!entry.is_object()) fail(source, where + " must be an object");
  PlanBuffer b;
  b.tensor = as_string(member(entry, "tensor", where, source), where + ".tensor", source);
  where = buffer_where(index, b.tensor);
  b.bytes = u64_member(entry, "bytes", where, source);
  b.offset = u64_member(entry, "offset", where, source);
  b.first = u64_member(entry, "first", where, source);
  b.last = u64_member(entry, "last", where, source);
  return b;
}

void check_buffer(const Plan& plan, const PlanBuffer& b, size_t index) {
  const std::string where = buffer_where(index, b.tensor);
  const uint64_t steps = plan.schedule.size();
  if (b.first > b.last)
    fail(plan.source, where + ": first step " + std::to_string(b.first) + " is after last step " +
                          std::to_string(b.last));
  if (b.last >= steps)
    fail(plan.source, where + ": last step " + std::to_string(b.last) + " is outside the schedule of " +
                          std::to_string(steps) + " steps");
  uint64_t end = 0;
  if (__builtin_add_overflow(b.offset, b.bytes, &end))
    fail(plan.source, where + ": offset + bytes overflows 64 bits");
  if (end > plan.arena_bytes)
    fail(plan.source, where + ": offset " + std::to_string(b.offset) + " + bytes " + std::to_string(b.bytes) +
                          " = " + std::to_string(end) + " exceeds arena_bytes " + std::to_string(plan.arena_bytes));
  if (plan.alignment > 0 && b.offset % plan.alignment != 0)
    fail(plan.source, where + ": offset " + std::to_string(b.offset) + " is not a multiple of the plan's alignment " +
                          std::to_string(plan.alignment));
}

}  // namespace

Plan parse_plan(const json& doc, const std::string& source) {
  if (!doc.is_object()) fail(source, "the plan must be a JSON object");
  const std::string schema = as_string(member(doc, "schema", "the plan", source), "schema", source);
  if (schema != kPlanSchema) fail(source, "schema is \"" + schema + "\", this harness reads \"" + kPlanSchema + "\"");

  Plan plan;
  plan.source = source;
  if (auto it = doc.find("model"); it != doc.end()) plan.model = as_string(*it, "model", source);
  plan.arena_bytes = u64_member(doc, "arena_bytes", "the plan", source);
  plan.lower_bound_bytes = u64_member(doc, "lower_bound_bytes", "the plan", source);
  if (auto it = doc.find("alignment"); it != doc.end()) plan.alignment = as_u64(*it, "alignment", source);

  const json& schedule = member(doc, "schedule", "the plan", source);
  if (!schedule.is_array()) fail(source, "schedule must be an array of step names");
  for (size_t i = 0; i < schedule.size(); ++i)
    plan.schedule.push_back(as_string(schedule[i], "schedule[" + std::to_string(i) + "]", source));

  const json& buffers = member(doc, "buffers", "the plan", source);
  if (!buffers.is_array()) fail(source, "buffers must be an array");
  for (size_t i = 0; i < buffers.size(); ++i) plan.buffers.push_back(parse_buffer(buffers[i], i, source));

  if (auto it = doc.find("resident"); it != doc.end()) {
    if (!it->is_array()) fail(source, "resident must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& entry = (*it)[i];
      std::string where = "resident[" + std::to_string(i) + "]";
      if (!entry.is_object()) fail(source, where + " must be an object");
      ResidentTensor r;
      r.tensor = as_string(member(entry, "tensor", where, source), where + ".tensor", source);
      r.bytes = u64_member(entry, "bytes", where + " ('" + r.tensor + "')", source);
      plan.resident.push_back(std::move(r));
    }
  }

  if (plan.buffers.size() > UINT32_MAX) fail(source, "more than 2^32 buffers");
  for (size_t i = 0; i < plan.buffers.size(); ++i) check_buffer(plan, plan.buffers[i], i);
  resident_bytes(plan);  // throws on overflow
  live_bytes_lower_bound(plan);
  return plan;
}

Plan load_plan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the plan file");
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw InputError(path + ": not valid JSON");
  return parse_plan(doc, path);
}

uint64_t live_bytes_lower_bound(const Plan& plan) {
  // Sweep over steps: +bytes where a buffer starts, -bytes one step after it ends.
  std::vector<uint64_t> starts(plan.schedule.size() + 1, 0), ends(plan.schedule.size() + 1, 0);
  for (const PlanBuffer& b : plan.buffers) {
    starts[b.first] = checked_add(starts[b.first], b.bytes, "live bytes");
    ends[b.last + 1] = checked_add(ends[b.last + 1], b.bytes, "live bytes");
  }
  uint64_t live = 0, peak = 0;
  for (size_t step = 0; step < plan.schedule.size(); ++step) {
    live -= ends[step];  // buffers whose last step was step - 1
    live = checked_add(live, starts[step], "live bytes");
    peak = std::max(peak, live);
  }
  return peak;
}

uint64_t resident_bytes(const Plan& plan) {
  uint64_t total = 0;
  for (const ResidentTensor& r : plan.resident) total = checked_add(total, r.bytes, "resident bytes");
  return total;
}

}  // namespace memplan::validate
