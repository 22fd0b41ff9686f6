#include "report/option_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cost_models/bnb_optimizer.h"
#include "cost_models/eager_semantics.h"
#include "onnx_import/errors.h"
#include "report/option_choices.h"
#include "report/recipes.h"

namespace memplan {
namespace {

bool train(const EstimateArgs& a) { return kModeChoices.is(a.mode, Mode::Training); }
bool vllm(const CommandArgs& a) { return kServeEngineChoices.is(a.serve.engine, ServeEngine::Vllm); }
bool eager(const CommandArgs& a) { return kServeEngineChoices.is(a.serve.engine, ServeEngine::Eager); }
bool ortgenai(const CommandArgs& a) { return kServeEngineChoices.is(a.serve.engine, ServeEngine::Ortgenai); }
// vLLM's own options apply under --engine vllm and to --engine all's vllm row.
bool vllm_row(const CommandArgs& a) { return vllm(a) || kServeEngineChoices.is(a.serve.engine, ServeEngine::All); }
// One engine's options (report/serve_engines.h) under another engine: the first one given, named with its engine.
std::string other_engines_option(const CommandArgs& a) {
  const ServeSettings d;
  const ServeSettings& s = a.serve;
  const struct {
    const char* flag;
    const char* engine;
    bool set;
  } owned[] = {
      {"--mem-fraction-static", "sglang", s.mem_fraction_static != d.mem_fraction_static},
      {"--max-total-tokens", "sglang", s.max_total_tokens != d.max_total_tokens},
      {"--chunked-prefill-size", "sglang", s.chunked_prefill_size != d.chunked_prefill_size},
      {"--page-size", "sglang", s.page_size != d.page_size},
      {"--free-gpu-memory-fraction", "trtllm", s.free_gpu_memory_fraction != d.free_gpu_memory_fraction},
      {"--tokens-per-block", "trtllm", s.tokens_per_block != d.tokens_per_block},
      {"--max-num-tokens", "trtllm", s.max_num_tokens != d.max_num_tokens},
      // vLLM's and eager's, which SGLang and TensorRT-LLM name otherwise (--page-size, --tokens-per-block, ...).
      {"--block-size", "vllm or eager", s.block_size != d.block_size},
      {"--max-batched-tokens", "vllm or eager", s.max_batched_tokens != d.max_batched_tokens},
  };
  // ONNX Runtime GenAI runs the graph's own cache type (its kv_cache_quantization is not modelled) on one GPU.
  if (ortgenai(a) && s.kv_cache_dtype != d.kv_cache_dtype)
    return "--kv-cache-dtype applies to --engine vllm, sglang and trtllm (ortgenai stores the graph's present type)";
  for (const auto& o : owned) {
    if (!o.set) continue;
    const std::string engine = o.engine;
    if (engine == s.engine || kServeEngineChoices.is(s.engine, ServeEngine::All)) continue;
    if (engine == "vllm or eager" && (vllm(a) || eager(a))) continue;
    return std::string(o.flag) + " applies to --engine " + engine + " (this is --engine " + s.engine + ")";
  }
  return "";
}
// Which optimizers are bitsandbytes' is cost_models/bnb_optimizer.h's one rule.
bool bitsandbytes(const EstimateArgs& a) {
  for (const auto& [name, optimizer] : kOptimizerChoices.items)
    if (name == a.optimizer) return is_bitsandbytes(optimizer);
  return false;
}

// --frozen-dtype fp16/bf16 re-stores the frozen weights, except in the type --precision already stores every
// floating parameter in (cost_models/frozen_storage.cc: a weight already in the type is kept as it is).
bool frozen_half(const EstimateArgs& a) {
  if (kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Fp16)) return !kPrecisionChoices.is(a.precision, Precision::Fp16);
  if (kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Bf16)) return !kPrecisionChoices.is(a.precision, Precision::Bf16);
  return false;
}

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

// Options that mean something only with another: each refused alone, naming both.
void check_requirements(const EstimateArgs& a) {
  if (!a.gpu.empty() && !a.arch.empty())
    throw InputError("--arch " + a.arch + " and --gpu " + a.gpu + ": give one (--gpu sets the GPU's own architecture)");
  if (a.sequence_parallel && a.tp < 2) throw InputError("--sequence-parallel needs --tp N with N >= 2");
  if ((!a.lora_targets.empty() || a.lora_dropout != 0 || a.lora_dtype != EstimateArgs{}.lora_dtype) && a.lora_rank == 0)
    throw InputError("--lora-targets, --lora-dropout and --lora-dtype need --lora-rank R");
  if (!kShardChoices.is(a.shard, Sharding::None) && a.gpus < 2)
    throw InputError("--shard " + a.shard + " needs --gpus N with N >= 2");
  if (a.micro_batches > 0 && a.pp < 2) throw InputError("--micro-batches applies to --pp N with N >= 2");
  if (!a.fsdp_wrap.empty() && !kShardChoices.is(a.shard, Sharding::Fsdp) && !kShardChoices.is(a.shard, Sharding::Fsdp2) &&
      a.pp < 2)
    throw InputError("--fsdp-wrap applies to --shard " + kShardChoices.name_of(Sharding::Fsdp) + ", " +
                     kShardChoices.name_of(Sharding::Fsdp2) + " and --pp");
  if (a.double_quant && !kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4))
    throw InputError("--double-quant applies to --frozen-dtype " + kFrozenDtypeChoices.name_of(FrozenStorage::Nf4));
  if (a.kbit_prep && !kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4))
    throw InputError("--kbit-prep prepares a 4-bit base: it needs --frozen-dtype " +
                     kFrozenDtypeChoices.name_of(FrozenStorage::Nf4));
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
  if (a.amsgrad && !kOptimizerChoices.is(a.optimizer, Optimizer::Adam) && !kOptimizerChoices.is(a.optimizer, Optimizer::AdamW))
    throw InputError("--amsgrad applies to --optimizer " + kOptimizerChoices.name_of(Optimizer::Adam) + " or " +
                     kOptimizerChoices.name_of(Optimizer::AdamW));
  if (bitsandbytes(a) && a.maximize)
    throw InputError("--maximize with --optimizer " + a.optimizer + ": bitsandbytes' optimizers have no maximize");
  if (bitsandbytes(a) && !a.optimizer_impl.empty())
    throw InputError("--optimizer-impl applies to torch.optim's adam and adamw; --optimizer " + a.optimizer +
                     " updates each parameter in one bitsandbytes kernel");
}

// Each option against --mode, the requirements and the combination matrix: the estimate's checks past its rows.
void check_estimate_combinations(const EstimateArgs& a) {
  CommandArgs args;
  args.estimate = a;
  const CommandArgs defaults;
  const bool training = train(a);
  for (const OptionSpec& row : option_schema()) {
    if (!(row.applies_to(kEstimate) || row.applies_to(kPlan)) || row.scope == Scope::Any) continue;
    if (field_text(row, args) == field_text(row, defaults)) continue;
    if (row.scope == Scope::Train && !training)
      throw InputError(row.message_name() + " applies to --mode train");
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
}

// "--shard fsdp": a choice's flag and name, as a feature's messages say it.
template <typename T>
std::string given_as(const char* flag, const Choices<T>& choices, const T& value) {
  return std::string(flag) + " " + choices.name_of(value);
}

}  // namespace

const std::vector<Feature>& features() {
  using S = Scope;
  using A = const EstimateArgs&;
  static const std::vector<Feature> all = {
      {"train", "--mode", given_as("--mode", kModeChoices, Mode::Training), S::Any, [](A a) { return train(a); }},
      {"onnxruntime", "--runtime", given_as("--runtime", kRuntimeChoices, Runtime::OnnxRuntime), S::Any,
       [](A a) { return kRuntimeChoices.is(a.runtime, Runtime::OnnxRuntime); }},
      {"ideal", "--runtime", given_as("--runtime", kRuntimeChoices, Runtime::Ideal), S::Any,
       [](A a) { return kRuntimeChoices.is(a.runtime, Runtime::Ideal); }},
      {"expandable-segments", "--expandable-segments", "--expandable-segments", S::Any,
       [](A a) { return a.expandable_segments; }},
      {"sdpa", "--attention", given_as("--attention", kAttentionChoices, AttentionImpl::Sdpa), S::Any,
       [](A a) { return kAttentionChoices.is(a.attention, AttentionImpl::Sdpa); }},
      {"untied", "--tied-embeddings", given_as("--tied-embeddings", kTiedEmbeddingChoices, TiedEmbeddings::No), S::Any,
       [](A a) { return kTiedEmbeddingChoices.is(a.tied_embeddings, TiedEmbeddings::No); }},
      {"tp", "--tp", "--tp", S::Any, [](A a) { return a.tp > 1; }},
      {"sequence-parallel", "--sequence-parallel", "--sequence-parallel", S::Any, [](A a) { return a.sequence_parallel; }},
      {"half", "--dtype", given_as("--dtype", kDtypeChoices, DType::Float16) + "/" + kDtypeChoices.name_of(DType::BFloat16),
       S::Inference, [](A a) { return !kDtypeChoices.is(a.dtype, DType::Float32); }},
      {"schedule-memory", "--schedule", given_as("--schedule", kScheduleChoices, true), S::Inference,
       [](A a) { return kScheduleChoices.is(a.schedule, true); }},
      {"half-precision", "--precision",
       given_as("--precision", kPrecisionChoices, Precision::Fp16) + "/" + kPrecisionChoices.name_of(Precision::Bf16),
       S::Train,
       [](A a) { return kPrecisionChoices.is(a.precision, Precision::Fp16) || kPrecisionChoices.is(a.precision, Precision::Bf16); }},
      {"amp", "--precision",
       given_as("--precision", kPrecisionChoices, Precision::AmpFp16) + "/" + kPrecisionChoices.name_of(Precision::AmpBf16),
       S::Train,
       [](A a) {
         return kPrecisionChoices.is(a.precision, Precision::AmpFp16) || kPrecisionChoices.is(a.precision, Precision::AmpBf16);
       }},
      {"checkpoint", "--checkpoint", "--checkpoint", S::Train, [](A a) { return a.checkpoint != EstimateArgs{}.checkpoint; }},
      {"selective", "--checkpoint", "--checkpoint selective[:op|:N]", S::Train,
       [](A a) { return a.checkpoint.rfind("selective", 0) == 0; }},
      {"grad-accum", "--grad-accum", "--grad-accum", S::Train, [](A a) { return a.grad_accum > 1; }},
      {"ddp", "--shard", given_as("--shard", kShardChoices, Sharding::Ddp), S::Train,
       [](A a) { return kShardChoices.is(a.shard, Sharding::Ddp); }},
      {"zero12", "--shard", given_as("--shard", kShardChoices, Sharding::Zero1) + "/" + kShardChoices.name_of(Sharding::Zero2),
       S::Train, [](A a) { return kShardChoices.is(a.shard, Sharding::Zero1) || kShardChoices.is(a.shard, Sharding::Zero2); }},
      {"zero3", "--shard", given_as("--shard", kShardChoices, Sharding::Zero3), S::Train,
       [](A a) { return kShardChoices.is(a.shard, Sharding::Zero3); }},
      {"fsdp", "--shard", given_as("--shard", kShardChoices, Sharding::Fsdp), S::Train,
       [](A a) { return kShardChoices.is(a.shard, Sharding::Fsdp); }},
      {"fsdp2", "--shard", given_as("--shard", kShardChoices, Sharding::Fsdp2), S::Train,
       [](A a) { return kShardChoices.is(a.shard, Sharding::Fsdp2); }},
      {"pp", "--pp", "--pp", S::Train, [](A a) { return a.pp > 1; }},
      {"lora", "--lora-rank", "--lora-rank", S::Train, [](A a) { return a.lora_rank > 0; }},
      {"frozen-nf4", "--frozen-dtype", given_as("--frozen-dtype", kFrozenDtypeChoices, FrozenStorage::Nf4), S::Train,
       [](A a) { return kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4); }},
      {"frozen-int8", "--frozen-dtype", given_as("--frozen-dtype", kFrozenDtypeChoices, FrozenStorage::Int8), S::Train,
       [](A a) { return kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Int8); }},
      {"frozen-half", "--frozen-dtype",
       given_as("--frozen-dtype", kFrozenDtypeChoices, FrozenStorage::Fp16) + "/" + kFrozenDtypeChoices.name_of(FrozenStorage::Bf16),
       S::Train, [](A a) { return frozen_half(a); }},
      {"trainable", "--trainable", "--trainable/--frozen", S::Train,
       [](A a) { return !a.trainable.empty() || !a.frozen.empty(); }},
      {"torch-1.13", "--torch", given_as("--torch", kTorchChoices, true), S::Train,
       [](A a) { return kTorchChoices.is(a.torch, true); }},
      {"bitsandbytes", "--optimizer", "--optimizer adamw8bit/paged-adamw/paged-adamw8bit", S::Train,
       [](A a) { return bitsandbytes(a); }},
      {"optimizer-in-backward", "--optimizer-in-backward", "--optimizer-in-backward", S::Train,
       [](A a) { return a.optimizer_in_backward; }},
      {"chunked-ce", "--loss", "--loss chunked-ce:N", S::Train,
       [](A a) { return a.loss.rfind("chunked-ce:", 0) == 0; }},
      {"chunked-ce-tokens", "--loss", "--loss chunked-ce-tokens:N", S::Train,
       [](A a) { return a.loss.rfind("chunked-ce-tokens:", 0) == 0; }},
      {"fused-linear-ce", "--loss", given_as("--loss", kLossChoices, LossKind::FusedLinearCrossEntropy), S::Train,
       [](A a) { return kLossChoices.is(a.loss, LossKind::FusedLinearCrossEntropy); }},
      {"upcast", "--upcast", "--upcast rmsnorm/softmax/loss", S::Train,
       [](A a) { return a.upcast != EstimateArgs{}.upcast && a.upcast != "logits"; }},
      {"upcast-logits", "--upcast", "--upcast logits", S::Train,
       [](A a) { return a.upcast.find("logits") != std::string::npos; }},
      {"kbit-prep", "--kbit-prep", "--kbit-prep", S::Train, [](A a) { return a.kbit_prep; }},
      {"offload-activations", "--offload-activations", "--offload-activations", S::Train,
       [](A a) { return a.offload_activations; }},
      {"lora-base-dtype", "--lora-dtype", given_as("--lora-dtype", kLoraDtypeChoices, false), S::Train,
       [](A a) { return kLoraDtypeChoices.is(a.lora_dtype, false); }},
  };
  return all;
}

const std::vector<Refusal>& refused_pairs() {
  static const std::vector<Refusal> all = {
      {"onnxruntime", "train", "a training step is modelled for PyTorch only: use --runtime pytorch or ideal"},
      {"onnxruntime", "tp", "--tp models Megatron-style tensor parallelism in PyTorch: use --runtime pytorch or ideal"},
      {"onnxruntime", "sdpa",
       "--attention sdpa is PyTorch's scaled_dot_product_attention; ONNX Runtime runs the graph's attention"},
      {"onnxruntime", "expandable-segments", "--expandable-segments configures PyTorch's caching allocator: use --runtime pytorch"},
      {"ideal", "expandable-segments", "--expandable-segments configures PyTorch's caching allocator: use --runtime pytorch"},
      {"sdpa", "torch-1.13", "scaled_dot_product_attention is new in PyTorch 2.0: use --torch 2"},
      {"selective", "torch-1.13", "torchtitan's checkpointing needs PyTorch 2 (torch.utils.checkpoint's context_fn and "
                                  "create_selective_checkpoint_contexts are not in 1.13): use --torch 2"},
      {"pp", "fsdp", "not modelled: use --shard ddp or zero1/zero2/zero3 within a stage"},
      {"pp", "checkpoint", "not modelled yet"},
      {"pp", "grad-accum", "the pipeline's --micro-batches are its gradient accumulation: give --micro-batches M"},
      {"tp", "lora", "not modelled: the adapters of a tensor-parallel layer are not split"},
      // DeepSpeed's ZeRO wraps its own optimizer over flattened fp32 partitions, and FSDP's flat parameters change
      // what bitsandbytes sees as a parameter (one state per flat shard): neither is modelled.
      // torchtune refuses gradient accumulation with optimizer_in_bwd (the update runs in every backward); its
      // distributed recipes are not modelled; the hook is new in PyTorch 2.1.
      {"optimizer-in-backward", "grad-accum", "each backward updates the parameters: torchtune refuses gradient "
                                              "accumulation with optimizer_in_bwd"},
      {"optimizer-in-backward", "ddp", "not modelled"},
      {"optimizer-in-backward", "zero12", "not modelled"},
      {"optimizer-in-backward", "zero3", "not modelled"},
      {"optimizer-in-backward", "fsdp", "not modelled"},
      {"optimizer-in-backward", "pp", "not modelled"},
      // torchtune's OffloadActivations asks torch.accelerator (new in PyTorch 2.6) for its streams.
      {"offload-activations", "torch-1.13", "torchtune's OffloadActivations needs PyTorch 2.6 or later (torch.accelerator)"},
      {"optimizer-in-backward", "torch-1.13", "Tensor.register_post_accumulate_grad_hook is new in PyTorch 2.1"},
      {"bitsandbytes", "zero12", "not modelled: ZeRO partitions torch optimizer states; use --shard ddp"},
      {"bitsandbytes", "zero3", "not modelled: ZeRO partitions torch optimizer states; use --shard ddp"},
      {"bitsandbytes", "fsdp", "not modelled: bitsandbytes' per-parameter states over FSDP's flat shards"},
      // FSDP flattens a unit's parameters into one floating tensor (torch/distributed/fsdp/_flat_param.py,
      // FlatParamHandle._validate_tensors_to_flatten: "Cannot flatten integer dtype tensors", "Must flatten
      // tensors with uniform dtype"); bitsandbytes' Int8Params are int8 tensors with their own scales, and frozen
      // weights re-stored in another float type than the trained ones break the one dtype.
      // torchtune's CEWithChunkedOutputLoss gathers each chunk of a tensor-parallel output whole
      // (compute_cross_entropy: logits.full_tensor() on a DTensor), which the vocabulary-sliced head is not.
      {"chunked-ce", "tp", "not modelled: torchtune gathers each chunk of a tensor-parallel output whole"},
      // litgpt's finetune/lora.py refuses tensor parallelism (ModelParallelStrategy(tensor_parallel_size=1)).
      {"chunked-ce-tokens", "tp", "not modelled: litgpt's chunked loss is on a whole (not vocabulary-sliced) head"},
      // Liger's fused loss takes the whole head weight and computes its grad in the forward
      // (liger_kernel/ops/fused_linear_cross_entropy.py); a sharded, gathered or vocabulary-parallel head, and a
      // pipeline stage's head, are not modelled. Liger needs PyTorch >= 2.1.2 (setup.py install_requires "torch>=2.1.2").
      {"fused-linear-ce", "tp", "not modelled: the fused loss takes the whole head weight, not a vocabulary slice"},
      {"fused-linear-ce", "pp", "not modelled"},
      {"fused-linear-ce", "zero12", "not modelled: the fused loss makes the head's grad whole in the forward"},
      {"fused-linear-ce", "zero3", "not modelled: the fused loss reads the gathered head weight"},
      {"fused-linear-ce", "fsdp", "not modelled: the fused loss reads the gathered head weight"},
      {"fused-linear-ce", "torch-1.13", "Liger Kernel needs PyTorch >= 2.1: use --torch 2"},
      // --upcast logits is transformers' own loss up to 4.45 (float32 logits returned, cross-entropy on shifted
      // copies); torchtune's chunked loss and Liger's fused one replace that loss, and the fused one never makes the
      // logits at all.
      {"upcast-logits", "chunked-ce", "--upcast logits is transformers' own loss (up to 4.45), which --loss "
                                      "chunked-ce replaces: give one of them"},
      {"upcast-logits", "chunked-ce-tokens", "--upcast logits is transformers' own loss (up to 4.45), which --loss "
                                             "chunked-ce-tokens replaces: give one of them"},
      {"upcast-logits", "fused-linear-ce", "--upcast logits is transformers' own loss (up to 4.45), which --loss "
                                           "fused-linear-ce replaces: give one of them"},
      {"fsdp", "frozen-int8", "FSDP flattens a unit's parameters into one floating tensor of one dtype; LLM.int8 "
                              "weights cannot be flattened with the ones that train"},
      {"fsdp", "frozen-half", "FSDP flattens a unit's parameters into one floating tensor of one dtype, so frozen "
                              "weights stored in another float type than the trained ones cannot share it (use "
                              "--frozen-dtype nf4, or --precision in the type the frozen weights should have)"},
      // FSDP2 (cost_models/training_fsdp2.cc) is modelled without a MixedPrecisionPolicy, on plain tensors: no
      // DTensor tensor parallelism, no all-gather extension (torchao's NF4Tensor fsdp_pre_all_gather), no other
      // storage; fully_shard is PyTorch 2's (torch.distributed._composable.fsdp).
      {"fsdp2", "amp", "not modelled: FSDP2 runs here without a MixedPrecisionPolicy, the model in its own type "
                       "(torchtune: --precision bf16); use --precision bf16/fp16 or fp32"},
      {"fsdp2", "tp", "not modelled: fully_shard over tensor-parallel DTensors"},
      {"fsdp2", "pp", "not modelled: use --shard ddp or zero1/zero2/zero3 within a stage"},
      {"fsdp2", "optimizer-in-backward", "not modelled"},
      {"fsdp2", "bitsandbytes", "not modelled"},
      {"fsdp2", "fused-linear-ce", "not modelled: the fused loss reads the gathered head weight"},
      {"fsdp2", "frozen-nf4", "not modelled: torchao's NF4Tensor all-gathers through its own extension"},
      {"fsdp2", "frozen-int8", "not modelled"},
      {"fsdp2", "frozen-half", "not modelled"},
      {"fsdp2", "torch-1.13", "fully_shard (FSDP2) is PyTorch 2's (torch.distributed._composable.fsdp, then torch.distributed.fsdp): use --torch 2"},
  };
  return all;
}

const Refusal* refusal(const std::string& a, const std::string& b) {
  for (const Refusal& r : refused_pairs())
    if ((r.a == a && r.b == b) || (r.a == b && r.b == a)) return &r;
  return nullptr;
}

const std::vector<CommandRule>& command_rules() {
  using A = const CommandArgs&;
  static const std::vector<CommandRule> all = {
      {kFit | kServe, "--gpu and --memory exclude each other: one budget, a catalog GPU's or a size",
       [](A a) -> std::string {
         return !a.estimate.gpu.empty() && !a.memory.empty() ? "--gpu and --memory exclude each other: give one budget" : "";
       }},
      {kFit | kServe, "--arch needs --memory: without a budget the table runs each catalog GPU at its own architecture",
       [](A a) -> std::string {
         return a.estimate.gpu.empty() && a.memory.empty() && !a.estimate.arch.empty()
                    ? "--arch " + a.estimate.arch + ": the catalog table uses each GPU's own architecture; drop --arch "
                      "(or give --memory SIZE)"
                    : "";
       }},
      {kServe, "serve --engine eager needs --context (vllm takes the model's position limit)",
       [](A a) -> std::string {
         return !eager(a) || a.serve.context > 0
                    ? ""
                    : "serve --engine eager needs --context N: the tokens of one sequence (prompt and generated)";
       }},
      {kServe, "--headroom applies to --engine eager (vllm: --gpu-memory-utilization)",
       [](A a) -> std::string {
         return !eager(a) && a.serve.headroom_percent != ServeSettings{}.headroom_percent
                    ? "--headroom applies to --engine eager; vLLM keeps what --gpu-memory-utilization leaves"
                    : "";
       }},
      {kServe, "--gpu-memory-utilization and --max-num-seqs apply to --engine vllm",
       [](A a) -> std::string {
         if (vllm_row(a)) return "";
         if (a.serve.gpu_memory_utilization != ServeSettings{}.gpu_memory_utilization)
           return "--gpu-memory-utilization applies to --engine vllm (eager: --headroom)";
         return a.serve.max_num_seqs != 0 ? "--max-num-seqs applies to --engine vllm" : "";
       }},
      {kServe, "--enable-lora applies to --engine vllm; --max-loras and --max-lora-rank need --enable-lora",
       [](A a) -> std::string {
         const ServeSettings d;
         if (!vllm_row(a) && a.serve.enable_lora) return "--enable-lora applies to --engine vllm";
         if (!a.serve.enable_lora && (a.serve.max_loras != d.max_loras || a.serve.max_lora_rank != d.max_lora_rank))
           return "--max-loras and --max-lora-rank need --enable-lora";
         return "";
       }},
      {kServe, "--quantization applies to --engine vllm; --quant-bits and --quant-group-size need gptq or awq",
       [](A a) -> std::string {
         if (!vllm_row(a) && !a.serve.quantization.empty()) return "--quantization applies to --engine vllm";
         const bool grouped = a.serve.quantization == "gptq" || a.serve.quantization == "awq";
         if (!grouped && (a.serve.quant_bits != 0 || a.serve.quant_group_size != 0))
           return "--quant-bits and --quant-group-size need --quantization gptq or awq";
         if (a.serve.quant_group_size == 0 && grouped) return "";
         if (a.serve.quantization == "awq" && a.serve.quant_group_size < 0)
           return "--quant-group-size " + std::to_string(a.serve.quant_group_size) + ": awq's groups are positive";
         return "";
       }},
      {kServe, "--engine-version and --enforce-eager apply to --engine vllm",
       [](A a) -> std::string {
         if (vllm_row(a)) return "";
         if (a.serve.engine_version != ServeSettings{}.engine_version) return "--engine-version applies to --engine vllm";
         return a.serve.enforce_eager ? "--enforce-eager applies to --engine vllm (eager runs no CUDA graphs)" : "";
       }},
      {kServe, "an engine's own options (SGLang's, TensorRT-LLM's, vLLM's and eager's) apply to that engine",
       [](A a) -> std::string { return other_engines_option(a); }},
      {kServe, "--free-gpu-memory-fraction is more than 0 and below 1",
       [](A a) -> std::string {
         const double f = a.serve.free_gpu_memory_fraction;
         return f <= 0 || f >= 1 ? fmt::format("--free-gpu-memory-fraction {}: TensorRT-LLM needs more than 0 and less "
                                               "than 1 (KVCacheManager.calculate_max_num_blocks asserts it)", f)
                                  : "";
       }},
      {kServe, "--gpu-memory-utilization is more than 0",
       [](A a) -> std::string {
         return a.serve.gpu_memory_utilization <= 0 ? "--gpu-memory-utilization 0: vLLM needs more than 0 (at most 1)"
                                                    : "";
       }},
      {kServe, "--engine vllm runs on PyTorch: --runtime applies to --engine eager",
       [](A a) -> std::string {
         if (ortgenai(a))  // it runs on ONNX Runtime: the default (pytorch) is read as onnxruntime
           return kRuntimeChoices.is(a.estimate.runtime, Runtime::Ideal)
                      ? "--runtime ideal with --engine ortgenai: ONNX Runtime GenAI runs on ONNX Runtime's allocator"
                      : "";
         return !eager(a) && !kRuntimeChoices.is(a.estimate.runtime, Runtime::PyTorch)
                    ? "--runtime " + a.estimate.runtime + " with --engine " + a.serve.engine + ": vLLM, SGLang and "
                      "TensorRT-LLM's PyTorch backend run on PyTorch's caching allocator (--runtime applies to --engine "
                      "eager)"
                    : "";
       }},
      {kServe, "--tp in serve applies to --engine vllm",
       [](A a) -> std::string {
         if (ortgenai(a) && a.estimate.tp > 1) return "--tp with --engine ortgenai: not modelled (one GPU)";
         return eager(a) && a.estimate.tp > 1 ? "--tp with --engine eager: not modelled (serve --engine vllm models "
                                                 "vLLM's tensor parallelism)"
                                              : "";
       }},
  };
  return all;
}

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

void settle_options(CommandArgs& args, Command command, std::vector<const OptionSpec*> given) {
  apply_recipe(args, command, given);
  validate_options(args, command, given);
}

}  // namespace memplan
