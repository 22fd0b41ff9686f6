// --recipe torchtitan: how torchtitan v0.2.2 (pytorch/torchtitan at 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce) trains
// its Llama 3 models (torchtitan/models/llama3: train_configs/llama3_8b.toml, 70b and 405b, the job_config.py
// defaults they leave) with torchtitan/train.py's Trainer. A full training of every parameter in float32 master
// weights; with --gpus N > 1 FSDP2 as its parallelize_llama applies it.
#include "report/option_choices.h"
#include "report/recipes.h"

namespace memplan {
namespace {


std::string torchtitan_contradiction(const CommandArgs& args) {
  const EstimateArgs& a = args.estimate;
  const std::string tt = "--recipe torchtitan";
  if (a.lora_rank > 0) return tt + " trains every parameter (torchtitan has no LoRA): --lora-rank is another recipe";
  if (!kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Same))
    return tt + " trains every parameter: --frozen-dtype " + a.frozen_dtype + " is another recipe";
  if (!kPrecisionChoices.is(a.precision, Precision::Fp32))
    return tt + " keeps the parameters in float32 (the model is built in float32; training.mixed_precision_param "
                "is FSDP2's param_dtype): --precision " + a.precision + " is not one of its choices";
  if (multi_gpu(args) && !kShardChoices.is(a.shard, Sharding::Fsdp2))
    return tt + " --gpus " + std::to_string(a.gpus) + " shards with FSDP2 (parallelize_llama's apply_fsdp, "
                "data_parallel_shard_degree -1): --shard " + a.shard + " is not one of its choices";
  return "";
}

std::vector<RecipeSetting> torchtitan_settings() {
  return {
      {"--precision", "fp32",
       "torchtitan/train.py Trainer.__init__ builds the model on the meta device in float32 (the parameters' dtype; "
       "the low-precision compute is FSDP2's MixedPrecisionPolicy, below)"},
      {"--shard", "fsdp2",
       "torchtitan/models/llama3/infra/parallelize.py parallelize_llama: apply_fsdp when parallel_dims.fsdp_enabled "
       "(data_parallel_shard_degree -1 in the llama3 configs: every GPU)",
       multi_gpu, "--gpus N > 1"},
      {"--fsdp2-mp", "bf16:fp32",
       "job_config.py Training.mixed_precision_param = \"bfloat16\", mixed_precision_reduce = \"float32\"; "
       "apply_fsdp: MixedPrecisionPolicy(param_dtype, reduce_dtype)",
       multi_gpu, "--gpus N > 1"},
      {"--fsdp-wrap", "torchtitan",
       "parallelize.py apply_fsdp: fully_shard(model.tok_embeddings), fully_shard on each transformer block, "
       "fully_shard([model.norm, model.output], reshard_after_forward=False) (reshard_after_forward_policy "
       "\"default\"), then fully_shard(model), which holds nothing left",
       multi_gpu, "--gpus N > 1"},
      {"--upcast", "rmsnorm,loss",
       "torchtitan/components/loss.py cross_entropy_loss: pred.flatten(0, 1).float(); the model's nn.RMSNorm is "
       "aten rms_norm (aten/src/ATen/native/layer_norm.cpp rms_norm_symint: input.to(opmath_t), the result "
       "type_as(input)), a float32 copy in a bfloat16 model",
       multi_gpu, "--gpus N > 1"},
      {"--free-output", "true", "torchtitan/train.py Trainer.forward_backward_step: `del pred` before loss.backward()"},
      {"--attention", "sdpa", "torchtitan/models/llama3/model/args.py TransformerModelArgs.attn_type = \"sdpa\""},
      {"--checkpoint", "selective:op",
       "llama3_8b.toml / 70b / 405b [activation_checkpoint] mode = \"selective\", selective_ac_option = \"op\""},
      {"--optimizer", "adamw", "llama3 configs' [optimizer] name = \"AdamW\""},
      {"--optimizer-impl", "fused", "job_config.py Optimizer.implementation = \"fused\""},
  };
}

}  // namespace

Recipe torchtitan_recipe() {
  return {"torchtitan", "torchtitan v0.2.2 (pytorch/torchtitan at 73a0e69, its llama3 configs)",
          "torchtitan's Llama 3 training: float32 parameters, and with --gpus N > 1 FSDP2 over every GPU with bf16 "
          "compute and float32 reduce-scatter, the token embedding, each block and [norm, output] each their own "
          "group ([norm, output] kept unsharded from forward to backward); per-op selective checkpointing, "
          "SDPA, fused AdamW, the loss on float32 logits dropped before backward. Batch and sequence stay yours.",
          torchtitan_settings(),
          torchtitan_contradiction,
          "tensor, context and pipeline parallelism (the configs' degrees are 1 for llama3_8b); torch.compile "
          "(compile.enable false in llama3_8b.toml); float8 training; the loss's sum reduction is counted as the "
          "mean's (the same buffers); on one GPU torchtitan applies no MixedPrecisionPolicy, so the model trains in "
          "float32 (this recipe, without --gpus)",
          {"adamw"},
          "llama3 configs' [optimizer] name (torchtitan/components/optimizer.py build_optimizers: Adam or AdamW)"};
}

}  // namespace memplan
