// accelerate under FSDP leaves the frozen base of a half checkpoint in its type: it upcasts to float32 only what
// requires grad (accelerator.py Accelerator.prepare_model for FSDP1's flat parameters, utils/fsdp_utils.py
// fsdp2_prepare_model for FSDP2's parameters, huggingface/accelerate v1.14.0). The hf-peft recipe sets --frozen-dtype
// auto where accelerate's policy runs (FSDP1 under amp-*, FSDP2 with --fsdp2-mp), settled to the config's torch_dtype;
// frozen half weights under FSDP without a policy in their type are one message. The step's hand figures are
// tests/cost_models/fsdp_frozen_half_test.cc's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "onnx_import/errors.h"
#include "report/estimate_config.h"
#include "report/option_checks.h"
#include "tests/report/option_rows.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::row_of;

// A tiny llama config.json stored in `dtype` (its torch_dtype), written once per dtype.
std::string llama_config(const std::string& dtype) {
  const std::filesystem::path dir = testing::process_temp_dir("memplan_accelerate_frozen_test");
  const std::string file = (dir / (dtype + ".json")).string();
  std::ofstream(file) << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 128,
                             "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 256,
                             "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "hidden_act": "silu",
                             "torch_dtype": ")" + dtype + R"("})";
  return file;
}

CommandArgs peft(const std::string& dtype, const std::string& shard, const std::string& precision) {
  CommandArgs a;
  a.estimate.model.path = llama_config(dtype);
  a.estimate.model.graph = "train";
  a.estimate.model.batch = 2;
  a.estimate.model.dims = {"seq=16"};
  a.estimate.top = 0;
  a.estimate.mode = "train";
  a.estimate.recipe = "hf-peft";
  a.estimate.gpus = 2;
  a.estimate.shard = shard;
  a.estimate.precision = precision;
  return a;
}

std::vector<const OptionSpec*> given(const CommandArgs& a) {
  std::vector<const OptionSpec*> g = {row_of("--recipe"), row_of("--mode"), row_of("--gpus"), row_of("--shard"),
                                      row_of("--precision")};
  if (a.estimate.fsdp2_mp != EstimateArgs{}.fsdp2_mp) g.push_back(row_of("--fsdp2-mp"));
  if (a.estimate.frozen_dtype != EstimateArgs{}.frozen_dtype) g.push_back(row_of("--frozen-dtype"));
  return g;
}

std::string refusal_of(CommandArgs a) {
  try {
    settle_options(a, kEstimate, given(a));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// FSDP1 under amp-bf16 and FSDP2 with the policy the recipe names (--precision fp32 --fsdp2-mp bf16:bf16): the frozen
// base bf16 as the bf16 checkpoint stores it, and the step's parameters fewer than with the frozen base float32 (the
// flag given: explicit flags override the recipe). A float32 checkpoint: same. One GPU: the recipe's --param-dtype
// auto keeps everything bf16 already, and --frozen-dtype stays same.
TEST(AccelerateFrozen, HfPeftKeepsTheFrozenBaseAsStoredUnderFsdp) {
  for (const auto& [shard, precision, mp] : {std::tuple{"fsdp", "amp-bf16", ""}, std::tuple{"fsdp2", "fp32", "bf16:bf16"}}) {
    CommandArgs a = peft("bfloat16", shard, precision);
    if (*mp) a.estimate.fsdp2_mp = mp;
    CommandArgs as_float32 = a;
    settle_options(a, kEstimate, given(a));
    EXPECT_EQ(a.estimate.frozen_dtype, "bf16") << shard;
    EXPECT_TRUE(a.estimate.frozen_dtype_auto) << shard;
    as_float32.estimate.frozen_dtype = "same";
    std::vector<const OptionSpec*> with_same = given(as_float32);
    with_same.push_back(row_of("--frozen-dtype"));
    settle_options(as_float32, kEstimate, with_same);
    EXPECT_EQ(as_float32.estimate.frozen_dtype, "same") << shard;
    const Estimate half = estimate_model(a.estimate).estimate;
    const Estimate full = estimate_model(as_float32.estimate).estimate;
    // The trained adapters are the same float32 shards in both; every frozen element halves: the bf16 answer holds
    // more than a third and less than the whole of the float32 one's parameters (the adapters and FSDP's padding
    // are a few KB of ~1.2 MB).
    EXPECT_LT(half.param_bytes, full.param_bytes) << shard;
    EXPECT_GT(half.param_bytes * 2, full.param_bytes) << shard;
    EXPECT_LT(half.param_bytes * 2, full.param_bytes + 64 * 1024) << shard;
  }
  CommandArgs float32 = peft("float32", "fsdp", "amp-bf16");
  settle_options(float32, kEstimate, given(float32));
  EXPECT_EQ(float32.estimate.frozen_dtype, "same");
  CommandArgs one_gpu = peft("bfloat16", "none", "amp-bf16");
  one_gpu.estimate.gpus = 1;
  settle_options(one_gpu, kEstimate, given(one_gpu));
  EXPECT_EQ(one_gpu.estimate.frozen_dtype, "same");
  EXPECT_EQ(one_gpu.estimate.param_dtype, "bf16");
}

// Frozen bf16 under FSDP without a bf16 policy (FSDP2 with --precision fp32 alone; FSDP1 with its policy in fp16) is
// one message naming --shard and --frozen-dtype and the policy to give.
TEST(AccelerateFrozen, FrozenHalfWithoutItsPolicyIsOneMessage) {
  CommandArgs a = peft("bfloat16", "fsdp2", "fp32");
  a.estimate.frozen_dtype = "bf16";
  EXPECT_NE(refusal_of(a).find("--shard fsdp2 with --frozen-dtype bf16: modelled under a mixed-precision policy in the "
                               "frozen weights' type"),
            std::string::npos)
      << refusal_of(a);
  EXPECT_NE(refusal_of(a).find("--fsdp2-mp bf16:bf16"), std::string::npos) << refusal_of(a);
  CommandArgs b = peft("bfloat16", "fsdp", "amp-fp16");
  b.estimate.frozen_dtype = "bf16";
  EXPECT_NE(refusal_of(b).find("--shard fsdp with --frozen-dtype bf16"), std::string::npos) << refusal_of(b);
}

// hf-trainer under FSDP1's amp-bf16: a full fine-tune has no frozen weights, and --frozen-dtype stays same; with
// --frozen, the frozen ones stay bf16 (each decoder layer a unit that still trains its attention: upcast whole,
// cost_models/training_fsdp.cc), and the step runs.
TEST(AccelerateFrozen, HfTrainerKeepsWhatItFreezesAsStored) {
  CommandArgs full = peft("bfloat16", "fsdp", "amp-bf16");
  full.estimate.recipe = "hf-trainer";
  settle_options(full, kEstimate, given(full));
  EXPECT_EQ(full.estimate.frozen_dtype, "same");
  CommandArgs part = peft("bfloat16", "fsdp", "amp-bf16");
  part.estimate.recipe = "hf-trainer";
  part.estimate.frozen = "mlp";
  std::vector<const OptionSpec*> g = given(part);
  g.push_back(row_of("--frozen"));
  settle_options(part, kEstimate, g);
  EXPECT_EQ(part.estimate.frozen_dtype, "bf16");
  EXPECT_GT(estimate_model(part.estimate).estimate.total_bytes, 0u);
}

}  // namespace
}  // namespace memplan
