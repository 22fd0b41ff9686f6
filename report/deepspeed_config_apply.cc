// --deepspeed's settings against the command line (apply_deepspeed, deepspeed_config.h): the ZeRO stage from the
// config or --shard, what stage 3 as memplan models it cannot take, the precision, accumulation and optimizer the
// config and the flags must agree on. Reading the file is deepspeed_config.cc's.
#include <string>

#include "onnx_import/errors.h"
#include "report/deepspeed_config.h"
#include "report/option_choices.h"

namespace memplan {
namespace {

// What stage 3 as memplan models it (cost_models/deepspeed_zero3.h) cannot take; each refusal names its key or flag.
void check_stage3(const DeepSpeedSettings& s, const std::string& where, const TrainingOptions& t) {
  const DeepSpeedZero& z = s.zero;
  // stage3_prefetch_bucket_size (a number or "auto") is modelled from the graph's module scopes
  // (cost_models/training_deepspeed3_prefetch.cc), which refuses a graph without them.
  // offload_optimizer cpu and offload_param cpu are modelled (cost_models/training_deepspeed3_offload.cc), each with
  // or without the other (stage3.py asserts neither against the other); so is nvme for each (below); a partial ratio is
  // refused where the key is read.
  // offload_param / offload_optimizer nvme (ZeRO-Infinity): modelled (cost_models/deepspeed_zero3_nvme.h), but for
  // these, each refused with DeepSpeed's reason.
  const bool param_nvme = z.offload_param == DeepSpeedOffload::Nvme, optimizer_nvme = z.offload_optimizer == DeepSpeedOffload::Nvme;
  // Without nvme_path DeepSpeed fails: partition_parameters.py Init._validate_remote_device asserts it for
  // offload_param; stage3.py _configure_tensor_swapping joins it into the swap folder's path for offload_optimizer.
  if (param_nvme && !z.param_swap.nvme_path)
    throw InputError(where + "zero_optimization.offload_param.nvme_path is missing with device \"nvme\": DeepSpeed stops "
                     "there (partition_parameters.py Init._validate_remote_device: '\"nvme_path\" in DeepSpeed Config "
                     "cannot be None if remote device is nvme')");
  if (optimizer_nvme && !z.optimizer_swap.nvme_path)
    throw InputError(where + "zero_optimization.offload_optimizer.nvme_path is missing with device \"nvme\": DeepSpeed "
                     "stops there (stage3.py _configure_tensor_swapping joins it into the swap folder's path)");
  if (param_nvme && z.aio.use_gds)
    throw InputError(where + "aio.use_gds true with offload_param nvme is not modelled (AsyncPartitionedParameterSwapper "
                     "then allocates its swap buffers on the GPU and pins them for GPUDirect Storage); false is");
  if (optimizer_nvme && z.optimizer_swap.pipeline)
    throw InputError(where + "zero_optimization.offload_optimizer.pipeline_read/pipeline_write true is not modelled "
                     "(PipelinedOptimizerSwapper overlaps sub-groups' swaps); false, PartitionedOptimizerSwapper, is");
  if (param_nvme && z.param_swap.buffer_count == 0)
    throw InputError(where + "zero_optimization.offload_param.buffer_count 0 leaves AsyncPartitionedParameterSwapper no "
                     "buffer to swap a partition through (get_buffer asserts 'No swap buffers to allocate')");
  if (!z.reduce_scatter)
    throw InputError(where + "zero_optimization.reduce_scatter false at stage 3 is not modelled "
                     "(__avg_scatter_contiguous_grads); the default true is");
  if (!z.contiguous_gradients)
    throw InputError(where + "zero_optimization.contiguous_gradients false is not modelled");
  // fp16 (DeepSpeed's fp16 section, the model cast to float16): the step's overflow check over the gradient partitions
  // is modelled (cost_models/training_deepspeed3_optimizer.cc, ds3_optimizer).
  // --checkpoint layers is modelled (cost_models/training_deepspeed3_recompute.cc): transformers' reentrant
  // checkpoint of each decoder layer's __call__, whose recomputation runs the modules' hooks again.
  const CheckpointMode c = t.checkpoint.mode;
  if (c == CheckpointMode::SelectiveOp || c == CheckpointMode::SelectiveLayers)
    throw InputError(where + "stage 3 with --checkpoint selective is not modelled (torchtitan's non-reentrant "
                     "checkpoint recomputes when backward first unpacks a saved tensor, after the block's pre-backward "
                     "hook, which changes the fetch trace); --checkpoint layers (transformers' reentrant one) is");
  if (c == CheckpointMode::Layers && !t.checkpoint.reentrant)
    throw InputError(where + "stage 3 with --checkpoint-impl non-reentrant is not modelled (the recomputation starts "
                     "when backward first unpacks a saved tensor, after the modules' pre-backward hooks, and a "
                     "recomputed Linear's saved weight aliases its gathered storage past its release: "
                     "docs/cost-models.md, \"DeepSpeed ZeRO-3\", Checkpointing); reentrant, transformers' default, is");
  if (c != CheckpointMode::None && c != CheckpointMode::Layers)
    throw InputError(where + "stage 3 with --checkpoint sqrt, every:K, at: or auto is not modelled (DeepSpeed gathers "
                     "per module call, and these checkpoint op ranges between separators, not module calls: what the "
                     "recomputation fetches again is undefined); --checkpoint layers (each repeated block) is");
  if (t.frozen_storage != FrozenStorage::Same)
    throw InputError(where + "stage 3 with --frozen-dtype is not modelled (DeepSpeed partitions the stored form)");
}

}  // namespace

void apply_deepspeed(const DeepSpeedSettings& s, const std::string& path, const std::string& shard_flag,
                     const std::string& precision_flag, bool impl_given, bool lora_dtype_given, TrainingOptions& t) {
  const std::string where = "--deepspeed " + path + ": ";
  // The stage: the config's, else --shard's; both given, they must agree.
  const bool shard_given = shard_flag != "none";
  if (shard_given && !kShardChoices.is(shard_flag, Sharding::Zero1) && !kShardChoices.is(shard_flag, Sharding::Zero2) &&
      !kShardChoices.is(shard_flag, Sharding::Zero3))
    throw InputError(where + "DeepSpeed's ZeRO is not --shard " + shard_flag + ": give --shard zero1/zero2 or none "
                     "(the config's zero_optimization.stage)");
  const int flag_stage = !shard_given ? -1 : kShardChoices.is(shard_flag, Sharding::Zero1) ? 1
                                           : kShardChoices.is(shard_flag, Sharding::Zero2) ? 2 : 3;
  if (s.stage >= 0 && flag_stage >= 0 && s.stage != flag_stage)
    throw InputError(where + "zero_optimization.stage " + std::to_string(s.stage) + " contradicts --shard " + shard_flag);
  const int stage = s.stage >= 0 ? s.stage : flag_stage;
  if (stage < 0)
    throw InputError(where + "no zero_optimization.stage and no --shard zero1/zero2: say which ZeRO stage runs");
  if (stage == 0)
    throw InputError(where + "zero_optimization.stage 0 is DeepSpeed without ZeRO: not modelled (give stage 1, 2 or 3)");
  if (stage == 3) check_stage3(s, where, t);
  DeepSpeedZero zero = s.zero;
  // offload_optimizer nvme below stage 3: stage_1_and_2.py (DeepSpeedZeroOptimizer.__init__) sets cpu_offload for any
  // device but "none", and the engine builds DeepSpeedCPUAdam for cpu and nvme alike (zero_use_cpu_optimizer): at stage
  // 2 it is "cpu". At stage 1 the engine's _do_optimizer_sanity_check picks BF16_Optimizer over ZeRO when the model is
  // bf16 and `not zero_cpu_offload()`, which nvme leaves true: refused.
  if (stage < 3 && zero.offload_optimizer == DeepSpeedOffload::Nvme) {
    if (stage == 1)
      throw InputError(where + "zero_optimization.offload_optimizer.device 'nvme' at stage 1 is not modelled (the engine's "
                       "_do_optimizer_sanity_check takes nvme as no cpu offload and may pick BF16_Optimizer); give "
                       "\"cpu\", which stage 1 runs the same way as nvme otherwise");
    zero.offload_optimizer = DeepSpeedOffload::Cpu;
  }
  if (stage < 3 && s.zero.offload_param != DeepSpeedOffload::None)
    throw InputError(where + "zero_optimization.offload_param at stage " + std::to_string(stage) +
                     ": parameter offload is \"valid only with stage 3\" (offload_config.py "
                     "DeepSpeedZeroOffloadParamConfig); stage 1 and 2 keep every parameter whole on the GPU");
  t.shard = stage == 1 ? Sharding::Zero1 : stage == 2 ? Sharding::Zero2 : Sharding::Zero3;
  t.deepspeed = zero;
  t.deepspeed.stage = stage;
  // fp16/bf16: DeepSpeed casts the model (engine: the module in the enabled type) and keeps float32 partitions.
  if (!s.precision.empty() && s.precision != precision_flag)
    throw InputError(where + (s.precision == "fp32" ? std::string("fp16 and bf16 disabled (a float32 model)")
                                                    : s.precision + ".enabled") +
                     " contradicts --precision " + precision_flag);
  // PEFT's float32 adapters (get_peft_model's autocast_adapter_dtype) under a half config. Stages 1 and 2:
  // DeepSpeedEngine._configure_distributed_model casts every parameter to the enabled type
  // (_cast_module_mixed_precision), the adapters too, so without --lora-dtype they are the base's type and float32
  // given contradicts it. Stage 3: HF Trainer builds the model under zero.Init (from_pretrained when
  // is_deepspeed_zero3_enabled), and that cast skips a zero-init model ("ZeRO-Init params are already at the
  // configured dtype", DeepSpeed PR #8066, from v0.19.2; before it module.bfloat16() cast the adapters too): the
  // adapters PEFT adds after loading keep their type, float32 by default.
  if (t.lora_rank > 0 && t.lora_float32 && stage < 3 && (t.precision == Precision::Fp16 || t.precision == Precision::Bf16)) {
    if (lora_dtype_given)
      throw InputError(where + "DeepSpeed at stage " + std::to_string(stage) + " casts every parameter to " +
                       precision_flag + ", PEFT's float32 adapters too: --lora-dtype float32 contradicts it (give base)");
    t.lora_float32 = false;
  }
  if (s.grad_accum > 0 && s.grad_accum != t.grad_accum)
    throw InputError(where + "gradient_accumulation_steps " + std::to_string(s.grad_accum) + " contradicts --grad-accum " +
                     std::to_string(t.grad_accum));
  if (t.grad_accum > 1 && stage == 1)
    throw InputError(where + "ZeRO-1 with --grad-accum > 1 is not modelled (the grads accumulate whole in .grad "
                     "between boundaries, then move into the buckets)");
  if (!t.deepspeed.contiguous_gradients)
    throw InputError(where + "zero_optimization.contiguous_gradients false is not modelled (buffered_reduce_fallback "
                     "flattens each bucket's grads)");
  // DeepSpeed's own optimizer: "Adam"/"AdamW" become FusedAdam (deepspeed/ops/adam/fused_adam.py, multi_tensor_applier:
  // no temporaries), DeepSpeedCPUAdam under offload_optimizer cpu.
  if (!s.optimizer.empty()) {
    if (s.optimizer != "adam" && s.optimizer != "adamw")
      throw InputError(where + "optimizer.type '" + s.optimizer + "' is not modelled (Adam and AdamW are)");
    if (t.optimizer != Optimizer::Adam && t.optimizer != Optimizer::AdamW)
      throw InputError(where + "optimizer.type " + s.optimizer + " contradicts --optimizer " +
                       kOptimizerChoices.name_of(t.optimizer));
    if (impl_given && t.optimizer_impl != OptimizerImpl::Fused)
      throw InputError(where + "optimizer.type " + s.optimizer + " is DeepSpeed's FusedAdam, which contradicts "
                       "--optimizer-impl " + kOptimizerImplChoices.name_of(t.optimizer_impl) + " (give fused, or none)");
    t.optimizer_impl = OptimizerImpl::Fused;
  }
  t.deepspeed.check_grad_overflow = t.precision == Precision::Fp16 ||
                                    (t.precision == Precision::Bf16 && s.bf16_check_grad_overflow.value_or(true));
  // DeepSpeedZeroOptimizer.zero_grad(set_to_none=True): no grads are kept between steps.
  t.grads_kept_between_steps = false;
}

}  // namespace memplan
