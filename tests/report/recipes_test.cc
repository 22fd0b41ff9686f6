// --recipe (report/recipes.h): a recipe fills only the options the user did not give, refuses a flag that would
// make it another recipe, names a source for every value, and sets only options that exist.
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

// On the tiny Llama export, whose initializers are float32: --precision auto (hf-trainer, hf-peft) is fp32 there.
CommandArgs llama_training(const std::string& recipe,
                           const std::string& model = MEMPLAN_ZOO_DIR "/llama_tiny_train.onnx") {
  return testing::recipe_training(recipe, model);
}

TEST(Recipes, FillOnlyWhatIsNotGiven) {
  CommandArgs a = llama_training("hf-peft");
  a.estimate.lora_rank = 16;  // the user's --lora-rank 16
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--lora-rank")});
  EXPECT_EQ(a.estimate.lora_rank, 16);
  EXPECT_EQ(a.estimate.lora_targets, "q_proj|v_proj");  // LoraConfig's llama default
  EXPECT_EQ(a.estimate.upcast, "rmsnorm,softmax,loss");
  EXPECT_TRUE(a.estimate.free_output);
  EXPECT_EQ(a.estimate.attention, "sdpa");
  EXPECT_EQ(a.estimate.optimizer_impl, "fused");
}

TEST(Recipes, AGivenFlagOverridesTheRecipesValue) {
  CommandArgs a = llama_training("hf-trainer");
  a.estimate.upcast = "none";
  a.estimate.attention = "eager";
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--upcast"), row_of("--attention")});
  EXPECT_EQ(a.estimate.upcast, "none");
  EXPECT_EQ(a.estimate.attention, "eager");
  EXPECT_TRUE(a.estimate.free_output);
}

TEST(Recipes, AContradictingFlagIsRefusedNamingBoth) {
  CommandArgs a = llama_training("hf-peft");
  a.estimate.lora_rank = 0;
  try {
    settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--lora-rank")});
    FAIL() << "--recipe hf-peft --lora-rank 0 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--recipe hf-peft"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("--lora-rank 0"), std::string::npos);
  }
}

TEST(Recipes, QloraQuantizesPreparesAndCheckpoints) {
  CommandArgs a = llama_training("hf-peft-qlora");
  a.estimate.precision = "bf16";
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision")});
  EXPECT_EQ(a.estimate.frozen_dtype, "nf4");
  EXPECT_TRUE(a.estimate.kbit_prep);
  EXPECT_EQ(a.estimate.checkpoint, "layers");
  EXPECT_EQ(a.estimate.lora_rank, 8);
  // A bitsandbytes optimizer is one kernel: the recipe's fused torch AdamW does not apply to it.
  CommandArgs bnb = llama_training("hf-peft-qlora");
  bnb.estimate.precision = "bf16";
  bnb.estimate.optimizer = "paged-adamw8bit";
  settle_options(bnb, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision"), row_of("--optimizer")});
  EXPECT_EQ(bnb.estimate.optimizer_impl, "");
  // Another storage is another recipe.
  CommandArgs int8 = llama_training("hf-peft-qlora");
  int8.estimate.precision = "bf16";
  int8.estimate.frozen_dtype = "int8";
  EXPECT_THROW(settle_options(int8, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision"),
                                                row_of("--frozen-dtype")}),
               InputError);
}

// The Trainer offers AdamW, not Adam: an optimizer the framework has no name for is refused, naming both.
TEST(Recipes, AnOptimizerTheFrameworkDoesNotOfferIsRefused) {
  CommandArgs a = llama_training("hf-trainer");
  a.estimate.optimizer = "adam";
  try {
    settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--optimizer")});
    FAIL() << "--recipe hf-trainer --optimizer adam was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--recipe hf-trainer --optimizer adam"), std::string::npos);
  }
  CommandArgs sgd = llama_training("hf-trainer");
  sgd.estimate.optimizer = "momentum";
  EXPECT_NO_THROW(settle_options(sgd, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--optimizer")}));
}

// Under FSDP the Trainer wraps a PEFT model with PEFT's policy: each adapter weight its own unit; without FSDP the
// recipe leaves --fsdp-wrap alone (it would be refused there).
TEST(Recipes, PeftWrapsEachAdapterUnderFsdpOnly) {
  CommandArgs a = llama_training("hf-peft");
  a.estimate.gpus = 2;
  a.estimate.shard = "fsdp";
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--gpus"), row_of("--shard")});
  EXPECT_EQ(a.estimate.fsdp_wrap, R"(^(.*lora_[AB].*|.*?\.[0-9]+\.))");
  CommandArgs one = llama_training("hf-peft");
  settle_options(one, kEstimate, {row_of("--recipe"), row_of("--mode")});
  EXPECT_EQ(one.estimate.fsdp_wrap, "");
}

// torchtune v0.6.1 (report/recipes_torchtune.cc): without --lora-rank, full_finetune_single_device as its configs run
// it: the model in bf16 (dtype: bf16), RMSNorm in float32, SDPA, CEWithChunkedOutputLoss's 8 chunks dropped before
// backward (del logits), each layer checkpointed, bitsandbytes' PagedAdamW stepped in backward (optimizer_in_bwd).
TEST(Recipes, TorchtuneFullFineTuneOnOneGpu) {
  CommandArgs a = llama_training("torchtune");
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode")});
  EXPECT_EQ(a.estimate.precision, "bf16");
  EXPECT_EQ(a.estimate.upcast, "rmsnorm");
  EXPECT_EQ(a.estimate.attention, "sdpa");
  EXPECT_EQ(a.estimate.loss, "chunked-ce:8");
  EXPECT_TRUE(a.estimate.free_output);
  EXPECT_EQ(a.estimate.checkpoint, "layers");
  EXPECT_EQ(a.estimate.optimizer, "paged-adamw");
  EXPECT_EQ(a.estimate.optimizer_impl, "");  // one bitsandbytes kernel: fused is torch's AdamW's
  EXPECT_TRUE(a.estimate.optimizer_in_backward);
  EXPECT_EQ(a.estimate.shard, "none");
  EXPECT_EQ(a.estimate.lora_rank, 0);
  EXPECT_EQ(a.estimate.lora_targets, "");
  // optimizer_in_bwd needs gradient_accumulation_steps 1 (the recipe raises otherwise): with --grad-accum the
  // optimizer steps after backward.
  CommandArgs accum = llama_training("torchtune");
  accum.estimate.grad_accum = 4;
  settle_options(accum, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--grad-accum")});
  EXPECT_FALSE(accum.estimate.optimizer_in_backward);
  EXPECT_EQ(accum.estimate.optimizer, "paged-adamw");
}

// --lora-rank chooses lora_finetune_single_device: the adapters on q, v, o and the MLP in bf16, fused AdamW after
// backward (the LoRA recipes have no optimizer_in_bwd).
TEST(Recipes, TorchtuneLoraOnOneGpu) {
  CommandArgs a = llama_training("torchtune");
  a.estimate.lora_rank = 16;
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--lora-rank")});
  EXPECT_EQ(a.estimate.lora_rank, 16);
  EXPECT_EQ(a.estimate.lora_targets, "q_proj|v_proj|o_proj|gate_proj|up_proj|down_proj");
  EXPECT_EQ(a.estimate.lora_dtype, "base");
  EXPECT_EQ(a.estimate.optimizer, "adamw");
  EXPECT_EQ(a.estimate.optimizer_impl, "fused");
  EXPECT_FALSE(a.estimate.optimizer_in_backward);
  EXPECT_FALSE(a.estimate.double_quant);
  EXPECT_EQ(a.estimate.loss, "chunked-ce:8");
  EXPECT_EQ(a.estimate.nf4_impl, "auto");
  // A qlora_* model, on one GPU too: torchao's NF4Tensor (which double-quantizes its scalers itself).
  CommandArgs q = llama_training("torchtune");
  q.estimate.lora_rank = 8;
  q.estimate.frozen_dtype = "nf4";
  settle_options(q, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--lora-rank"), row_of("--frozen-dtype")});
  EXPECT_EQ(q.estimate.nf4_impl, "torchao");
  EXPECT_FALSE(q.estimate.double_quant);
  EXPECT_FALSE(q.estimate.kbit_prep);
}

// --gpus N > 1: the distributed recipes, FSDP2 over each layer and the root, fused AdamW after backward.
TEST(Recipes, TorchtuneDistributedShardsWithFsdp2) {
  for (const int rank : {0, 8}) {
    CommandArgs a = llama_training("torchtune");
    a.estimate.gpus = 4;
    a.estimate.lora_rank = rank;
    std::vector<const OptionSpec*> given = {row_of("--recipe"), row_of("--mode"), row_of("--gpus")};
    if (rank) given.push_back(row_of("--lora-rank"));
    settle_options(a, kEstimate, given);
    EXPECT_EQ(a.estimate.shard, "fsdp2") << rank;
    // memplan's default units, each layers.N and the root, as get_shard_conditions; FSDP2 gives a frozen base no grad.
    EXPECT_EQ(a.estimate.fsdp_wrap, "") << rank;
    EXPECT_EQ(a.estimate.optimizer, "adamw") << rank;
    EXPECT_EQ(a.estimate.optimizer_impl, "fused") << rank;
    EXPECT_FALSE(a.estimate.optimizer_in_backward) << rank;
    EXPECT_EQ(a.estimate.checkpoint, "layers") << rank;
  }
}

// A distributed QLoRA (a qlora_* model under lora_finetune_distributed.py): shard_model's fully_shard over torchao's
// NF4Tensor bases (cost_models/training_fsdp2.cc), memplan's default units (each layer and the root), no adapter
// units of FSDP1's.
TEST(Recipes, TorchtuneDistributedQloraShardsWithFsdp2) {
  CommandArgs a = llama_training("torchtune");
  a.estimate.gpus = 4;
  a.estimate.lora_rank = 8;
  a.estimate.frozen_dtype = "nf4";
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--gpus"), row_of("--lora-rank"),
                                row_of("--frozen-dtype")});
  EXPECT_EQ(a.estimate.shard, "fsdp2");
  EXPECT_EQ(a.estimate.fsdp_wrap, "");
  EXPECT_EQ(a.estimate.nf4_impl, "torchao");
  EXPECT_FALSE(a.estimate.double_quant);
}

// Flags given win: fp32 (torchtune's other dtype) leaves nothing to upcast and the adapters in the model's float32;
// a config with enable_activation_checkpointing: False is --checkpoint none.
TEST(Recipes, TorchtuneTakesTheFlagsGiven) {
  CommandArgs a = llama_training("torchtune");
  a.estimate.precision = "fp32";
  a.estimate.checkpoint = "none";
  a.estimate.lora_rank = 8;
  a.estimate.optimizer = "adamw8bit";
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision"), row_of("--checkpoint"),
                                row_of("--lora-rank"), row_of("--optimizer")});
  EXPECT_EQ(a.estimate.precision, "fp32");
  EXPECT_EQ(a.estimate.upcast, "none");
  EXPECT_EQ(a.estimate.lora_dtype, "float32");
  EXPECT_EQ(a.estimate.checkpoint, "none");
  EXPECT_EQ(a.estimate.optimizer, "adamw8bit");
  EXPECT_EQ(a.estimate.optimizer_impl, "");
}

// What torchtune cannot run is refused, naming the recipe and the flag.
TEST(Recipes, TorchtuneRefusesWhatItCannotRun) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> flags;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{{"--precision", "fp16"}}, "--precision fp16"},
      {{{"--precision", "amp-bf16"}}, "--precision amp-bf16"},
      {{{"--gpus", "2"}, {"--shard", "ddp"}}, "--shard ddp"},
      {{{"--loss", "cross-entropy"}}, "--loss cross-entropy"},
      {{{"--lora-rank", "8"}, {"--frozen-dtype", "int8"}}, "--frozen-dtype int8"},
      {{{"--lora-rank", "8"}, {"--frozen-dtype", "nf4"}, {"--kbit-prep", "true"}}, "--kbit-prep"},
      {{{"--lora-rank", "8"}, {"--lora-dtype", "float32"}}, "--lora-dtype float32"},
      {{{"--lora-rank", "8"}, {"--optimizer-in-backward", "true"}}, "--optimizer-in-backward"},
  };
  for (const Case& c : cases) {
    CommandArgs a = llama_training("torchtune");
    std::vector<const OptionSpec*> given = {row_of("--recipe"), row_of("--mode")};
    for (const auto& [flag, value] : c.flags) {
      set_field_text(*row_of(flag), a, value);
      given.push_back(row_of(flag));
    }
    try {
      settle_options(a, kEstimate, given);
      ADD_FAILURE() << c.names << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--recipe torchtune"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.names), std::string::npos) << e.what();
    }
  }
}

// --recipe litgpt alone is finetune/lora.py with setup()'s defaults on one GPU: bf16-true, float32 RMSNorm, SDPA,
// the head in chunks of 128 positions whose float32 copies (Fabric's convert_output) the loss reads and fit() keeps,
// LoRA r 8 on q and v (litgpt's fused qkv) in bf16 with dropout 0.05, torch's AdamW with its default implementation,
// no checkpointing.
TEST(Recipes, LitgptLoraOnOneGpu) {
  CommandArgs a = llama_training("litgpt");
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode")});
  EXPECT_EQ(a.estimate.precision, "bf16");
  EXPECT_EQ(a.estimate.upcast, "rmsnorm");
  EXPECT_EQ(a.estimate.attention, "sdpa");
  EXPECT_EQ(a.estimate.loss, "chunked-ce-tokens:128");
  EXPECT_FALSE(a.estimate.free_output);
  EXPECT_TRUE(a.estimate.outputs_to_default_dtype);
  EXPECT_EQ(a.estimate.lora_rank, 8);
  EXPECT_EQ(a.estimate.lora_targets, "q_proj|v_proj");
  EXPECT_DOUBLE_EQ(a.estimate.lora_dropout, 0.05);
  EXPECT_EQ(a.estimate.lora_dtype, "base");
  EXPECT_EQ(a.estimate.optimizer, "adamw");
  EXPECT_EQ(a.estimate.optimizer_impl, "");
  EXPECT_EQ(a.estimate.checkpoint, CommandArgs{}.estimate.checkpoint);
  EXPECT_EQ(a.estimate.shard, CommandArgs{}.estimate.shard);
  // --quantize bnb.nf4: bitsandbytes' PagedAdamW (instantiate_bnb_optimizer), no double quantization (bnb.nf4-dq).
  CommandArgs q = llama_training("litgpt");
  q.estimate.frozen_dtype = "nf4";
  settle_options(q, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--frozen-dtype")});
  EXPECT_EQ(q.estimate.optimizer, "paged-adamw");
  EXPECT_FALSE(q.estimate.double_quant);
  EXPECT_FALSE(q.estimate.kbit_prep);
  EXPECT_TRUE(q.estimate.outputs_to_default_dtype);  // BitsandbytesPrecision(bf16).convert_output
  // --gpus 2: ModelParallelStrategy's FSDP2 with each Block checkpointed (parallelize_fn).
  CommandArgs d = llama_training("litgpt");
  d.estimate.gpus = 2;
  settle_options(d, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--gpus")});
  EXPECT_EQ(d.estimate.shard, "fsdp");
  EXPECT_EQ(d.estimate.checkpoint, "layers");
  EXPECT_EQ(d.estimate.fsdp_wrap, kLoraUnitsWrap);
  EXPECT_EQ(d.estimate.optimizer, "adamw");
}

// What litgpt's lora.py cannot run is refused, naming the recipe and the flag.
TEST(Recipes, LitgptRefusesWhatItCannotRun) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> flags;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{{"--loss", "chunked-ce:8"}}, "--loss chunked-ce:8"},
      {{{"--free-output", "true"}}, "--free-output"},
      {{{"--frozen-dtype", "bf16"}}, "--frozen-dtype bf16"},
      {{{"--frozen-dtype", "nf4"}, {"--precision", "amp-bf16"}}, "--precision amp-bf16"},
      {{{"--frozen-dtype", "nf4"}, {"--gpus", "2"}}, "--gpus 2"},
      {{{"--frozen-dtype", "nf4"}, {"--optimizer", "adamw"}}, "--optimizer adamw"},
      {{{"--frozen-dtype", "nf4"}, {"--kbit-prep", "true"}}, "--kbit-prep"},
      {{{"--gpus", "2"}, {"--shard", "ddp"}}, "--shard ddp"},
      {{{"--lora-dtype", "float32"}}, "--lora-dtype float32"},
      {{{"--optimizer-in-backward", "true"}}, "--optimizer-in-backward"},
  };
  for (const Case& c : cases) {
    CommandArgs a = llama_training("litgpt");
    std::vector<const OptionSpec*> given = {row_of("--recipe"), row_of("--mode")};
    for (const auto& [flag, value] : c.flags) {
      set_field_text(*row_of(flag), a, value);
      given.push_back(row_of(flag));
    }
    try {
      settle_options(a, kEstimate, given);
      ADD_FAILURE() << c.names << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--recipe litgpt"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.names), std::string::npos) << e.what();
    }
  }
}

// torchtitan v0.2.2's llama3 training (report/recipes_torchtitan.cc): on N > 1 GPUs FSDP2 with its
// MixedPrecisionPolicy(bfloat16, float32) and apply_fsdp's groups; on one GPU no FSDP, so no policy: float32.
TEST(Recipes, TorchtitanShardsWithItsGroupsOnSeveralGpus) {
  CommandArgs a = llama_training("torchtitan");
  a.estimate.gpus = 8;
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--gpus")});
  EXPECT_EQ(a.estimate.precision, "fp32");
  EXPECT_EQ(a.estimate.shard, "fsdp2");
  EXPECT_EQ(a.estimate.fsdp2_mp, "bf16:fp32");
  EXPECT_EQ(a.estimate.fsdp_wrap, "torchtitan");
  EXPECT_EQ(a.estimate.upcast, "rmsnorm,loss");
  EXPECT_EQ(a.estimate.checkpoint, "selective:op");
  EXPECT_EQ(a.estimate.optimizer, "adamw");
  EXPECT_EQ(a.estimate.optimizer_impl, "fused");
  EXPECT_EQ(a.estimate.attention, "sdpa");
  EXPECT_TRUE(a.estimate.free_output);
  CommandArgs one = llama_training("torchtitan");
  settle_options(one, kEstimate, {row_of("--recipe"), row_of("--mode")});
  EXPECT_EQ(one.estimate.shard, EstimateArgs{}.shard);
  EXPECT_EQ(one.estimate.fsdp2_mp, EstimateArgs{}.fsdp2_mp);
  EXPECT_EQ(one.estimate.fsdp_wrap, "");
  EXPECT_EQ(one.estimate.checkpoint, "selective:op");
}

TEST(Recipes, TorchtitanRefusesWhatItCannotRun) {
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> cases = {
      {{"--lora-rank", "8"}, "--lora-rank"},
      {{"--precision", "bf16"}, "--precision bf16"},
      {{"--frozen-dtype", "nf4"}, "--frozen-dtype nf4"},
  };
  for (const auto& [flag, names] : cases) {
    CommandArgs a = llama_training("torchtitan");
    set_field_text(*row_of(flag.first), a, flag.second);
    try {
      settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of(flag.first)});
      ADD_FAILURE() << names << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--recipe torchtitan"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  }
}

// transformers 5 loads a checkpoint in its stored type (from_pretrained's dtype="auto"): Llama-3.2-1B's config says
// "torch_dtype": "bfloat16", gemma-2-2b's "float32", the tiny export's initializers are float32. hf-peft-qlora keeps
// float32 (prepare_model_for_kbit_training's upcast; bnb_4bit_compute_dtype's default), and a given flag wins.
TEST(Recipes, TheHuggingFaceRecipesLoadTheStoredType) {
  const std::string configs = MEMPLAN_ZOO_DIR "/hf_configs/";
  const std::vector<const OptionSpec*> given = {row_of("--recipe"), row_of("--mode")};
  for (const char* recipe : {"hf-trainer", "hf-peft"}) {
    CommandArgs bf16 = llama_training(recipe, configs + "Llama-3.2-1B.json");
    settle_options(bf16, kEstimate, given);
    EXPECT_EQ(bf16.estimate.precision, "bf16") << recipe;
    EXPECT_TRUE(bf16.estimate.precision_auto) << recipe;
    CommandArgs fp32 = llama_training(recipe, configs + "gemma-2-2b.json");
    settle_options(fp32, kEstimate, given);
    EXPECT_EQ(fp32.estimate.precision, "fp32") << recipe;
    CommandArgs onnx = llama_training(recipe);
    settle_options(onnx, kEstimate, given);
    EXPECT_EQ(onnx.estimate.precision, "fp32") << recipe;
    CommandArgs mine = llama_training(recipe, configs + "Llama-3.2-1B.json");
    mine.estimate.precision = "amp-bf16";
    settle_options(mine, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision")});
    EXPECT_EQ(mine.estimate.precision, "amp-bf16") << recipe;
    EXPECT_FALSE(mine.estimate.precision_auto) << recipe;
  }
  CommandArgs qlora = llama_training("hf-peft-qlora", configs + "Llama-3.2-1B.json");
  settle_options(qlora, kEstimate, given);
  EXPECT_EQ(qlora.estimate.precision, "fp32");
  // --precision auto by hand, outside a recipe: the same rule; in inference it is refused as every training option.
  CommandArgs plain;
  plain.estimate.model.path = configs + "Llama-3.2-1B.json";
  plain.estimate.mode = "train";
  plain.estimate.precision = "auto";
  settle_options(plain, kEstimate, {row_of("--mode"), row_of("--precision")});
  EXPECT_EQ(plain.estimate.precision, "bf16");
  plain.estimate.mode = "inference";
  plain.estimate.precision = "auto";
  EXPECT_THROW(settle_options(plain, kEstimate, {row_of("--precision")}), InputError);
}

// A recipe under --mode inference given is refused; with --mode not given, a recipe means the training step.
TEST(Recipes, NeedTrainingAndAKnownName) {
  CommandArgs inference = llama_training("hf-trainer");
  inference.estimate.mode = "inference";
  EXPECT_THROW(settle_options(inference, kEstimate, {row_of("--recipe"), row_of("--mode")}), InputError);
  settle_options(inference, kEstimate, {row_of("--recipe")});
  EXPECT_EQ(inference.estimate.mode, "train");
  CommandArgs unknown = llama_training("deepspeed-chat");
  EXPECT_THROW(settle_options(unknown, kEstimate, {row_of("--recipe"), row_of("--mode")}), InputError);
}

// Every setting names an option of the training commands and a source; the listing shows each.
TEST(Recipes, EverySettingIsAnOptionWithASource) {
  const std::string md = recipes_markdown();
  for (const Recipe& r : recipes()) {
    EXPECT_NE(md.find("## " + r.name), std::string::npos);
    for (const RecipeSetting& s : r.settings) {
      EXPECT_NE(row_of(s.flag), nullptr) << r.name << " sets " << s.flag;
      EXPECT_FALSE(s.source.empty()) << r.name << " " << s.flag;
      EXPECT_EQ(s.applies == nullptr, s.when.empty()) << r.name << " " << s.flag << ": a condition says when";
    }
  }
}

}  // namespace
}  // namespace memplan
