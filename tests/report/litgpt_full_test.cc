// --recipe litgpt --lora-rank 0: litgpt v0.5.13's full fine-tune (finetune/full.py, report/recipes_litgpt.cc). Its
// settings, its refusals (one message naming the flag), and its step on the tiny Llama: the loss on Fabric's float32
// copy of the whole logits in chunks of 128 rows. The loss's own hand figures are tests/cost_models/loss_rows_test.cc's.
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

CommandArgs full_py() {
  CommandArgs a = testing::recipe_training("litgpt", MEMPLAN_ZOO_DIR "/llama_tiny_train.onnx");
  a.estimate.lora_rank = 0;  // given: the recipe's --lora-rank 8 does not apply
  return a;
}

std::vector<const OptionSpec*> given_flags(const std::vector<std::string>& more = {}) {
  std::vector<const OptionSpec*> rows = {row_of("--recipe"), row_of("--mode"), row_of("--lora-rank")};
  for (const std::string& f : more) rows.push_back(row_of(f));
  return rows;
}

// One GPU: bf16-true, float32 RMSNorm, SDPA, the whole head, Fabric's float32 copy, litgpt's loss in chunks of 128
// rows, torch's AdamW, no adapters, no checkpointing, no sharding.
TEST(LitgptFull, LoraRankZeroIsFullPyOnOneGpu) {
  CommandArgs a = full_py();
  settle_options(a, kEstimate, given_flags());
  EXPECT_EQ(a.estimate.lora_rank, 0);
  EXPECT_EQ(a.estimate.precision, "bf16");
  EXPECT_EQ(a.estimate.upcast, "rmsnorm");
  EXPECT_EQ(a.estimate.attention, "sdpa");
  EXPECT_EQ(a.estimate.loss, "chunked-ce-rows:128");
  EXPECT_TRUE(a.estimate.outputs_to_default_dtype);
  EXPECT_FALSE(a.estimate.free_output);
  EXPECT_EQ(a.estimate.lora_targets, "");
  EXPECT_EQ(a.estimate.lora_dropout, 0);
  EXPECT_EQ(a.estimate.lora_dtype, CommandArgs{}.estimate.lora_dtype);
  EXPECT_EQ(a.estimate.optimizer, "adamw");
  EXPECT_EQ(a.estimate.shard, CommandArgs{}.estimate.shard);
  EXPECT_EQ(a.estimate.checkpoint, CommandArgs{}.estimate.checkpoint);
  // 32-true: float32 logits, nothing to copy.
  CommandArgs fp32 = full_py();
  fp32.estimate.precision = "fp32";
  settle_options(fp32, kEstimate, given_flags({"--precision"}));
  EXPECT_FALSE(fp32.estimate.outputs_to_default_dtype);
  EXPECT_EQ(fp32.estimate.loss, "chunked-ce-rows:128");
}

// --gpus 4: FSDPStrategy, FSDP1 with a unit per Block (memplan's default units: no --fsdp-wrap) and each Block
// checkpointed (activation_checkpointing_policy={Block}).
TEST(LitgptFull, SeveralGpusAreFsdp1WithEachBlockCheckpointed) {
  CommandArgs a = full_py();
  a.estimate.gpus = 4;
  settle_options(a, kEstimate, given_flags({"--gpus"}));
  EXPECT_EQ(a.estimate.shard, "fsdp");
  EXPECT_EQ(a.estimate.checkpoint, "layers");
  EXPECT_EQ(a.estimate.fsdp_wrap, "");
  EXPECT_EQ(a.estimate.loss, "chunked-ce-rows:128");
  EXPECT_TRUE(a.estimate.outputs_to_default_dtype);  // FSDPPrecision.convert_output
}

// What full.py cannot run: one message naming the recipe and the flag.
TEST(LitgptFull, RefusesWhatFullPyCannotRun) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> flags;
    std::string message;
  };
  const std::string full = "--recipe litgpt --lora-rank 0 is finetune/full.py,";
  const std::vector<Case> cases = {
      {{{"--loss", "chunked-ce-tokens:128"}},
       full + " which computes litgpt.utils.chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:]) on the whole "
              "head's logits (fit(): model(input_ids), no lm_head_chunk_size) in chunks of 128 rows: --loss "
              "chunked-ce-tokens:128 is not what it runs"},
      {{{"--frozen-dtype", "nf4"}},
       full + " whose setup() has no quantize and trains every parameter: --frozen-dtype nf4 is not one of its choices"},
      {{{"--trainable", "layers"}},
       full + " which trains every parameter (instantiate_torch_optimizer(optimizer, model.parameters())): "
              "--trainable/--frozen is another recipe"},
      {{{"--gpus", "2"}, {"--shard", "fsdp2"}},
       full + " whose --gpus 2 shards with FSDP1 (setup(): FSDPStrategy(auto_wrap_policy={Block}, ...)): --shard fsdp2 "
              "is not one of its choices"},
      {{{"--gpus", "2"}, {"--precision", "amp-bf16"}},
       full + " whose --gpus 2 runs Lightning's FSDPPrecision, which under --precision amp-bf16 builds the model in the "
              "half type (module_init_context: mixed_precision_config.param_dtype) and autocasts over those half flat "
              "parameters: not modelled (--param-dtype under FSDP)"},
      {{{"--free-output", "true"}},
       "--recipe litgpt keeps the logits through backward (fit() holds `logits` until the next step): --free-output "
       "drops them"},
      {{{"--optimizer-in-backward", "true"}},
       "--recipe litgpt: fit() steps the optimizer after backward, --optimizer-in-backward is not its"},
  };
  for (const Case& c : cases) {
    CommandArgs a = full_py();
    std::vector<const OptionSpec*> rows = given_flags();
    for (const auto& [flag, value] : c.flags) {
      set_field_text(*row_of(flag), a, value);
      rows.push_back(row_of(flag));
    }
    try {
      settle_options(a, kEstimate, rows);
      ADD_FAILURE() << c.message << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), c.message);
    }
  }
}

// The step on the tiny Llama (vocabulary 1000) at batch 2, seq 16, --runtime ideal: the head's bf16 logits
// [2, 16, 1000] 64,000 bytes, Fabric's float32 copy 128,000; the loss reads 2 x 15 = 30 rows, one chunk of 128.
// Live bytes between steps, by hand:
//  - reshape (batch 2: the [2, 15, 1000] slice is not contiguous): + the float32 rows 30 x 1000 x 4 = 120,000 and the
//    int64 targets' rows 30 x 8 = 240, after the mask step freed its bools (30) and ones_like (8): +120,202;
//  - SliceBackward0: + the whole float32 grad 2 x 16 x 1000 x 4 = 128,000, after SplitBackward0 freed the one chunk's
//    grad (120,000): +8,000;
//  - ToCopyBackward0: + the bf16 grad 64,000, after the slice freed the concatenated rows' grad (120,000): -56,000.
TEST(LitgptFull, TheLossOnTheWholeCopyByHand) {
  CommandArgs a = full_py();
  a.estimate.model.batch = 2;
  a.estimate.model.dims = {"seq=16"};
  a.estimate.runtime = "ideal";
  settle_options(a, kEstimate, given_flags({"--runtime"}));
  const Estimate e = estimate_model(a.estimate).estimate;
  auto live = [&](const std::string& step) -> int64_t {
    for (size_t i = 0; i < e.step_names.size(); ++i)
      if (e.step_names[i] == step) {
        int64_t sum = 0;
        for (uint64_t b : e.per_step_by_category[i]) sum += static_cast<int64_t>(b);
        return sum;
      }
    ADD_FAILURE() << "no step " << step;
    return 0;
  };
  EXPECT_EQ(live("loss:chunked_ce_rows:reshape") - live("loss:chunked_ce_rows:ignore_mask"), 120202);
  EXPECT_EQ(live("backward:slice") - live("backward:split"), 8000);
  EXPECT_EQ(live("backward:to_copy") - live("backward:slice"), -56000);
}

}  // namespace
}  // namespace memplan
