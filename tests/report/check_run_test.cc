// check --budget runs fit's run check (report/check.cc): a training step that fits the budget alone fails the
// limit when the first iteration then steady ones on one caching allocator of the budget do not run.
#include <gtest/gtest.h>

#include <string>

#include "report/check.h"
#include "report/fit.h"

namespace memplan {
namespace {

std::string zoo(const std::string& name) { return std::string(MEMPLAN_ZOO_DIR) + "/" + name; }

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
  e.model.path = zoo("vit_b_16_train.onnx");
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
  e.model.path = zoo("vit_b_16.onnx");
  e.gpu = "A100-80GB";
  e.model.batch = 8;
  const CheckOutcome out = check_model(CheckArgs{e, "", 1.0, ""});
  EXPECT_FALSE(budget_limit(out).run);
  EXPECT_TRUE(out.result.passed);
}

}  // namespace
}  // namespace memplan
