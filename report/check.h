// The CI memory gate: a budget and a regression limit against a committed baseline.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/estimate.h"
#include "report/estimate_config.h"

namespace memplan {

inline constexpr const char* kBaselineSchema = "memplan.baseline/1";
inline constexpr const char* kCheckSchema = "memplan.check/1";

struct Baseline {
  std::string model;          // file name of the model, for messages
  std::string configuration;  // describe_configuration() when it was written: must match to compare
  uint64_t total_bytes = 0;
  std::string metric = "total";  // check --metric when it was written (a baseline without one: total)
  uint64_t metric_bytes = 0;     // the estimate's figure for it (total_bytes for total)
};

nlohmann::ordered_json baseline_to_json(const Baseline& b, const Estimate& e);
Baseline baseline_from_json_text(const std::string& text, const std::string& origin);  // throws InputError

struct LimitResult {
  std::string kind;      // "budget" or "regression"
  bool passed = true;
  uint64_t limit_bytes = 0;   // budget, or baseline * (1 + max_increase)
  uint64_t value_bytes = 0;   // the estimate's total
  uint64_t baseline_bytes = 0;
  double max_increase_percent = 0;
  double change_percent = 0;  // regression: (value - baseline) / baseline * 100
  std::string metric;         // regression: the figure compared (check --metric)
  // budget, training on PyTorch's caching allocator: the first iteration then steady ones on one allocator of the
  // budget (iterations_on_budget, report/estimate.h), as fit checks its answer; a step that fits alone fails the
  // limit when its run does not.
  std::optional<IterationsAtCapacity> run;
  std::string message;        // one sentence: which limit and by how much
};

struct CheckResult {
  bool passed = true;
  std::vector<LimitResult> limits;
};

// Throws InputError when the baseline was written for another configuration. `run`: the budget's run check, when
// one applies (LimitResult::run).
CheckResult run_check(const Estimate& e, const std::string& configuration, std::optional<uint64_t> budget,
                      const std::optional<Baseline>& baseline, double max_increase_percent,
                      const std::optional<IterationsAtCapacity>& run = std::nullopt, const std::string& metric = "total");

// check as its flags name it, for every front end. The gate's budget is estimate.budget (so that
// --checkpoint auto also fits its checkpoints to it).
struct CheckArgs {
  EstimateArgs estimate;
  std::string baseline;        // a baseline file to compare with
  double max_increase_percent = 1.0;
  std::string write_baseline;  // write the current estimate as a baseline here
  std::string metric = "total";  // the figure the regression limit compares and a written baseline records
};
struct CheckOutcome {
  ConfiguredEstimate estimated;
  CheckResult result;
};
// The arguments must have passed validate_options(..., kCheck) (report/option_checks.h). Estimates, compares,
// then writes write_baseline when given. Throws InputError.
CheckOutcome check_model(const CheckArgs& args);

nlohmann::ordered_json check_to_json(const CheckResult& r, const Estimate& e, const std::string& configuration);
std::string check_to_text(const CheckResult& r, const Estimate& e, const std::string& configuration);
std::string check_to_markdown(const CheckResult& r, const Estimate& e, const std::string& configuration);

}  // namespace memplan
