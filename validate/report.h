// The harness's output: predicted vs measured per mode, the overlaps found, and the plan's own checks.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "validate/device.h"
#include "validate/plan.h"
#include "validate/replay.h"

namespace memplan::validate {

inline constexpr const char* kValidateSchema = "memplan.validate/1";

struct Report {
  const Plan* plan = nullptr;
  std::string device_kind;
  std::vector<std::pair<std::string, std::string>> device_info;
  std::vector<ModeResult> modes;

  bool has_overlap() const;
  uint64_t computed_lower_bound() const;
};

nlohmann::ordered_json to_json(const Report& report);
std::string to_text(const Report& report);

}  // namespace memplan::validate
