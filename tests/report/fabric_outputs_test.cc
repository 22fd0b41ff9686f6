// Lightning Fabric's output conversion (--outputs-to-default-dtype): --recipe litgpt sets it where Fabric's precision
// plugin copies the outputs (_FabricModule.forward's precision.convert_output: HalfPrecision for bf16-true and
// 16-true, MixedPrecision for bf16-mixed, BitsandbytesPrecision; 32-true's Precision returns them as they are), and
// the flag with float32 outputs, with accelerate's conversion or with a loss it is not modelled before is one
// message. The step's hand figures are tests/cost_models/fabric_outputs_test.cc's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "onnx_import/errors.h"
#include "report/option_checks.h"
#include "report/recipes.h"
#include "tests/report/option_rows.h"

namespace memplan {
namespace {

using testing::row_of;

CommandArgs litgpt(const std::string& precision) {
  CommandArgs a;
  a.estimate.model.path = MEMPLAN_ZOO_DIR "/llama_tiny_train.onnx";
  a.estimate.model.batch = 2;
  a.estimate.model.dims = {"seq=16"};
  a.estimate.mode = "train";
  a.estimate.recipe = "litgpt";
  a.estimate.precision = precision;
  return a;
}

// What settle_options leaves, or its message ("" when none).
std::string settle(CommandArgs& a, std::vector<const OptionSpec*> given) {
  try {
    settle_options(a, kEstimate, given);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(FabricOutputs, TheLitgptRecipeConvertsWhereFabricsPrecisionCopies) {
  for (const char* precision : {"bf16", "fp16", "amp-bf16"}) {
    CommandArgs a = litgpt(precision);
    EXPECT_EQ(settle(a, {row_of("--recipe"), row_of("--mode"), row_of("--precision")}), "") << precision;
    EXPECT_TRUE(a.estimate.outputs_to_default_dtype) << precision;
  }
  // The recipe's own precision (bf16-true), given nothing.
  CommandArgs plain = litgpt("fp32");
  EXPECT_EQ(settle(plain, {row_of("--recipe"), row_of("--mode")}), "");
  EXPECT_EQ(plain.estimate.precision, "bf16");
  EXPECT_TRUE(plain.estimate.outputs_to_default_dtype);
  // 32-true: float32 outputs, nothing copied.
  CommandArgs fp32 = litgpt("fp32");
  EXPECT_EQ(settle(fp32, {row_of("--recipe"), row_of("--mode"), row_of("--precision")}), "");
  EXPECT_FALSE(fp32.estimate.outputs_to_default_dtype);
  // QLoRA (BitsandbytesPrecision, bf16): copied as well.
  CommandArgs qlora = litgpt("bf16");
  qlora.estimate.frozen_dtype = "nf4";
  EXPECT_EQ(settle(qlora, {row_of("--recipe"), row_of("--mode"), row_of("--precision"), row_of("--frozen-dtype")}), "");
  EXPECT_TRUE(qlora.estimate.outputs_to_default_dtype);
}

TEST(FabricOutputs, FloatOutputsAccelerateOrAnotherLossAreOneMessage) {
  CommandArgs fp32 = litgpt("fp32");
  fp32.estimate.outputs_to_default_dtype = true;
  EXPECT_NE(settle(fp32, {row_of("--recipe"), row_of("--mode"), row_of("--precision"), row_of("--outputs-to-default-dtype")})
                .find("--outputs-to-default-dtype with --precision fp32: Fabric's 32-true precision"),
            std::string::npos);
  CommandArgs both = litgpt("amp-bf16");
  both.estimate.recipe = "";
  both.estimate.loss = "chunked-ce-tokens:4";
  both.estimate.outputs_to_default_dtype = true;
  both.estimate.outputs_to_fp32 = true;
  const std::string two = settle(both, {row_of("--mode"), row_of("--precision"), row_of("--loss"),
                                        row_of("--outputs-to-default-dtype"), row_of("--outputs-to-fp32")});
  // accelerate's rule sees the chunked loss first; either message names the flags given.
  EXPECT_NE(two.find("--outputs-to-fp32"), std::string::npos) << two;
  both.estimate.loss = "cross-entropy";
  EXPECT_NE(settle(both, {row_of("--mode"), row_of("--precision"), row_of("--loss"), row_of("--outputs-to-default-dtype"),
                          row_of("--outputs-to-fp32")})
                .find("--outputs-to-default-dtype with --outputs-to-fp32: Lightning Fabric's conversion (before the "
                      "loss) and accelerate's (after it)"),
            std::string::npos);
  CommandArgs whole = litgpt("bf16");
  whole.estimate.recipe = "";
  whole.estimate.outputs_to_default_dtype = true;
  EXPECT_NE(settle(whole, {row_of("--mode"), row_of("--precision"), row_of("--outputs-to-default-dtype")})
                .find("--outputs-to-default-dtype with --loss cross-entropy: not modelled"),
            std::string::npos);
  CommandArgs ok = litgpt("fp16");
  ok.estimate.recipe = "";
  ok.estimate.loss = "chunked-ce-tokens:4";
  ok.estimate.outputs_to_default_dtype = true;
  EXPECT_EQ(settle(ok, {row_of("--mode"), row_of("--precision"), row_of("--loss"), row_of("--outputs-to-default-dtype")}), "");
}

}  // namespace
}  // namespace memplan
