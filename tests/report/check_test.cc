// check (report/check.cc): fit's run check under --budget (a training step that fits the budget alone fails the
// limit when the first iteration then steady ones on one caching allocator of the budget do not run), and --metric.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "onnx_import/errors.h"

#include "report/check.h"
#include "report/fit.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::zoo_path;

const LimitResult& budget_limit(const CheckOutcome& out) {
  for (const LimitResult& l : out.result.limits)
    if (l.kind == "budget") return l;
  throw std::logic_error("no budget limit");
}

TEST(CheckRun, AStepThatFitsAloneFailsWhenItsRunDoesNot) {
  // vit_b_16 training (fp32, AdamW) on an A100-80GB: fit's answer is lowered by its run check below the value
  // whose steady step alone fits (tests/report/fit_test.cc FitRun). check at that steady value passes the step
  // and must fail the budget; at fit's answer it passes, its run checked.
  EstimateArgs e;
  e.model.path = zoo_path("vit_b_16_train.onnx");
  e.mode = "train";
  e.gpu = "A100-80GB";
  e.top = 0;
  const FitOutcome fit = fit_model(FitArgs{e, FitSettings{}, ""});
  ASSERT_TRUE(fit.answer && fit.answer->run);
  const int64_t answer = fit.answer->result.value, steady = fit.answer->run->steady_value;
  ASSERT_LT(answer, steady);

  CheckArgs c;
  c.estimate = e;
  c.estimate.model.batch = steady;
  const CheckOutcome over = check_model(c);
  const LimitResult& l = budget_limit(over);
  EXPECT_LE(over.estimated.estimate.required_bytes, l.limit_bytes);  // the step alone fits
  ASSERT_TRUE(l.run);
  EXPECT_FALSE(l.run->runs);
  EXPECT_FALSE(l.passed);
  EXPECT_FALSE(over.result.passed);
  EXPECT_NE(l.message.find("but the run does not"), std::string::npos) << l.message;

  c.estimate.model.batch = answer;
  const CheckOutcome fits = check_model(c);
  ASSERT_TRUE(budget_limit(fits).run);
  EXPECT_TRUE(budget_limit(fits).run->runs);
  EXPECT_TRUE(fits.result.passed);
}

TEST(CheckRun, InferenceHasNoRunToCheck) {
  EstimateArgs e;
  e.model.path = zoo_path("vit_b_16.onnx");
  e.gpu = "A100-80GB";
  e.model.batch = 8;
  const CheckOutcome out = check_model(CheckArgs{e, "", 1.0, ""});
  EXPECT_FALSE(budget_limit(out).run);
  EXPECT_TRUE(out.result.passed);
}

// A baseline as --write-baseline writes it, with a hand-chosen figure for its metric.
std::string baseline_text(const std::string& configuration, const std::string& metric, uint64_t bytes) {
  nlohmann::ordered_json j;
  j["schema"] = kBaselineSchema;
  j["model"] = "gpt_tiny_train.onnx";
  j["configuration"] = configuration;
  j["total_bytes"] = metric.empty() || metric == "total" ? bytes : uint64_t{1} << 30;
  if (!metric.empty()) {
    j["metric"] = metric;
    j["metric_bytes"] = bytes;
  }
  return j.dump();
}

TEST(CheckMetric, TheRegressionComparesTheChosenFigure) {
  EstimateArgs e;
  e.model.path = zoo_path("gpt_tiny_train.onnx");
  e.model.batch = 2;
  e.model.dims = {"seq=64"};
  e.mode = "train";
  const ConfiguredEstimate c = estimate_model(e);
  const Estimate& est = c.estimate;
  ASSERT_LT(est.allocated_bytes, est.total_bytes);  // the metrics differ, so comparing the wrong one would show
  // A baseline 2 % below today's allocated peak: +2.00 % fails a +1 % limit and passes a +3 % one.
  const uint64_t base = static_cast<uint64_t>(std::llround(static_cast<double>(est.allocated_bytes) / 1.02));
  const Baseline b = baseline_from_json_text(baseline_text(c.configuration, "allocated", base), "test");
  const CheckResult over = run_check(est, c.configuration, std::nullopt, b, 1.0, std::nullopt, "allocated");
  ASSERT_EQ(over.limits.size(), 1u);
  EXPECT_FALSE(over.passed);
  EXPECT_EQ(over.limits[0].value_bytes, est.allocated_bytes);
  EXPECT_NEAR(over.limits[0].change_percent, 2.0, 1e-4);
  EXPECT_NE(over.limits[0].message.find("allocated"), std::string::npos) << over.limits[0].message;
  EXPECT_TRUE(run_check(est, c.configuration, std::nullopt, b, 3.0, std::nullopt, "allocated").passed);
  // The same baseline against --metric total: refused, naming both, never compared across metrics.
  try {
    run_check(est, c.configuration, std::nullopt, b, 3.0, std::nullopt, "total");
    ADD_FAILURE() << "a baseline of another metric was compared";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--metric allocated"), std::string::npos) << error.what();
  }
  // A baseline written before --metric (no metric key) is a total: its total_bytes compared with today's total.
  const Baseline old = baseline_from_json_text(baseline_text(c.configuration, "", est.total_bytes), "old");
  EXPECT_EQ(old.metric, "total");
  const CheckResult same = run_check(est, c.configuration, std::nullopt, old, 0.0);
  EXPECT_TRUE(same.passed);
  EXPECT_EQ(same.limits[0].change_percent, 0.0);
  // An unknown metric in a baseline file: one message naming the file.
  auto refusal = [&](const std::string& metric, uint64_t bytes) -> std::string {
    try {
      baseline_from_json_text(baseline_text(c.configuration, metric, bytes), "bad.json");
    } catch (const InputError& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_EQ(refusal("peak", 5), "baseline bad.json: metric \"peak\" is not total, allocated, reserved, device");
  EXPECT_EQ(refusal("device", 0), "baseline bad.json: metric_bytes is 0");
}

}  // namespace
}  // namespace memplan
