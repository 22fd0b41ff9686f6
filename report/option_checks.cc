#include "report/option_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cost_models/eager_semantics.h"
#include "cost_models/fsdp_groups.h"
#include "onnx_import/errors.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/model_session.h"
#include "report/combination_matrix.h"
#include "report/option_checks_ep.h"
#include "report/option_choices.h"
#include "report/recipes.h"

namespace memplan {
namespace {

bool is_train(const EstimateArgs& a) { return kModeChoices.is(a.mode, Mode::Training); }
// One row's value against its kind (a choice, an integer's minimum, a number's range).
void check_value(const OptionSpec& row, const CommandArgs& args) {
  const std::string value = field_text(row, args);
  const std::string flag = row.message_name();
  switch (row.kind) {
    case OptionKind::Choice:
      for (const std::string& c : row.choices)
        if (counted_choice(value, c, flag) > 0) return;  // NAME:N with a valid count
      if (std::find(row.choices.begin(), row.choices.end(), value) == row.choices.end())
        throw InputError(fmt::format("{} {}: expected one of {}", flag, value, fmt::join(row.choices, "|")));
      break;
    case OptionKind::Int:
      if (std::stod(value) < row.min)
        throw InputError(fmt::format("{} {}: must be at least {}", flag, value, row.min));
      break;
    case OptionKind::Real: {
      const double v = std::stod(value);
      if (!std::isfinite(v) || v < row.min || v > row.max || (row.max_exclusive && v == row.max))
        throw InputError(row.max >= 1e300 ? fmt::format("{} {}: must be at least {}", flag, value, row.min)
                                          : fmt::format("{} {}: expected a number in [{}, {}{}", flag, value, row.min,
                                                        row.max, row.max_exclusive ? ")" : "]"));
      break;
    }
    default: break;
  }
}

// The rows of any command in `commands` that are given or changed from their default (0 is "not given" for
// --micro-batches, --lora-rank, --context, ...: a default left alone is never checked).
std::vector<const OptionSpec*> rows_of(const CommandArgs& args, uint32_t commands,
                                       const std::vector<const OptionSpec*>& given) {
  const CommandArgs defaults;
  std::vector<const OptionSpec*> out;
  for (const OptionSpec& row : option_schema()) {
    if ((row.commands & commands) == 0 || row.kind == OptionKind::Model) continue;
    const bool is_given = std::find(given.begin(), given.end(), &row) != given.end();
    if (is_given || field_text(row, args) != field_text(row, defaults)) out.push_back(&row);
  }
  return out;
}

// --param-dtype: the parameters' type under autocast. Outside autocast --precision is that type.
void check_param_dtype(const EstimateArgs& a, Precision precision) {
  if (a.param_dtype == EstimateArgs{}.param_dtype && !a.param_dtype_auto) return;
  if (!is_amp(precision))
    throw InputError("--param-dtype " + a.param_dtype + " applies to --precision amp-fp16/amp-bf16 (autocast over "
                     "parameters of that type); without autocast --precision " + a.precision + " is the parameters' type");
  const DType stored = kDtypeChoices.parse(a.param_dtype, "--param-dtype");
  const DType low = low_precision_dtype(precision);
  // Under FSDP accelerate's mixed precision upcasts the parameters that train to float32 whatever the checkpoint's
  // type (accelerator.py Accelerator.prepare_model: each flat parameter that requires grad; utils/fsdp_utils.py
  // fsdp2_prepare_model; huggingface/accelerate 16cb6eb), which --param-dtype fp32 with --fsdp2-mp models. Half flat
  // parameters or shards under autocast (FSDP without that upcast) are not modelled.
  if (stored != DType::Float32 && (kShardChoices.is(a.shard, Sharding::Fsdp) || kShardChoices.is(a.shard, Sharding::Fsdp2)))
    throw InputError("--param-dtype " + a.param_dtype + " with --shard " + a.shard + ": under FSDP accelerate upcasts "
                     "the parameters that train to float32 (Accelerator.prepare_model, fsdp2_prepare_model): give "
                     "--param-dtype fp32 with --fsdp2-mp, as the hf-* recipes do; half parameters sharded under "
                     "autocast are not modelled");
  // Autocast to fp16 over bf16 parameters (or the reverse) casts every parameter each forward: not modelled
  // (cost_models/eager_semantics.cc autocast_target casts float32 only).
  if (stored != DType::Float32 && stored != low)
    throw InputError("--param-dtype " + a.param_dtype + " with --precision " + a.precision + ": not modelled: autocast "
                     "to another half type than the parameters' (give --param-dtype " + kDtypeChoices.name_of(low) +
                     " or fp32)");
  // torch's GradScaler, which the Trainer's fp16=True (accelerate's native_amp fp16) steps through, refuses fp16
  // grads: GradScaler.unscale_ calls _unscale_grads_(..., allow_fp16=False), which raises "Attempting to unscale FP16
  // gradients." (torch/amp/grad_scaler.py, pytorch 3f34c06). fp16 parameters that train have fp16 grads; PEFT's
  // float32 adapters (--lora-dtype float32) over an fp16 base do not.
  const bool fp16_trained = a.lora_rank == 0 || !kLoraDtypeChoices.parse(a.lora_dtype, "--lora-dtype") || !a.trainable.empty();
  if (stored == DType::Float16 && fp16_trained)
    throw InputError("--param-dtype " + a.param_dtype + (a.param_dtype_auto ? " (auto: as stored)" : "") +
                     " with --precision " + a.precision + ": fp16 parameters that train have fp16 grads, and torch's "
                     "GradScaler refuses them (GradScaler.unscale_: \"Attempting to unscale FP16 gradients.\"): train "
                     "float32 LoRA adapters (--lora-rank R), give --param-dtype fp32, or --precision fp16 without "
                     "autocast");
}

// Options that mean something only with another: each refused alone, naming both.
void check_requirements(const EstimateArgs& a) {
  if (!a.gpu.empty() && !a.arch.empty())
    throw InputError("--arch " + a.arch + " and --gpu " + a.gpu + ": give one (--gpu sets the GPU's own architecture)");
  if (a.sequence_parallel && a.tp < 2) throw InputError("--sequence-parallel needs --tp N with N >= 2");
  if ((!a.lora_targets.empty() || a.lora_dropout != 0 || a.lora_dtype != EstimateArgs{}.lora_dtype) && a.lora_rank == 0)
    throw InputError("--lora-targets, --lora-dropout and --lora-dtype need --lora-rank R");
  if (!kShardChoices.is(a.shard, Sharding::None) && a.gpus < 2)
    throw InputError("--shard " + a.shard + " needs --gpus N with N >= 2");
  if (!a.deepspeed.empty() && a.gpus < 2) throw InputError("--deepspeed needs --gpus N with N >= 2 (the data-parallel ranks)");
  if (!a.deepspeed.empty() && kZeroGradChoices.is(a.zero_grad, true))
    throw InputError("--deepspeed with --zero-grad " + a.zero_grad + ": DeepSpeedZeroOptimizer.zero_grad sets the grads to None");
  // Megatron-style splits of the 3-D experts (each expert's columns or rows across GPUs) are not how transformers'
  // grouped_mm_experts_forward runs; memplan's tensor parallelism splits MatMul weights. --ep's own rule
  // (report/option_checks_ep.cc) says why --tp is refused with it.
  if (a.model.experts == "grouped_mm" && a.tp > 1 && a.model.ep == 1)
    throw InputError("--experts-implementation grouped_mm with --tp " + std::to_string(a.tp) + ": not modelled (the "
                     "3-D experts' split across tensor-parallel GPUs; use eager)");
  if (a.micro_batches > 0 && a.pp < 2) throw InputError("--micro-batches applies to --pp N with N >= 2");
  check_expert_parallel_options(a);  // report/option_checks_ep.cc
  // accelerate converts outputs only where it runs torch.autocast (Accelerator.__init__ native_amp), and the copy
  // follows the loss the forward computed: the chunked and fused losses hold no whole logits, and with --loss none the
  // loop's backward would start from the copy.
  if (a.outputs_to_fp32 && !amp_precision(a.precision))
    throw InputError("--outputs-to-fp32 with --precision " + a.precision + ": accelerate converts a forward's outputs "
                     "only under its mixed precision (--precision amp-bf16 or amp-fp16)");
  if (a.outputs_to_fp32 && !whole_output_loss(a.loss))
    throw InputError("--outputs-to-fp32 with --loss " + a.loss + ": not modelled (the copy is taken after a loss "
                     "computed inside the forward: --loss cross-entropy or mse)");
  // Lightning Fabric converts a forward's outputs under its half and mixed precisions (report/option_rows_loss.cc);
  // 32-true's Precision returns them as they are. Its copy precedes the loop's loss, which accelerate's follows: one
  // wrapper or the other. Modelled before litgpt's chunked loss only (cost_models/training_loss.cc).
  if (a.outputs_to_default_dtype && a.outputs_to_fp32)
    throw InputError("--outputs-to-default-dtype with --outputs-to-fp32: Lightning Fabric's conversion (before the "
                     "loss) and accelerate's (after it) are two frameworks' wrappers: give one");
  if (a.outputs_to_default_dtype && kPrecisionChoices.is(a.precision, Precision::Fp32))
    throw InputError("--outputs-to-default-dtype with --precision " + a.precision + ": Fabric's 32-true precision "
                     "(plugins/precision/precision.py Precision.convert_output) returns float32 outputs as they are, "
                     "no copy");
  if (a.outputs_to_default_dtype && !litgpt_loss(a.loss))
    throw InputError("--outputs-to-default-dtype with --loss " + a.loss + ": not modelled (Fabric's float32 copies are "
                     "modelled before litgpt's chunked loss, --loss chunked-ce-tokens:N or chunked-ce-rows:N)");
  if (!a.fsdp_wrap.empty() && !kShardChoices.is(a.shard, Sharding::Fsdp) && !kShardChoices.is(a.shard, Sharding::Fsdp2) &&
      a.pp < 2)
    throw InputError("--fsdp-wrap applies to --shard " + kShardChoices.name_of(Sharding::Fsdp) + ", " +
                     kShardChoices.name_of(Sharding::Fsdp2) + " and --pp");
  if ((a.fsdp_wrap == kTorchtitanWrap || a.fsdp_wrap == kAccelerateWrap) && !kShardChoices.is(a.shard, Sharding::Fsdp2))
    throw InputError("--fsdp-wrap " + a.fsdp_wrap + " is " + a.fsdp_wrap + "'s fully_shard groups: it needs --shard " +
                     kShardChoices.name_of(Sharding::Fsdp2));
  const bool fsdp1 = kShardChoices.is(a.shard, Sharding::Fsdp);
  if (!kFsdp2MpChoices.is(a.fsdp2_mp, {Precision::Fp32, DType::Float32}) && !kShardChoices.is(a.shard, Sharding::Fsdp2) && !fsdp1)
    throw InputError("--fsdp2-mp is fully_shard's MixedPrecisionPolicy (--shard " + kShardChoices.name_of(Sharding::Fsdp2) +
                     ") or FSDP1's MixedPrecision (--shard " + kShardChoices.name_of(Sharding::Fsdp) + "): it needs one of them");
  // Frozen weights in a half type under FSDP: accelerate over a half checkpoint, which upcasts to float32 only what
  // requires grad (FSDP1: Accelerator.prepare_model, each flat parameter that does; FSDP2: fsdp2_prepare_model, each
  // parameter; v1.14.0), under its policy in the checkpoint's type (cost_models/training_fsdp.cc, training_fsdp2.cc).
  // Without that policy a unit would gather half and float32 parameters alike: not modelled.
  if (frozen_half(a.frozen_dtype, a.precision) && (fsdp1 || kShardChoices.is(a.shard, Sharding::Fsdp2))) {
    const std::string& half = a.frozen_dtype;  // fp16 or bf16: frozen_half holds only for those
    if (a.fsdp2_mp.rfind(half + ":", 0) != 0)
      throw InputError("--shard " + a.shard + " with --frozen-dtype " + a.frozen_dtype +
                       (a.frozen_dtype_auto ? " (auto: as stored)" : "") + ": modelled under a mixed-precision "
                       "policy in the frozen weights' type, as accelerate runs a " + half + " checkpoint (give "
                       "--fsdp2-mp " + half + ":" + half + " with --precision amp-" + half + " (fsdp) or fp32 "
                       "(fsdp2)); frozen " + half + " shards gathered beside float32 ones without it are not modelled");
  }
  if (a.fsdp_cpu_offload && !kShardChoices.is(a.shard, Sharding::Fsdp2) && !fsdp1)
    throw InputError("--fsdp-cpu-offload is fully_shard's CPUOffloadPolicy (FSDP2) or FSDP1's "
                     "CPUOffload(offload_params=True): it needs --shard " + kShardChoices.name_of(Sharding::Fsdp2) +
                     " or " + kShardChoices.name_of(Sharding::Fsdp));
  // FullyShardedDataParallel's docstring (torch/distributed/fsdp/fully_sharded_data_parallel.py): gradient
  // accumulation outside no_sync() with CPU offloading "yields incorrect results since FSDP will use the
  // newly-reduced gradient instead of accumulating" (cost_models/training_fsdp_offload.cc).
  if (a.fsdp_no_sync && (!fsdp1 || a.grad_accum < 2))
    throw InputError("--fsdp-no-sync is FSDP1's no_sync() over gradient accumulation: it needs --shard " +
                     kShardChoices.name_of(Sharding::Fsdp) + " and --grad-accum N with N >= 2");
  if (a.fsdp_cpu_offload && fsdp1 && a.grad_accum > 1 && !a.fsdp_no_sync)
    throw InputError("--fsdp-cpu-offload with --shard " + kShardChoices.name_of(Sharding::Fsdp) +
                     " and --grad-accum: FSDP1's CPU offload does not accumulate gradients outside no_sync() (its "
                     "docstring: it uses the newly-reduced gradient instead); inside no_sync() it does "
                     "(--fsdp-no-sync), and --shard " + kShardChoices.name_of(Sharding::Fsdp2) + " accumulates on the host");
  // Autocast over FSDP's mixed precision is how accelerate runs mixed_precision="bf16"/"fp16" under FSDP1: a policy
  // whose param_dtype (and reduce_dtype) is autocast's type (utils/dataclasses.py FullyShardedDataParallelPlugin.
  // set_mixed_precision, v1.14.0) and torch.autocast around the forward (accelerator.py prepare_model, native_amp):
  // modelled (cost_models/eager_semantics.h compute_param_dtype), under FSDP2 too (a loop's own autocast: accelerate's
  // FSDP2 has the policy alone, --precision fp32). A param_dtype that is not autocast's type is not modelled; FSDP2
  // under autocast without a policy is not modelled either.
  const bool mp = !kFsdp2MpChoices.is(a.fsdp2_mp, {Precision::Fp32, DType::Float32});
  const Precision precision = kPrecisionChoices.parse(a.precision, "--precision");
  check_param_dtype(a, precision);
  const std::string accelerate_policy = kFsdp2MpChoices.name_of(
      precision == Precision::AmpBf16 ? std::pair{Precision::Bf16, DType::BFloat16} : std::pair{Precision::Fp16, DType::Float16});
  if (mp && is_amp(precision) &&
      param_dtype(kFsdp2MpChoices.parse(a.fsdp2_mp, "--fsdp2-mp").first) != low_precision_dtype(precision))
    throw InputError("--fsdp2-mp " + a.fsdp2_mp + " with --precision " + a.precision + ": not modelled: the policy's "
                     "param_dtype is not autocast's type (accelerate's mixed_precision builds the policy in autocast's "
                     "type: give --fsdp2-mp " + accelerate_policy + ")");
  if (!mp && is_amp(precision) && kShardChoices.is(a.shard, Sharding::Fsdp2))
    throw InputError("--shard " + a.shard + " with --precision " + a.precision + " and no --fsdp2-mp: not modelled: "
                     "FSDP2's mixed precision is its MixedPrecisionPolicy; under autocast give a policy in autocast's "
                     "type (--fsdp2-mp " + accelerate_policy + "), or the policy alone (--precision fp32 with --fsdp2-mp "
                     "bf16:bf16, accelerate's, or bf16:fp32, torchtitan's), or the model in its own type (--precision "
                     "bf16, torchtune's)");
  // NF4 under a policy: bitsandbytes' Params4bit under fully_shard, its quant_storage taken to be param_dtype
  // (cost_models/training_fsdp2.cc). FSDP1 flattens it with the model's other parameters into one flat parameter of
  // one type, and torchao's NF4Tensor (auto's under --shard fsdp2) all-gathers in NF4: not modelled.
  if (mp && kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4)) {
    if (fsdp1)
      throw InputError("--fsdp2-mp " + a.fsdp2_mp + " with --shard " + a.shard + " and --frozen-dtype nf4: not "
                       "modelled: FSDP1 flattens bitsandbytes' quant_storage with the model's other parameters into "
                       "flat parameters of one type under its MixedPrecision (--shard fsdp2 with --nf4-impl "
                       "bitsandbytes is accelerate's FSDP2-QLoRA)");
    // --nf4-impl torchao as given is the combination matrix's (fsdp2-mp x torchao-nf4); auto's here.
    if (kNf4ImplChoices.is(a.nf4_impl, Nf4Impl::Auto) && is_torchao_nf4(a.frozen_dtype, a.nf4_impl, a.shard, a.quantize_experts))
      throw InputError("--fsdp2-mp " + a.fsdp2_mp + " with --frozen-dtype nf4 under --shard " + a.shard + " (--nf4-impl "
                       "auto: torchao's NF4Tensor): not modelled: torchtune runs its qlora_* models in their own type "
                       "without a policy; accelerate's FSDP2-QLoRA over bitsandbytes is --nf4-impl bitsandbytes");
  }
  if (mp && kTorchChoices.is(a.torch, true))
    throw InputError("--fsdp2-mp with --torch 1.13: FSDP's MixedPrecision is modelled from PyTorch 2's "
                     "_flat_param.py (and fully_shard is PyTorch 2's): use --torch 2");
  if (a.fsdp_cpu_offload && fsdp1 && kTorchChoices.is(a.torch, true))
    throw InputError("--fsdp-cpu-offload with --shard " + kShardChoices.name_of(Sharding::Fsdp) +
                     " and --torch 1.13: FSDP1's CPU offload is modelled from PyTorch 2's _flat_param.py: use --torch 2");
  if (a.double_quant && !kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4))
    throw InputError("--double-quant applies to --frozen-dtype " + kFrozenDtypeChoices.name_of(FrozenStorage::Nf4));
  if (a.quantize_experts && !kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4))
    throw InputError("--quantize-experts applies to --frozen-dtype " + kFrozenDtypeChoices.name_of(FrozenStorage::Nf4) +
                     " (bitsandbytes' replace_parameter_4bit; axolotl's 8-bit mode, a row-wise int8 parametrization "
                     "that dequantizes to float32 through int8_vectorwise_dequant, is not modelled)");
  if (!kNf4ImplChoices.is(a.nf4_impl, Nf4Impl::Auto) && !kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4))
    throw InputError("--nf4-impl applies to --frozen-dtype " + kFrozenDtypeChoices.name_of(FrozenStorage::Nf4));
  // torchao's to_nf4 always double-quantizes its scalers (NF4Tensor.double_quantize_scalers): nothing to choose.
  if (a.double_quant && is_torchao_nf4(a.frozen_dtype, a.nf4_impl, a.shard, a.quantize_experts))
    throw InputError("--double-quant is bitsandbytes' compress_statistics; torchao's NF4Tensor (--nf4-impl torchao, "
                     "or auto under --shard fsdp2) always quantizes its scalers: drop --double-quant");
  const bool gptq = kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::GptqInt4);
  const bool awq = kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::AwqInt4);
  // PEFT's prepare_model_for_kbit_training skips its float32 cast for GPTQ (src/peft/utils/other.py:
  // `if not is_gptq_quantized and not is_aqlm_quantized ...`), leaving only the checkpointing: the step is
  // --checkpoint layers without it. AWQ is not skipped, and WQLinear_GEMM's x.half() / out.to(input_dtype) are the
  // casts the preparation models.
  if (a.kbit_prep && gptq)
    throw InputError("--kbit-prep with --frozen-dtype gptq-int4: PEFT's prepare_model_for_kbit_training casts nothing "
                     "to float32 for a GPTQ model (is_gptq_quantized), it only enables gradient checkpointing: give "
                     "--checkpoint layers instead");
  if (a.kbit_prep && !kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4) && !awq)
    throw InputError("--kbit-prep prepares a 4-bit base: it needs --frozen-dtype " +
                     kFrozenDtypeChoices.name_of(FrozenStorage::Nf4) + " or awq-int4");
  if (a.frozen_group_size != EstimateArgs{}.frozen_group_size && !gptq && !awq)
    throw InputError("--frozen-group-size applies to --frozen-dtype gptq-int4 and awq-int4");
  if (a.frozen_group_size == 0) throw InputError("--frozen-group-size 0: give a positive group size, or -1 (one group)");
  // gptqmodel's TorchQuantLinear (the trainable GPTQ kernel) takes float16 and bfloat16 (SUPPORTS_DTYPES);
  // AutoAWQ's WQLinear_GEMM computes in float16 (x.half()). Autocast over their eager matmuls is not modelled.
  if (gptq && !kPrecisionChoices.is(a.precision, Precision::Fp16) && !kPrecisionChoices.is(a.precision, Precision::Bf16))
    throw InputError("--frozen-dtype gptq-int4 with --precision " + a.precision + ": gptqmodel's trainable "
                     "TorchQuantLinear runs float16 or bfloat16 models (SUPPORTS_DTYPES): give --precision fp16 or bf16");
  if (awq && !kPrecisionChoices.is(a.precision, Precision::Fp16))
    throw InputError("--frozen-dtype awq-int4 with --precision " + a.precision + ": AutoAWQ's WQLinear_GEMM computes in "
                     "float16 (x.half()): give --precision fp16 (with --kbit-prep: the float32 model's 4-bit layers "
                     "in float16)");
  if (a.kbit_prep && is_amp(kPrecisionChoices.parse(a.precision, "--precision")))
    throw InputError("--kbit-prep with --precision " + a.precision + ": the precision is the 4-bit layers' compute "
                     "dtype (bnb_4bit_compute_dtype: fp32, its default, bf16 or fp16); autocast over them is not modelled");
  if (a.kbit_prep && (!a.trainable.empty() || !a.frozen.empty()))
    throw InputError("--kbit-prep freezes every base parameter (prepare_model_for_kbit_training): --trainable and "
                     "--frozen are not modelled with it");
  // torchtune's recipes raise "enable_activation_offloading should only be True when enable_activation_checkpointing
  // is True" (recipes/lora_finetune_single_device.py, full_finetune_single_device.py: __init__).
  if (a.offload_activations && a.checkpoint == EstimateArgs{}.checkpoint)
    throw InputError("--offload-activations needs --checkpoint (torchtune's recipes refuse activation offloading "
                     "without activation checkpointing); --checkpoint layers is theirs");
  if (!a.checkpoint_impl.empty() && a.checkpoint == EstimateArgs{}.checkpoint)
    throw InputError("--checkpoint-impl " + a.checkpoint_impl + " applies to --checkpoint: nothing is checkpointed");
  if (a.amsgrad && !kOptimizerChoices.is(a.optimizer, Optimizer::Adam) && !kOptimizerChoices.is(a.optimizer, Optimizer::AdamW))
    throw InputError("--amsgrad applies to --optimizer " + kOptimizerChoices.name_of(Optimizer::Adam) + " or " +
                     kOptimizerChoices.name_of(Optimizer::AdamW));
  if (feature_on("bitsandbytes", a) && a.maximize)
    throw InputError("--maximize with --optimizer " + a.optimizer + ": bitsandbytes' optimizers have no maximize");
  if (feature_on("bitsandbytes", a) && !a.optimizer_impl.empty())
    throw InputError("--optimizer-impl applies to torch.optim's adam and adamw; --optimizer " + a.optimizer +
                     " updates each parameter in one bitsandbytes kernel");
}

// Each option against --mode, the requirements and the combination matrix: the estimate's checks past its rows.
void check_estimate_combinations(const EstimateArgs& a) {
  CommandArgs args;
  args.estimate = a;
  const CommandArgs defaults;
  const bool training = is_train(a);
  for (const OptionSpec& row : option_schema()) {
    if (!(row.applies_to(kEstimate) || row.applies_to(kPlan)) || row.scope == Scope::Any) continue;
    if (field_text(row, args) == field_text(row, defaults)) continue;
    if (row.scope == Scope::Train && !training)
      throw InputError(row.message_name() + " applies to --mode train (the default --mode is inference unless "
                       "--recipe is given: add --mode train)");
    if (row.scope == Scope::Inference && training)
      throw InputError(row.message_name() + " " + field_text(row, args) + " applies to --mode inference, not --mode train");
  }
  check_requirements(a);
  // The combination matrix.
  std::vector<const Feature*> on;
  for (const Feature& f : features())
    if (f.active(a)) on.push_back(&f);
  for (size_t i = 0; i < on.size(); ++i)
    for (size_t j = i + 1; j < on.size(); ++j)
      if (const Refusal* r = refusal(on[i]->name, on[j]->name))
        throw InputError(on[i]->value + " with " + on[j]->value + ": " + r->reason);
  // NF4 under fully_shard is QLoRA's base (cost_models/training_fsdp2.cc): torchao's NF4Tensor as torchtune's qlora_*
  // models hold it, or bitsandbytes' Params4bit under accelerate; NF4 bases whose other parameters train in full are
  // not modelled.
  if (kShardChoices.is(a.shard, Sharding::Fsdp2) && kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4) &&
      a.lora_rank == 0)
    throw InputError("--shard fsdp2 with --frozen-dtype nf4 is distributed QLoRA (torchtune's torchao NF4Tensor, or "
                     "accelerate's bitsandbytes Params4bit, under fully_shard): give --lora-rank R; NF4 without "
                     "adapters is not modelled");
}

}  // namespace

std::vector<const OptionSpec*> rows_to_check(const CommandArgs& args, Command command,
                                             const std::vector<const OptionSpec*>& given) {
  return rows_of(args, command, given);
}

void validate_estimate_args(const EstimateArgs& a) {
  CommandArgs args;
  args.estimate = a;
  for (const OptionSpec* row : rows_of(args, kEstimate | kPlan, {})) check_value(*row, args);
  check_estimate_combinations(a);
}

void validate_options(const CommandArgs& args, Command command, const std::vector<const OptionSpec*>& given) {
  for (const OptionSpec* row : rows_to_check(args, command, given)) check_value(*row, args);
  for (const CommandRule& r : command_rules())
    if ((r.commands & command) != 0)
      if (const std::string message = r.broken(args); !message.empty()) throw InputError(message);
  if (command != kInspect && command != kExport) check_estimate_combinations(args.estimate);
}

// --precision auto: the weights' stored type, as transformers' from_pretrained(dtype="auto") loads them, its default
// since transformers 5 (huggingface/transformers PR #42805; src/transformers/modeling_utils.py
// PreTrainedModel.from_pretrained): a config.json's torch_dtype, an ONNX file's initializers
// (onnx_import/model_session.h stored_float_dtype_at). Outside --mode train "auto" stays, for the mode check to name.
// --param-dtype auto (under autocast: the type the parameters stay in, as from_pretrained loaded them) and
// --frozen-dtype auto (the frozen weights' type, as loaded) are settled by the same read.
void settle_auto_precision(EstimateArgs& a) {
  if ((a.precision != kAutoPrecision && a.param_dtype != kAutoPrecision && a.frozen_dtype != kAutoPrecision) || !is_train(a))
    return;
  const DType stored = stored_float_dtype_at(a.model.path);
  if (a.precision == kAutoPrecision) {
    a.precision = kPrecisionChoices.name_of(stored == DType::BFloat16 ? Precision::Bf16
                                            : stored == DType::Float16 ? Precision::Fp16
                                                                       : Precision::Fp32);
    a.precision_auto = true;
  }
  if (a.param_dtype == kAutoPrecision) {
    a.param_dtype = kDtypeChoices.name_of(stored == DType::BFloat16 || stored == DType::Float16 ? stored : DType::Float32);
    a.param_dtype_auto = true;
  }
  if (a.frozen_dtype == kAutoPrecision) {  // a float32 checkpoint's frozen weights are the precision's: same
    a.frozen_dtype = stored == DType::BFloat16 ? "bf16" : stored == DType::Float16 ? "fp16" : "same";
    a.frozen_dtype_auto = true;
  }
}

// --mode, when not given: train where a --recipe (a fine-tuning framework) is, else the schema's default,
// inference. A config.json's --graph train is not taken for it: its graph estimated in inference is the answer an
// exported training graph gets without --mode, and the two stay the same.
void settle_mode(CommandArgs& args, Command command, const std::vector<const OptionSpec*>& given) {
  EstimateArgs& a = args.estimate;
  if (a.recipe.empty()) return;
  for (const OptionSpec* row : given)
    if (row->flag == "--mode") return;
  for (const OptionSpec& row : option_schema())
    if (row.flag == "--mode" && row.applies_to(command)) a.mode = kModeChoices.name_of(Mode::Training);
}

// --graph, when not given for a config.json: the one graph the command can mean. serve sizes a KV cache, which only
// the decoder with past has (decode); a training step (--mode train, given or a --recipe's) runs the training export
// (train). An inference estimate, and export, keep asking: prefill and decode are both inference graphs.
void settle_graph(CommandArgs& args, Command command) {
  ModelArgs& m = args.estimate.model;
  if (!m.graph.empty() || !is_config_path(m.path) || command == kExport) return;
  if (command == kServe)
    m.graph = config_graph_names()[size_t(ConfigGraph::Decode)];
  else if (is_train(args.estimate))
    m.graph = config_graph_names()[size_t(ConfigGraph::Train)];
}

void settle_options(CommandArgs& args, Command command, std::vector<const OptionSpec*> given) {
  settle_mode(args, command, given);
  apply_recipe(args, command, given);
  // --deepspeed at stage 1 or 2 casts PEFT's float32 adapters unless --lora-dtype says otherwise
  // (report/deepspeed_config_apply.cc).
  const auto is_given = [&](const char* flag) {
    return std::any_of(given.begin(), given.end(), [&](const OptionSpec* row) { return row->flag == flag; });
  };
  args.estimate.lora_dtype_given = is_given("--lora-dtype");
  args.serve.block_size_given = is_given("--block-size");
  args.serve.engine_version_given = is_given("--engine-version");
  settle_graph(args, command);
  settle_auto_precision(args.estimate);
  validate_options(args, command, given);
}

}  // namespace memplan
