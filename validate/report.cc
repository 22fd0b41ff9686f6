#include "validate/report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace memplan::validate {
namespace {

using nlohmann::ordered_json;

ordered_json optional_json(const std::optional<uint64_t>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }

ordered_json overlap_json(const Overlap& o) {
  ordered_json j;
  j["victim"] = o.victim;
  j["victim_index"] = o.victim_index;
  j["culprit"] = o.culprit_index ? ordered_json(o.culprit) : ordered_json(nullptr);
  j["culprit_index"] = optional_json(o.culprit_index);
  j["culprit_first_step"] = o.culprit_index ? ordered_json(o.culprit_first_step) : ordered_json(nullptr);
  j["detected_at_step"] = o.detected_at_step;
  j["first_bad_offset"] = o.first_bad_offset;
  j["mismatched_bytes"] = o.mismatched_bytes;
  return j;
}


ordered_json mode_json(const ModeResult& r, const Plan& plan) {
  ordered_json j;
  j["mode"] = mode_name(r.mode);
  j["predicted_bytes"] = r.predicted_bytes;
  j["predicted_from"] = r.mode == Mode::kArena ? "arena_bytes + resident" : "lower_bound + resident";
  j["measured_bytes"] = r.measured_bytes;
  if (auto e = r.error_pct()) j["error_pct"] = std::round(*e * 1000.0) / 1000.0;
  else j["error_pct"] = nullptr;
  j["baseline_used_bytes"] = r.baseline_bytes;
  j["peak_used_bytes"] = r.peak_used_bytes;
  j["peak_step"] = r.peak_step;
  j["peak_step_name"] = r.peak_step < plan.schedule.size() ? plan.schedule[r.peak_step] : "";
  j["allocator_used_high_bytes"] = optional_json(r.allocator.used_high);
  j["allocator_reserved_high_bytes"] = optional_json(r.allocator.reserved_high);
  j["overlaps"] = ordered_json::array();
  for (const Overlap& o : r.overlaps) j["overlaps"].push_back(overlap_json(o));
  return j;
}

// Bytes as people read them: exact below 1 MiB, MiB with three decimals above.
std::string mib(uint64_t bytes) {
  if (bytes < 1024 * 1024) return std::to_string(bytes) + " B";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

bool Report::has_overlap() const {
  for (const ModeResult& r : modes)
    if (!r.overlaps.empty()) return true;
  return false;
}

uint64_t Report::computed_lower_bound() const { return live_bytes_lower_bound(*plan); }

ordered_json to_json(const Report& report) {
  const Plan& plan = *report.plan;
  ordered_json j;
  j["schema"] = kValidateSchema;
  j["plan"] = plan.source;
  j["model"] = plan.model;
  ordered_json device;
  device["kind"] = report.device_kind;
  for (const auto& [key, value] : report.device_info) device[key] = value;
  j["device"] = device;
  ordered_json p;
  p["steps"] = plan.schedule.size();
  p["buffers"] = plan.buffers.size();
  p["arena_bytes"] = plan.arena_bytes;
  p["lower_bound_bytes"] = plan.lower_bound_bytes;
  p["computed_lower_bound_bytes"] = report.computed_lower_bound();
  p["lower_bound_matches"] = report.computed_lower_bound() == plan.lower_bound_bytes;
  p["resident_bytes"] = resident_bytes(plan);
  j["plan_check"] = p;
  j["modes"] = ordered_json::array();
  for (const ModeResult& r : report.modes) j["modes"].push_back(mode_json(r, plan));
  j["ok"] = !report.has_overlap();
  return j;
}

std::string to_text(const Report& report) {
  const Plan& plan = *report.plan;
  std::ostringstream out;
  out << "plan " << plan.source << (plan.model.empty() ? "" : " (" + plan.model + ")") << ": " << plan.schedule.size()
      << " steps, " << plan.buffers.size() << " buffers\n";
  out << "device " << report.device_kind;
  for (const auto& [key, value] : report.device_info) out << ", " << key << " " << value;
  out << "\n";
  out << "arena " << mib(plan.arena_bytes) << ", lower bound " << mib(plan.lower_bound_bytes) << " (recomputed "
      << mib(report.computed_lower_bound()) << "), resident " << mib(resident_bytes(plan)) << "\n";
  if (report.computed_lower_bound() != plan.lower_bound_bytes)
    out << "warning: the plan's lower_bound_bytes " << plan.lower_bound_bytes << " differs from the recomputed "
        << report.computed_lower_bound() << "\n";
  for (const ModeResult& r : report.modes) {
    out << mode_name(r.mode) << ": predicted " << mib(r.predicted_bytes) << ", measured " << mib(r.measured_bytes);
    if (auto e = r.error_pct()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%+.2f%%", *e);
      out << ", error " << buf;
    }
    if (r.allocator.used_high) out << ", pool used high " << mib(*r.allocator.used_high);
    if (r.allocator.reserved_high) out << ", pool reserved high " << mib(*r.allocator.reserved_high);
    out << (r.overlaps.empty() ? ", no overlap" : ", OVERLAP") << "\n";
    for (const Overlap& o : r.overlaps) {
      out << "  overlap: '" << o.victim << "' was overwritten";
      if (o.culprit_index) out << " by '" << o.culprit << "' (live from step " << o.culprit_first_step << ")";
      out << " while both were live: " << o.mismatched_bytes << " bytes damaged from offset " << o.first_bad_offset
          << ", found at step " << o.detected_at_step << " ("
          << (o.detected_at_step < plan.schedule.size() ? plan.schedule[o.detected_at_step] : "") << ")\n";
    }
  }
  return out.str();
}

}  // namespace memplan::validate
