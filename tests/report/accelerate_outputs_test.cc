// accelerate's convert_outputs_to_fp32 (--outputs-to-fp32): the hf-* recipes set it where accelerate wraps the
// model's forward (Accelerator.prepare_model with native_amp, v1.14.0): the Trainer's bf16/fp16 on one GPU, DDP or
// FSDP1, not DeepSpeed (native_amp stays False) or FSDP2 (prepared by fsdp2_prepare_model); and the flag given
// without autocast, or with a loss that returns no whole logits, is one message. The step's hand figures are
// tests/cost_models/outputs_fp32_test.cc's.
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

CommandArgs training(const std::string& recipe, const std::string& precision, const std::string& shard) {
  CommandArgs a;
  a.estimate.model.path = MEMPLAN_ZOO_DIR "/llama_tiny_train.onnx";
  a.estimate.model.batch = 2;
  a.estimate.model.dims = {"seq=16"};
  a.estimate.mode = "train";
  a.estimate.recipe = recipe;
  a.estimate.precision = precision;
  a.estimate.shard = shard;
  if (shard != "none") a.estimate.gpus = 2;
  return a;
}

bool converts(CommandArgs a, std::vector<const OptionSpec*> more = {}) {
  std::vector<const OptionSpec*> given = {row_of("--recipe"), row_of("--mode"), row_of("--precision")};
  if (a.estimate.shard != "none") given.insert(given.end(), {row_of("--shard"), row_of("--gpus")});
  given.insert(given.end(), more.begin(), more.end());
  settle_options(a, kEstimate, given);
  return a.estimate.outputs_to_fp32;
}

TEST(AccelerateOutputs, TheRecipesConvertWhereAccelerateWrapsTheForward) {
  // (hf-peft-qlora under autocast is refused: --kbit-prep's 4-bit layers compute in --precision.)
  for (const char* recipe : {"hf-trainer", "hf-peft"}) {
    for (const char* shard : {"none", "ddp", "fsdp"})
      for (const char* amp : {"amp-bf16", "amp-fp16"}) EXPECT_TRUE(converts(training(recipe, amp, shard))) << recipe << shard << amp;
    // No autocast, so nothing converts: the model trained in its stored or given type (the Trainer's bf16=False).
    EXPECT_FALSE(converts(training(recipe, "bf16", "none"))) << recipe;
    EXPECT_FALSE(converts(training(recipe, "fp32", "none"))) << recipe;
    // DeepSpeed leaves native_amp off. (FSDP2, prepared without prepare_model's wrapper, runs no autocast: the
    // recipes refuse amp-* there, tests/report/accelerate_fsdp_test.cc.)
    EXPECT_FALSE(converts(training(recipe, "amp-bf16", "zero2"))) << recipe;
    // Liger's fused loss returns no logits.
    CommandArgs fused = training(recipe, "amp-bf16", "none");
    fused.estimate.loss = "fused-linear-ce";
    EXPECT_FALSE(converts(fused, {row_of("--loss")})) << recipe;
  }
}

std::string refusal(CommandArgs a, std::vector<const OptionSpec*> given) {
  try {
    settle_options(a, kEstimate, given);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(AccelerateOutputs, TheFlagWithoutAutocastOrWithAChunkedLossIsOneMessage) {
  CommandArgs pure = training("", "bf16", "none");
  pure.estimate.outputs_to_fp32 = true;
  EXPECT_NE(refusal(pure, {row_of("--mode"), row_of("--precision"), row_of("--outputs-to-fp32")})
                .find("--outputs-to-fp32 with --precision bf16: accelerate converts a forward's outputs only under its "
                      "mixed precision"),
            std::string::npos);
  CommandArgs chunked = training("", "amp-bf16", "none");
  chunked.estimate.outputs_to_fp32 = true;
  chunked.estimate.loss = "chunked-ce:4";
  EXPECT_NE(refusal(chunked, {row_of("--mode"), row_of("--precision"), row_of("--outputs-to-fp32"), row_of("--loss")})
                .find("--outputs-to-fp32 with --loss chunked-ce:4: not modelled"),
            std::string::npos);
  CommandArgs ok = training("", "amp-fp16", "none");
  ok.estimate.outputs_to_fp32 = true;
  EXPECT_EQ(refusal(ok, {row_of("--mode"), row_of("--precision"), row_of("--outputs-to-fp32")}), "");
}

}  // namespace
}  // namespace memplan
