// --param-dtype: the parameters' stored type under autocast (--precision amp-*), and the hf-trainer/hf-peft recipes'
// auto (the checkpoint's type, as transformers 5's from_pretrained(dtype="auto") loads it and accelerate's autocast
// leaves it outside FSDP). The cost model's figures for it are tests/cost_models/stored_param_amp_test.cc's.
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
using testing::recipe_training;

const std::string kConfigs = MEMPLAN_ZOO_DIR "/hf_configs/";

std::string dtype_refusal(CommandArgs a, const std::vector<const OptionSpec*>& given) {
  try {
    settle_options(a, kEstimate, given);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The Trainer's bf16=True (--precision amp-bf16) over a model loaded as stored: --param-dtype auto settles to the
// checkpoint's type, bf16 for Llama-3.2-1B ("torch_dtype": "bfloat16"), fp32 for gemma-2-2b ("float32"). Under FSDP
// accelerate upcasts what trains to float32: the recipe leaves --param-dtype fp32 (with its --fsdp2-mp). Without
// autocast --precision is the parameters' type and --param-dtype is not set. A given --param-dtype wins.
TEST(ParamDtype, TheTrainersAutocastRunsOverTheStoredType) {
  const std::vector<const OptionSpec*> amp = {row_of("--recipe"), row_of("--mode"), row_of("--precision")};
  for (const char* recipe : {"hf-trainer", "hf-peft"}) {
    CommandArgs bf16 = recipe_training(recipe, kConfigs + "Llama-3.2-1B.json");
    bf16.estimate.precision = "amp-bf16";
    settle_options(bf16, kEstimate, amp);
    EXPECT_EQ(bf16.estimate.param_dtype, "bf16") << recipe;
    EXPECT_TRUE(bf16.estimate.param_dtype_auto) << recipe;
    EXPECT_EQ(to_estimate_options(bf16.estimate).training.amp_param_dtype, DType::BFloat16) << recipe;
    CommandArgs fp32 = recipe_training(recipe, kConfigs + "gemma-2-2b.json");
    fp32.estimate.precision = "amp-bf16";
    settle_options(fp32, kEstimate, amp);
    EXPECT_EQ(fp32.estimate.param_dtype, "fp32") << recipe;
    CommandArgs sharded = recipe_training(recipe, kConfigs + "Llama-3.2-1B.json");
    sharded.estimate.precision = "amp-bf16";
    sharded.estimate.gpus = 2;
    sharded.estimate.shard = "fsdp";
    settle_options(sharded, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision"), row_of("--gpus"),
                                        row_of("--shard")});
    EXPECT_EQ(sharded.estimate.param_dtype, "fp32") << recipe;
    EXPECT_FALSE(sharded.estimate.param_dtype_auto) << recipe;
    EXPECT_EQ(sharded.estimate.fsdp2_mp, "bf16:bf16") << recipe;
    CommandArgs stored = recipe_training(recipe, kConfigs + "Llama-3.2-1B.json");
    settle_options(stored, kEstimate, {row_of("--recipe"), row_of("--mode")});
    EXPECT_EQ(stored.estimate.precision, "bf16") << recipe;
    EXPECT_EQ(stored.estimate.param_dtype, "fp32") << recipe;
    EXPECT_FALSE(stored.estimate.param_dtype_auto) << recipe;
    CommandArgs mine = recipe_training(recipe, kConfigs + "Llama-3.2-1B.json");
    mine.estimate.precision = "amp-bf16";
    mine.estimate.param_dtype = "fp32";
    settle_options(mine, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision"), row_of("--param-dtype")});
    EXPECT_EQ(mine.estimate.param_dtype, "fp32") << recipe;
    EXPECT_FALSE(mine.estimate.param_dtype_auto) << recipe;
  }
}

// The Trainer's fp16=True over an fp16 checkpoint (Llama-2-7b-hf: "torch_dtype": "float16"): a full fine-tune's fp16
// grads are what torch's GradScaler refuses ("Attempting to unscale FP16 gradients."), so it is refused with that
// reason; PEFT's float32 adapters over the fp16 base are accepted, adapters in the base's fp16 are not.
TEST(ParamDtype, Fp16AutocastOverFp16ParametersThatTrainIsRefused) {
  const std::string model = kConfigs + "Llama-2-7b-hf.json";
  const std::vector<const OptionSpec*> amp = {row_of("--recipe"), row_of("--mode"), row_of("--precision")};
  CommandArgs full = recipe_training("hf-trainer", model);
  full.estimate.precision = "amp-fp16";
  const std::string why = dtype_refusal(full, amp);
  EXPECT_NE(why.find("Attempting to unscale FP16 gradients"), std::string::npos) << why;
  EXPECT_NE(why.find("--param-dtype fp16 (auto: as stored)"), std::string::npos) << why;
  CommandArgs lora = recipe_training("hf-peft", model);
  lora.estimate.precision = "amp-fp16";
  settle_options(lora, kEstimate, amp);
  EXPECT_EQ(lora.estimate.param_dtype, "fp16");
  CommandArgs base = recipe_training("hf-peft", model);
  base.estimate.precision = "amp-fp16";
  base.estimate.lora_dtype = "base";
  EXPECT_NE(dtype_refusal(base, {row_of("--recipe"), row_of("--mode"), row_of("--precision"), row_of("--lora-dtype")})
                .find("Attempting to unscale FP16 gradients"),
            std::string::npos);
}

// By hand, outside a recipe: --param-dtype is autocast's; another half type than autocast's is not modelled; FSDP
// (where accelerate upcasts what trains) is refused naming --fsdp2-mp.
TEST(ParamDtype, RefusedWhereItMeansNothingOrIsNotModelled) {
  CommandArgs a;
  a.estimate.model.path = MEMPLAN_ZOO_DIR "/llama_tiny_train.onnx";
  a.estimate.mode = "train";
  a.estimate.param_dtype = "bf16";
  const std::vector<const OptionSpec*> given = {row_of("--mode"), row_of("--param-dtype"), row_of("--precision")};
  a.estimate.precision = "bf16";
  EXPECT_NE(dtype_refusal(a, given).find("applies to --precision amp-fp16/amp-bf16"), std::string::npos) << dtype_refusal(a, given);
  a.estimate.precision = "amp-fp16";
  EXPECT_NE(dtype_refusal(a, given).find("not modelled"), std::string::npos) << dtype_refusal(a, given);
  a.estimate.precision = "amp-bf16";
  EXPECT_EQ(dtype_refusal(a, given), "");
  a.estimate.gpus = 2;
  a.estimate.shard = "fsdp";
  a.estimate.fsdp2_mp = "bf16:bf16";
  std::vector<const OptionSpec*> fsdp = given;
  for (const char* f : {"--gpus", "--shard", "--fsdp2-mp"}) fsdp.push_back(row_of(f));
  EXPECT_NE(dtype_refusal(a, fsdp).find("give --param-dtype fp32 with --fsdp2-mp"), std::string::npos) << dtype_refusal(a, fsdp);
  // auto on the float32 export: plain AMP.
  CommandArgs onnx;
  onnx.estimate.model.path = MEMPLAN_ZOO_DIR "/llama_tiny_train.onnx";
  onnx.estimate.mode = "train";
  onnx.estimate.precision = "amp-bf16";
  onnx.estimate.param_dtype = "auto";
  settle_options(onnx, kEstimate, given);
  EXPECT_EQ(onnx.estimate.param_dtype, "fp32");
  EXPECT_TRUE(onnx.estimate.param_dtype_auto);
}

}  // namespace
}  // namespace memplan
