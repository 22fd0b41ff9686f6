// accelerate's mixed precision under FSDP (the HF Trainer's bf16/fp16 with --shard fsdp or fsdp2). FSDP1: a policy in
// autocast's type under torch.autocast (accelerate utils/dataclasses.py FullyShardedDataParallelPlugin.
// set_mixed_precision and accelerator.py prepare_model, v1.14.0), which the hf-* recipes set. FSDP2: accelerate
// prepares the model with fsdp2_prepare_model, never prepare_model, so there is no autocast: the recipes refuse
// amp-* there naming what accelerate builds (--precision fp32 --fsdp2-mp T:T). The flags themselves are modelled on
// both FSDPs with bf16 and fp16 (a loop's own autocast); a policy that is not autocast's type is one message naming
// both flags. The hand figures of the step are tests/cost_models/fsdp_amp_test.cc's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "onnx_import/errors.h"
#include "report/estimate_config.h"
#include "report/option_checks.h"
#include "report/recipes.h"
#include "tests/report/option_rows.h"

namespace memplan {
namespace {

using testing::row_of;

EstimateArgs tiny_llama() {
  EstimateArgs a;
  a.model.path = std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx";
  a.model.batch = 2;
  a.model.dims = {"seq=16"};
  a.top = 0;
  a.mode = "train";
  a.gpus = 2;
  return a;
}

std::string fsdp_refusal(const EstimateArgs& a) {
  try {
    validate_estimate_args(a);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The Trainer's amp-bf16 (amp-fp16) under FSDP1 gets accelerate's policy, bf16:bf16 (fp16:fp16); under FSDP2 the
// recipes refuse amp-* (no autocast there) and name the flags of what accelerate builds; without FSDP, or with a
// policy the user gave, the recipe leaves --fsdp2-mp alone.
TEST(AccelerateFsdp, RecipesSetThePolicyOfAutocastsType) {
  for (const char* recipe : {"hf-trainer", "hf-peft"})
    for (const char* type : {"bf16", "fp16"}) {
      CommandArgs a;
      a.estimate = tiny_llama();
      a.estimate.recipe = recipe;
      a.estimate.shard = "fsdp";
      a.estimate.precision = std::string("amp-") + type;
      const std::vector<const OptionSpec*> given = {row_of("--recipe"), row_of("--mode"), row_of("--gpus"),
                                                    row_of("--shard"), row_of("--precision")};
      CommandArgs two = a;
      settle_options(a, kEstimate, given);
      EXPECT_EQ(a.estimate.fsdp2_mp, std::string(type) + ":" + type) << recipe;
      two.estimate.shard = "fsdp2";
      try {
        settle_options(two, kEstimate, given);
        ADD_FAILURE() << recipe << " took --shard fsdp2 with amp-" << type;
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("--recipe " + std::string(recipe) + " with --shard fsdp2 and --precision amp-" +
                                             type + ": accelerate runs no torch.autocast under FSDP2"),
                  std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find(std::string("--precision fp32 --fsdp2-mp ") + type + ":" + type),
                  std::string::npos)
            << e.what();
      }
      // What the message names runs under the recipe.
      two.estimate.precision = "fp32";
      two.estimate.fsdp2_mp = std::string(type) + ":" + type;
      settle_options(two, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--gpus"), row_of("--shard"),
                                      row_of("--precision"), row_of("--fsdp2-mp")});
      EXPECT_EQ(two.estimate.fsdp2_mp, std::string(type) + ":" + type);
      EXPECT_FALSE(two.estimate.outputs_to_fp32);
    }
  CommandArgs ddp;
  ddp.estimate = tiny_llama();
  ddp.estimate.recipe = "hf-trainer";
  ddp.estimate.shard = "ddp";
  ddp.estimate.precision = "amp-bf16";
  settle_options(ddp, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--gpus"), row_of("--shard"),
                                  row_of("--precision")});
  EXPECT_EQ(ddp.estimate.fsdp2_mp, EstimateArgs{}.fsdp2_mp);
  CommandArgs given;
  given.estimate = tiny_llama();
  given.estimate.recipe = "hf-trainer";
  given.estimate.shard = "fsdp";
  given.estimate.precision = "amp-bf16";
  given.estimate.fsdp2_mp = "bf16:fp32";
  settle_options(given, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--gpus"), row_of("--shard"),
                                    row_of("--precision"), row_of("--fsdp2-mp")});
  EXPECT_EQ(given.estimate.fsdp2_mp, "bf16:fp32");
}

// Every FSDP x {bf16, fp16} runs; a param_dtype that is not autocast's type is one message naming both flags.
TEST(AccelerateFsdp, PolicyUnderAutocastIsModelledAndAMismatchRefused) {
  for (const char* shard : {"fsdp", "fsdp2"})
    for (const char* type : {"bf16", "fp16"}) {
      EstimateArgs a = tiny_llama();
      a.shard = shard;
      a.precision = std::string("amp-") + type;
      a.fsdp2_mp = std::string(type) + ":" + type;
      EXPECT_EQ(fsdp_refusal(a), "") << shard << " " << type;
      EXPECT_GT(estimate_model(a).estimate.total_bytes, 0u) << shard << " " << type;
      a.fsdp2_mp = std::string(type) == "bf16" ? "fp16:fp32" : "bf16:fp32";
      EXPECT_NE(fsdp_refusal(a).find("--fsdp2-mp " + a.fsdp2_mp + " with --precision amp-" + type +
                                   ": not modelled: the policy's param_dtype is not autocast's type"),
                std::string::npos)
          << fsdp_refusal(a);
    }
}

// FSDP2 under autocast needs the policy (one message naming --shard, --precision and the policy to give); FSDP1 under
// autocast without a policy stays modelled (autocast casting each weight view); --torch 1.13 is refused as before.
TEST(AccelerateFsdp, WhatStaysRefused) {
  EstimateArgs a = tiny_llama();
  a.shard = "fsdp2";
  a.precision = "amp-fp16";
  EXPECT_NE(fsdp_refusal(a).find("--shard fsdp2 with --precision amp-fp16 and no --fsdp2-mp: not modelled: FSDP2's "
                               "mixed precision is its MixedPrecisionPolicy; under autocast give a policy in autocast's "
                               "type (--fsdp2-mp fp16:fp16)"),
            std::string::npos)
      << fsdp_refusal(a);
  a.shard = "fsdp";
  EXPECT_EQ(fsdp_refusal(a), "");
  a.fsdp2_mp = "fp16:fp16";
  a.torch = "1.13";
  EXPECT_NE(fsdp_refusal(a).find("--fsdp2-mp with --torch 1.13"), std::string::npos) << fsdp_refusal(a);
}

}  // namespace
}  // namespace memplan
