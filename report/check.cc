#include "report/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "onnx_import/errors.h"
#include "report/estimate_format.h"
#include "report/files.h"
#include "report/json_text.h"
#include "report/option_choices.h"
#include "report/sizes.h"

namespace memplan {

nlohmann::ordered_json baseline_to_json(const Baseline& b, const Estimate& e) {
  nlohmann::ordered_json j;
  j["schema"] = kBaselineSchema;
  j["model"] = b.model;
  j["configuration"] = b.configuration;
  j["total_bytes"] = b.total_bytes;
  j["metric"] = b.metric;
  j["metric_bytes"] = b.metric_bytes;
  j["breakdown"] = breakdown_to_json(e.breakdown);
  j["memplan_version"] = MEMPLAN_VERSION;
  return j;
}

Baseline baseline_from_json_text(const std::string& text, const std::string& origin) {
  Baseline b;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || j.value("schema", "") != kBaselineSchema)
      throw InputError("baseline " + origin + ": not a memplan baseline (expected \"schema\": \"" + kBaselineSchema +
                       "\"; write one with --write-baseline)");
    b.model = j.at("model").get<std::string>();
    b.configuration = j.at("configuration").get<std::string>();
    b.total_bytes = j.at("total_bytes").get<uint64_t>();
    b.metric = j.value("metric", std::string("total"));  // baselines before --metric compared total_bytes
    const std::vector<std::string> metrics = kMetricChoices.names();
    if (std::find(metrics.begin(), metrics.end(), b.metric) == metrics.end())
      throw InputError("baseline " + origin + ": metric \"" + b.metric + "\" is not " +
                       fmt::format("{}", fmt::join(kMetricChoices.names(), ", ")));
    b.metric_bytes = b.metric == "total" ? b.total_bytes : j.at("metric_bytes").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError("baseline " + origin + ": " + e.what());
  }
  if (b.total_bytes == 0 || b.metric_bytes == 0)
    throw InputError("baseline " + origin + ": " + (b.total_bytes == 0 ? "total_bytes" : "metric_bytes") + " is 0");
  return b;
}

CheckResult run_check(const Estimate& e, const std::string& configuration, std::optional<uint64_t> budget,
                      const std::optional<Baseline>& baseline, double max_increase_percent,
                      const std::optional<IterationsAtCapacity>& run, const std::string& metric) {
  CheckResult r;
  if (budget) {
    // The budget is device memory: the step runs in it when its required bytes fit (the caching allocator
    // flushes its cache and retries before failing), as fit decides. The total is what it reserves unconstrained.
    LimitResult l;
    l.kind = "budget";
    l.limit_bytes = *budget;
    l.value_bytes = e.required_bytes;
    l.passed = e.required_bytes <= *budget;
    const std::string needs = e.required_bytes == e.total_bytes
                                  ? format_bytes(e.required_bytes)
                                  : fmt::format("{} (reserving {} unconstrained)", format_bytes(e.required_bytes),
                                                format_bytes(e.total_bytes));
    const int64_t retries = e.at_budget && e.at_budget->budget_bytes == *budget ? e.at_budget->alloc_retries : 0;
    l.message = l.passed ? fmt::format("budget: {} fits in {} ({} to spare{})", needs, format_bytes(*budget),
                                       format_bytes(*budget - e.required_bytes),
                                       retries == 0 ? ""
                                                    : fmt::format("; the allocator flushes its cache {} time{} a step "
                                                                  "to run it there", retries, retries == 1 ? "" : "s"))
                         : fmt::format("budget: {} exceeds the budget {} by {} ({} B over)", needs,
                                       format_bytes(*budget), format_bytes(e.required_bytes - *budget),
                                       format_count(e.required_bytes - *budget));
    l.run = run;
    // The step run on the budget itself: PyTorch's caching allocator is not monotone in the capacity (a step can run
    // at required_bytes, fail one 2 MiB unit above it and run again further up: docs/planner.md), so a budget above
    // required_bytes is checked where it is.
    const bool at_this_budget = e.at_budget && e.at_budget->budget_bytes == *budget;
    if (l.passed && at_this_budget && !e.at_budget->runs) {
      l.passed = false;
      l.message = fmt::format("budget: the step needs {} at the least, but on {} itself it does not run: the caching "
                              "allocator's request for {} cannot be served there (capacities are not monotone: a "
                              "little less or more may run)",
                              needs, format_bytes(*budget), e.at_budget->out_of_memory_at);
    } else if (l.passed && run && !run->runs) {  // fit's run check (report/fit.cc check_run), on the one budget
      l.passed = false;
      const std::string where = run->steady_iterations == 0
                                    ? std::string("the first iteration")
                                    : fmt::format("steady iteration {} after the first, whose blocks PyTorch's caching "
                                                  "allocator kept cached,", run->steady_iterations);
      l.message = fmt::format("budget: the steady step needs {} and fits in {}, but the run does not: {} needs a "
                              "cudaMalloc the budget cannot serve (fit answers with the largest value whose run fits)",
                              needs, format_bytes(*budget), where);
    } else if (l.passed && run) {
      l.message += fmt::format("; the first iteration and steady ones after it run there ({})",
                               run->settled ? fmt::format("the cache settles after {} steady iteration{}",
                                                          run->steady_iterations, run->steady_iterations == 1 ? "" : "s")
                                            : fmt::format("{} steady iterations replayed", run->steady_iterations));
    }
    r.limits.push_back(l);
  }
  if (baseline) {
    if (baseline->configuration != configuration)
      throw InputError("the baseline was written for \"" + baseline->configuration + "\" but this check is for \"" +
                       configuration + "\": pass the same options, or write a new baseline with --write-baseline");
    if (baseline->metric != metric)
      throw InputError("the baseline records --metric " + baseline->metric + " but this check compares --metric " +
                       metric + ": pass --metric " + baseline->metric + ", or write a new baseline with --write-baseline");
    const uint64_t value = metric_bytes(e, kMetricChoices.parse(metric, "--metric"));
    LimitResult l;
    l.kind = "regression";
    l.metric = metric;
    l.baseline_bytes = baseline->metric_bytes;
    l.value_bytes = value;
    l.max_increase_percent = max_increase_percent;
    const double base = static_cast<double>(baseline->metric_bytes);
    l.limit_bytes = static_cast<uint64_t>(std::floor(base * (1.0 + max_increase_percent / 100.0)));
    l.change_percent = (static_cast<double>(value) - base) / base * 100.0;
    l.passed = value <= l.limit_bytes;
    const std::string change = fmt::format("{:+.2f}%", l.change_percent);
    const std::string what = metric == "total" ? format_bytes(value) : metric + " " + format_bytes(value);
    l.message = l.passed ? fmt::format("regression: {} is {} against the baseline {} (limit +{}%)", what, change,
                                       format_bytes(baseline->metric_bytes), max_increase_percent)
                         : fmt::format("regression: {} is {} against the baseline {}, over the limit of +{}% by {}",
                                       what, change, format_bytes(baseline->metric_bytes), max_increase_percent,
                                       format_bytes(value - l.limit_bytes));
    r.limits.push_back(l);
  }
  for (const LimitResult& l : r.limits) r.passed = r.passed && l.passed;
  return r;
}

nlohmann::ordered_json check_to_json(const CheckResult& r, const Estimate& e, const std::string& configuration) {
  nlohmann::ordered_json j;
  j["schema"] = kCheckSchema;
  j["model"] = e.model;
  j["configuration"] = configuration;
  j["passed"] = r.passed;
  j["total_bytes"] = e.total_bytes;
  j["required_bytes"] = e.required_bytes;
  if (e.runtime != Runtime::Ideal) {  // the three metrics: allocated, reserved, device (report/device_memory.h)
    j["allocated_bytes"] = e.allocated_bytes;
    j["reserved_bytes"] = e.reserved_bytes;
    j["device_bytes"] = e.device_bytes;
    j["outside_allocator"] = outside_allocator_json(e.outside);
  }
  nlohmann::ordered_json limits = nlohmann::ordered_json::array();
  for (const LimitResult& l : r.limits) {
    nlohmann::ordered_json x;
    x["kind"] = l.kind;
    x["passed"] = l.passed;
    x["limit_bytes"] = l.limit_bytes;
    x["value_bytes"] = l.value_bytes;
    if (l.kind == "budget")  // the budget less the required bytes: negative by how much it is over
      x["margin_bytes"] = l.passed ? static_cast<int64_t>(l.limit_bytes - l.value_bytes)
                                   : -static_cast<int64_t>(l.value_bytes - l.limit_bytes);
    if (l.run) {
      nlohmann::ordered_json run;
      run["runs"] = l.run->runs;
      run["steady_iterations"] = l.run->steady_iterations;
      run["settled"] = l.run->settled;
      x["run"] = run;
    }
    if (l.kind == "regression") {
      x["metric"] = l.metric;
      x["baseline_bytes"] = l.baseline_bytes;
      x["max_increase_percent"] = l.max_increase_percent;
      x["change_percent"] = std::round(l.change_percent * 1000.0) / 1000.0;
    }
    x["message"] = l.message;
    limits.push_back(x);
  }
  j["limits"] = limits;
  if (e.cudnn_workspace && e.at_budget)
    j["cudnn_workspace"] = cudnn_decision_json(*e.cudnn_workspace, e.at_budget->budget_bytes, e.breakdown.fixed);
  return j;
}

std::string check_to_text(const CheckResult& r, const Estimate& e, const std::string& configuration) {
  std::string out = fmt::format("{}\n  {}\n  total {} ({} B)", e.model, configuration, format_bytes(e.total_bytes),
                                format_count(e.total_bytes));
  if (e.runtime != Runtime::Ideal)
    out += fmt::format(", device {} with {} outside the allocator (what nvidia-smi shows)", format_bytes(e.device_bytes),
                       format_bytes(e.outside.total()));
  out += "\n";
  if (r.limits.empty()) out += "  no limit given: pass --budget SIZE and/or --baseline FILE\n";
  for (const LimitResult& l : r.limits) out += fmt::format("  {}  {}\n", l.passed ? "PASS" : "FAIL", l.message);
  if (e.cudnn_workspace && e.at_budget)
    out += cudnn_decision_text(*e.cudnn_workspace, e.at_budget->budget_bytes, e.breakdown.fixed);
  return out;
}

std::string check_to_markdown(const CheckResult& r, const Estimate& e, const std::string& configuration) {
  std::string out = fmt::format("### memplan check: {} `{}`\n\n{} — total **{}**\n\n", r.passed ? "✅" : "❌", e.model,
                                configuration, format_bytes(e.total_bytes));
  if (!r.limits.empty()) {
    out += "| limit | result | detail |\n|---|---|---|\n";
    for (const LimitResult& l : r.limits)
      out += fmt::format("| {} | {} | {} |\n", l.kind, l.passed ? "pass" : "**fail**", l.message);
  }
  return out;
}

CheckOutcome check_model(const CheckArgs& c) {
  CheckOutcome out;
  out.estimated = estimate_model(c.estimate);
  const ConfiguredEstimate& est = out.estimated;
  // --budget, else the --gpu's (to_estimate_options), on which the estimate also ran the step.
  const std::optional<uint64_t> budget =
      est.estimate.at_budget ? std::optional(est.estimate.at_budget->budget_bytes) : std::nullopt;
  std::optional<Baseline> baseline;
  if (!c.baseline.empty()) baseline = baseline_from_json_text(read_text_file(c.baseline, "--baseline"), c.baseline);
  // The steady step fitting alone is not the run fitting: replay the first iteration and steady ones on the budget,
  // as fit checks its answer (none where the step does not fit, or the runtime has no caching allocator's carry-over).
  std::optional<IterationsAtCapacity> run;
  if (budget && est.estimate.required_bytes <= *budget)
    run = iterations_on_budget(*est.graph, est.options, *budget);
  out.result = run_check(est.estimate, est.configuration, budget, baseline, c.max_increase_percent, run, c.metric);
  if (!c.write_baseline.empty()) {
    refuse_model_as_output(c.write_baseline, c.estimate.model.path, "--write-baseline");
    const Baseline b{std::filesystem::path(c.estimate.model.path).filename().string(), est.configuration,
                     est.estimate.total_bytes, c.metric,
                     metric_bytes(est.estimate, kMetricChoices.parse(c.metric, "--metric"))};
    write_text_file(c.write_baseline, json_text(baseline_to_json(b, est.estimate)), "the baseline to ");
  }
  return out;
}

}  // namespace memplan
