// The pairs the combination matrix (report/combination_matrix.h) refuses, and the rules of check_requirements that
// refuse a pair of features, each checked by its message, so that a refusal cannot vanish or change unnoticed. The
// features are turned on as combinations_test.cc turns them on (combinations_enables.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "onnx_import/errors.h"
#include "report/option_checks.h"
#include "tests/report/combinations_enables.h"

namespace memplan {
namespace {

using combinations::base;
using combinations::enables;

// The pairs the matrix refuses, each checked by name and flag, so a refusal cannot vanish unnoticed.
TEST(Combinations, KnownRefusalsSayBothFlags) {
  struct Case {
    std::vector<std::string> features;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"pp", "fsdp"}, "--shard fsdp with --pp: not modelled"},
      {{"pp", "checkpoint"}, "--checkpoint with --pp: not modelled yet"},
      {{"pp", "grad-accum"}, "--grad-accum with --pp: the pipeline's --micro-batches are its gradient accumulation"},
      {{"tp", "lora"}, "--tp with --lora-rank: not modelled"},
      {{"onnxruntime", "checkpoint"}, "--mode train with --runtime onnxruntime"},
      {{"sdpa", "torch-1.13"}, "--attention sdpa with --torch 1.13"},
      {{"selective", "torch-1.13"}, "--checkpoint selective[:op|:N] with --torch 1.13: torchtitan's checkpointing needs PyTorch 2"},
      {{"reentrant", "selective"}, "--checkpoint selective[:op|:N] with --checkpoint-impl reentrant: torchtitan's "
                                   "selective checkpointing is always non-reentrant"},
      {{"fsdp", "frozen-int8"}, "--shard fsdp with --frozen-dtype int8: FSDP flattens"},
      // Frozen half weights under FSDP are modelled under a policy in their type (accelerate over a half checkpoint),
      // refused without one (report/option_checks.cc check_requirements).
      {{"fsdp", "frozen-half"}, "--shard fsdp with --frozen-dtype fp16: modelled under a mixed-precision policy in the "
                                "frozen weights' type"},
      {{"fsdp2", "frozen-half"}, "--shard fsdp2 with --frozen-dtype fp16: modelled under a mixed-precision policy in "
                                 "the frozen weights' type"},
      {{"schedule-memory", "checkpoint"}, "--schedule memory applies to --mode inference, not --mode train"},
      {{"bitsandbytes", "zero3"}, "--shard zero3 with --optimizer adamw8bit/paged-adamw/paged-adamw8bit: not modelled"},
      {{"tp", "chunked-ce"}, "--tp with --loss chunked-ce:N: not modelled: torchtune gathers each chunk"},
      {{"tp", "chunked-ce-tokens"}, "--tp with --loss chunked-ce-tokens:N: not modelled: litgpt's chunked loss"},
      {{"tp", "chunked-ce-rows"}, "--tp with --loss chunked-ce-rows:N: not modelled: litgpt's chunked loss"},
      {{"tp", "fused-linear-ce"}, "--tp with --loss fused-linear-ce: not modelled"},
      {{"outputs-default-dtype", "chunked-ce"}, "--outputs-to-default-dtype with --loss chunked-ce:4: not modelled"},
      {{"outputs-default-dtype", "fused-linear-ce"}, "--outputs-to-default-dtype with --loss fused-linear-ce: not modelled"},
      {{"pp", "fused-linear-ce"}, "--pp with --loss fused-linear-ce: not modelled"},
      {{"fsdp", "fused-linear-ce"}, "--shard fsdp with --loss fused-linear-ce: not modelled"},
      // Not a matrix pair (report/option_checks.cc): with --fsdp2-mp the pair is accelerate's run, modelled.
      {{"fsdp2", "amp"}, "--shard fsdp2 with --precision amp-bf16 and no --fsdp2-mp: not modelled: FSDP2's mixed "
                         "precision is its MixedPrecisionPolicy"},
      {{"fsdp2-mp", "half-precision"},
       "--precision fp16/bf16 with --fsdp2-mp bf16:fp32/bf16:bf16/fp16:fp32/fp16:fp16: --fsdp2-mp casts a float32"},
      {{"ddp", "fsdp2-mp"}, "--fsdp2-mp is fully_shard's MixedPrecisionPolicy (--shard fsdp2) or FSDP1's "
                            "MixedPrecision (--shard fsdp): it needs one of them"},
      {{"fsdp", "fsdp2-mp", "torch-1.13"}, "--fsdp2-mp with --torch 1.13: FSDP's MixedPrecision is modelled from "
                                           "PyTorch 2's"},
      {{"ddp", "fsdp-cpu-offload"}, "--fsdp-cpu-offload is fully_shard's CPUOffloadPolicy (FSDP2) or FSDP1's "
                                    "CPUOffload(offload_params=True): it needs --shard fsdp2 or fsdp"},
      // Three features: FSDP1's CPU offload is modelled (Combinations.Fsdp1CpuOffloadIsModelled), but not with
      // gradient accumulation (wrong in torch: FullyShardedDataParallel's docstring) nor torch 1.13 (not read).
      {{"fsdp", "fsdp-cpu-offload", "grad-accum"}, "--fsdp-cpu-offload with --shard fsdp and --grad-accum: FSDP1's CPU "
                                                  "offload does not accumulate gradients outside no_sync()"},
      {{"fsdp", "fsdp-cpu-offload", "torch-1.13"}, "--fsdp-cpu-offload with --shard fsdp and --torch 1.13: FSDP1's CPU "
                                                  "offload is modelled from PyTorch 2's"},
      {{"fsdp2", "frozen-nf4"}, "--shard fsdp2 with --frozen-dtype nf4 is distributed QLoRA (torchtune's torchao "
                                "NF4Tensor, or accelerate's bitsandbytes Params4bit, under fully_shard): give "
                                "--lora-rank R"},
      {{"fsdp2", "kbit-prep"}, "--shard fsdp2 with --kbit-prep: not modelled: PEFT's prepare_model_for_kbit_training under fully_shard"},
      {{"quantize-experts", "kbit-prep"}, "--kbit-prep with --quantize-experts: axolotl skips "
                                          "prepare_model_for_kbit_training once it has parametrized the experts"},
      {{"quantize-experts", "torchao-nf4"}, "--nf4-impl torchao with --quantize-experts: bitsandbytes' "
                                            "replace_parameter_4bit quantizes the experts"},
      {{"quantize-experts", "fsdp"}, "--shard fsdp with --quantize-experts: not modelled"},
      {{"fsdp2-mp", "torchao-nf4"}, "with --nf4-impl torchao: not modelled: torchao's NF4Tensor under a "
                                    "mixed-precision policy"},
      {{"fsdp", "frozen-gptq"}, "--shard fsdp with --frozen-dtype gptq-int4: not modelled: GPTQ's packed"},
      {{"zero3", "frozen-awq"}, "--shard zero3 with --frozen-dtype awq-int4: not modelled: AWQ's packed"},
      {{"amp", "frozen-gptq"}, "--frozen-dtype gptq-int4 with --precision amp-bf16: gptqmodel's trainable"},
      {{"half-precision", "frozen-awq"}, "--frozen-dtype awq-int4 with --precision bf16: AutoAWQ's WQLinear_GEMM "
                                        "computes in float16"},
      {{"kbit-prep", "frozen-gptq"}, "--kbit-prep with --frozen-dtype gptq-int4: PEFT's prepare_model_for_kbit_training "
                                     "casts nothing"},
      {{"fsdp2", "torch-1.13"}, "--shard fsdp2 with --torch 1.13: fully_shard (FSDP2) is PyTorch 2's"},
      {{"torch-1.13", "fused-linear-ce"}, "--torch 1.13 with --loss fused-linear-ce: Liger Kernel needs PyTorch >= 2.1"},
      {{"torch-1.13", "offload-activations"},
       "--torch 1.13 with --offload-activations: torchtune's OffloadActivations needs PyTorch 2.6 or later"},
  };
  for (const Case& c : cases) {
    EstimateArgs a = base();
    for (const std::string& f : c.features) enables().at(f).apply(a);
    try {
      validate_estimate_args(a);
      ADD_FAILURE() << c.message << ": not refused";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.message << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace memplan
