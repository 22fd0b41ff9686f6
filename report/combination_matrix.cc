#include "report/combination_matrix.h"

#include "cost_models/bnb_optimizer.h"
#include "report/option_choices.h"

namespace memplan {
namespace {

bool train(const EstimateArgs& a) { return kModeChoices.is(a.mode, Mode::Training); }
// Which optimizers are bitsandbytes' is cost_models/bnb_optimizer.h's one rule.
bool bitsandbytes(const EstimateArgs& a) {
  for (const auto& [name, optimizer] : kOptimizerChoices.items)
    if (name == a.optimizer) return is_bitsandbytes(optimizer);
  return false;
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
       [](A a) { return amp_precision(a.precision); }},
      {"outputs-fp32", "--outputs-to-fp32", "--outputs-to-fp32", S::Train, [](A a) { return a.outputs_to_fp32; }},
      {"outputs-default-dtype", "--outputs-to-default-dtype", "--outputs-to-default-dtype", S::Train,
       [](A a) { return a.outputs_to_default_dtype; }},
      {"half-params", "--param-dtype", "--param-dtype fp16/bf16", S::Train,
       [](A a) { return a.param_dtype == "fp16" || a.param_dtype == "bf16"; }},
      {"checkpoint", "--checkpoint", "--checkpoint", S::Train, [](A a) { return checkpoint_given(a.checkpoint); }},
      {"selective", "--checkpoint", "--checkpoint selective[:op|:N]", S::Train,
       [](A a) { return selective_checkpoint(a.checkpoint); }},
      {"reentrant", "--checkpoint-impl", given_as("--checkpoint-impl", kCheckpointImplChoices, true), S::Train,
       [](A a) { return kCheckpointImplChoices.is(a.checkpoint_impl, true); }},
      {"non-reentrant", "--checkpoint-impl", given_as("--checkpoint-impl", kCheckpointImplChoices, false), S::Train,
       [](A a) { return kCheckpointImplChoices.is(a.checkpoint_impl, false); }},
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
      {"deepspeed", "--deepspeed", "--deepspeed", S::Train, [](A a) { return !a.deepspeed.empty(); }},
      {"fsdp2-mp", "--fsdp2-mp", "--fsdp2-mp bf16:fp32/bf16:bf16/fp16:fp32/fp16:fp16", S::Train,
       [](A a) { return !kFsdp2MpChoices.is(a.fsdp2_mp, {Precision::Fp32, DType::Float32}); }},
      {"fsdp-cpu-offload", "--fsdp-cpu-offload", "--fsdp-cpu-offload", S::Train, [](A a) { return a.fsdp_cpu_offload; }},
      {"pp", "--pp", "--pp", S::Train, [](A a) { return a.pp > 1; }},
      {"lora", "--lora-rank", "--lora-rank", S::Train, [](A a) { return a.lora_rank > 0; }},
      {"frozen-nf4", "--frozen-dtype", given_as("--frozen-dtype", kFrozenDtypeChoices, FrozenStorage::Nf4), S::Train,
       [](A a) { return kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Nf4); }},
      // --nf4-impl torchao as given (the torchtune recipe gives it); auto's torchao under --shard fsdp2 is fsdp2's rows.
      {"torchao-nf4", "--nf4-impl", given_as("--nf4-impl", kNf4ImplChoices, Nf4Impl::Torchao), S::Train,
       [](A a) { return kNf4ImplChoices.is(a.nf4_impl, Nf4Impl::Torchao); }},
      {"frozen-int8", "--frozen-dtype", given_as("--frozen-dtype", kFrozenDtypeChoices, FrozenStorage::Int8), S::Train,
       [](A a) { return kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Int8); }},
      {"frozen-gptq", "--frozen-dtype", given_as("--frozen-dtype", kFrozenDtypeChoices, FrozenStorage::GptqInt4), S::Train,
       [](A a) { return kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::GptqInt4); }},
      {"frozen-awq", "--frozen-dtype", given_as("--frozen-dtype", kFrozenDtypeChoices, FrozenStorage::AwqInt4), S::Train,
       [](A a) { return kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::AwqInt4); }},
      {"frozen-half", "--frozen-dtype",
       given_as("--frozen-dtype", kFrozenDtypeChoices, FrozenStorage::Fp16) + "/" + kFrozenDtypeChoices.name_of(FrozenStorage::Bf16),
       S::Train, [](A a) { return frozen_half(a.frozen_dtype, a.precision); }},
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
       [](A a) { return token_chunked_loss(a.loss); }},
      {"chunked-ce-rows", "--loss", "--loss chunked-ce-rows:N", S::Train,
       [](A a) { return row_chunked_loss(a.loss); }},
      {"fused-linear-ce", "--loss", given_as("--loss", kLossChoices, LossKind::FusedLinearCrossEntropy), S::Train,
       [](A a) { return kLossChoices.is(a.loss, LossKind::FusedLinearCrossEntropy); }},
      {"upcast", "--upcast", "--upcast rmsnorm/softmax/loss", S::Train,
       [](A a) { return a.upcast != EstimateArgs{}.upcast && a.upcast != "logits"; }},
      {"upcast-logits", "--upcast", "--upcast logits", S::Train,
       [](A a) { return a.upcast.find("logits") != std::string::npos; }},
      {"kbit-prep", "--kbit-prep", "--kbit-prep", S::Train, [](A a) { return a.kbit_prep; }},
      {"quantize-experts", "--quantize-experts", "--quantize-experts", S::Train, [](A a) { return a.quantize_experts; }},
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
      {"selective", "reentrant", "torchtitan's selective checkpointing is always non-reentrant (ptd_checkpoint_wrapper, "
                                 "CheckpointImpl.NO_REENTRANT): drop --checkpoint-impl"},
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
      // tensors with uniform dtype"); bitsandbytes' Int8Params are int8 tensors with their own scales. Frozen weights
      // in a half type under FSDP are a rule of report/option_checks.cc (check_requirements), not a pair.
      // torchtune's CEWithChunkedOutputLoss gathers each chunk of a tensor-parallel output whole
      // (compute_cross_entropy: logits.full_tensor() on a DTensor), which the vocabulary-sliced head is not.
      {"chunked-ce", "tp", "not modelled: torchtune gathers each chunk of a tensor-parallel output whole"},
      // litgpt's finetune/lora.py refuses tensor parallelism (ModelParallelStrategy(tensor_parallel_size=1)).
      {"chunked-ce-tokens", "tp", "not modelled: litgpt's chunked loss is on a whole (not vocabulary-sliced) head"},
      // finetune/full.py shards with FSDPStrategy, no tensor parallelism either.
      {"chunked-ce-rows", "tp", "not modelled: litgpt's chunked loss is on a whole (not vocabulary-sliced) head"},
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
      {"upcast-logits", "chunked-ce-rows", "--upcast logits is transformers' own loss (up to 4.45), which --loss "
                                           "chunked-ce-rows replaces: give one of them"},
      {"upcast-logits", "fused-linear-ce", "--upcast logits is transformers' own loss (up to 4.45), which --loss "
                                           "fused-linear-ce replaces: give one of them"},
      {"fsdp", "frozen-int8", "FSDP flattens a unit's parameters into one floating tensor of one dtype; LLM.int8 "
                              "weights cannot be flattened with the ones that train"},
      // FSDP2 (cost_models/training_fsdp2.cc) is modelled on plain tensors, on torchao's NF4Tensor (its
      // fsdp_pre_all_gather extension: torchtune's distributed QLoRA, --frozen-dtype nf4) and on --tp's DTensors (each
      // rank's slice chunked on dim 0: torchtitan's 2-D parallelism), with or without a MixedPrecisionPolicy
      // (--fsdp2-mp); no other storage. fully_shard is PyTorch 2's (torch.distributed._composable.fsdp). Autocast
      // under fully_shard is modelled with a policy only (accelerate's), which a pair cannot say: report/option_checks.cc.
      {"fsdp2", "pp", "not modelled: use --shard ddp or zero1/zero2/zero3 within a stage"},
      {"fsdp2", "optimizer-in-backward", "not modelled"},
      {"fsdp2", "bitsandbytes", "not modelled"},
      {"fsdp2", "fused-linear-ce", "not modelled: the fused loss reads the gathered head weight"},
      // NF4 under fully_shard is torchao's NF4Tensor (torchtune, no k-bit preparation) or bitsandbytes' Params4bit
      // sharded as a plain bf16 parameter (accelerate's FSDP-QLoRA, training_fsdp2.cc); PEFT's preparation, which
      // casts every other parameter to float32 beside the packed bf16 storage, is not modelled under it.
      {"fsdp2", "kbit-prep", "not modelled: PEFT's prepare_model_for_kbit_training under fully_shard (its float32 "
                             "casts beside bitsandbytes' packed bf16 quant_storage); drop --kbit-prep (with --recipe "
                             "hf-peft-qlora, use --recipe hf-peft --frozen-dtype nf4 --nf4-impl bitsandbytes)"},
      // torchao's NF4Tensor (--nf4-impl torchao) is modelled as torchtune's qlora_* recipes run it: the model in bf16 (or
      // fp32) without autocast, on one GPU or under fully_shard (cost_models/training_fsdp2.cc).
      {"torchao-nf4", "amp", "torchtune runs its qlora_* models in their own type without autocast (--precision bf16 "
                             "or fp32); linear_nf4 under autocast is not modelled"},
      {"torchao-nf4", "kbit-prep", "PEFT's prepare_model_for_kbit_training prepares a bitsandbytes base; torchtune's "
                                   "qlora_* models have no such step"},
      {"torchao-nf4", "ddp", "not modelled: torchtune shards its NF4 models with fully_shard (--shard fsdp2)"},
      {"torchao-nf4", "zero12", "not modelled: torchtune shards its NF4 models with fully_shard (--shard fsdp2)"},
      {"torchao-nf4", "zero3", "not modelled: torchtune shards its NF4 models with fully_shard (--shard fsdp2)"},
      {"torchao-nf4", "fsdp", "not modelled: torchtune shards its NF4 models with fully_shard (--shard fsdp2)"},
      {"torchao-nf4", "deepspeed", "not modelled: torchtune shards its NF4 models with fully_shard (--shard fsdp2)"},
      {"torchao-nf4", "tp", "not modelled: a tensor-parallel split of torchao's NF4Tensor"},
      {"torchao-nf4", "pp", "not modelled"},
      {"torchao-nf4", "torch-1.13", "torchao's NF4Tensor needs PyTorch 2: use --torch 2"},
      {"fsdp2-mp", "torchao-nf4", "not modelled: torchao's NF4Tensor under a mixed-precision policy (it all-gathers "
                                  "in NF4 whatever the param_dtype, fsdp_post_all_gather; torchtune runs its qlora_* "
                                  "models in their own type without one)"},
      {"fsdp2-mp", "quantize-experts", "not modelled: parametrized 4-bit experts (uint8 quant_storage) under a "
                                       "mixed-precision policy"},
      {"fsdp2", "frozen-int8", "not modelled"},
      // --quantize-experts follows axolotl's quantize_moe_experts (src/axolotl/loaders/model.py at 067b021,
      // _prepare_model_for_quantization): once the experts are parametrized it skips prepare_model_for_kbit_training
      // ("Parametrized expert tensors dequantize on access — would OOM"), and it does so under FSDP and ZeRO-3 as well.
      {"quantize-experts", "kbit-prep", "axolotl skips prepare_model_for_kbit_training once it has parametrized the "
                                        "experts (loaders/model.py _prepare_model_for_quantization): drop --kbit-prep "
                                        "(with --recipe hf-peft-qlora, use --recipe hf-peft --frozen-dtype nf4)"},
      {"quantize-experts", "torchao-nf4", "bitsandbytes' replace_parameter_4bit quantizes the experts, not torchao's "
                                          "NF4Tensor: give --nf4-impl bitsandbytes"},
      {"quantize-experts", "fsdp", "not modelled: parametrized 4-bit experts inside FSDP's flat parameters"},
      {"quantize-experts", "zero3", "not modelled: parametrized 4-bit experts partitioned by ZeRO-3"},
      {"quantize-experts", "deepspeed", "not modelled: parametrized 4-bit experts under DeepSpeed"},
      {"quantize-experts", "pp", "not modelled"},
      // accelerate's FSDP2 keeps a bf16-loaded frozen base in bf16 under its policy (utils/fsdp_utils.py
      // fsdp2_prepare_model upcasts only what requires grad, v1.14.0): bf16 shards beside float32 ones, not modelled.
      // MixedPrecisionPolicy casts a float32 model's parameters at the all-gather (training_fsdp2.cc); a model
      // already in a half type has nothing for param_dtype to cast. LoRA's adapters on the float32 base are cast
      // with the other parameters (report/estimate_config.cc: PEFT's half-base upcast does not apply).
      {"fsdp2-mp", "half-precision", "--fsdp2-mp casts a float32 model's parameters at each all-gather: give "
                                     "--precision fp32 (the sharded parameters' type), or no --fsdp2-mp"},
      // GPTQ's and AWQ's packed layers (cost_models/training_packed.cc) hold qweight, qzeros, scales (and g_idx) as
      // module buffers, not parameters: FSDP and ZeRO-3 shard parameters, and the tensor-parallel plan splits
      // weights, not packed int32 buffers. None is modelled; nor a pipeline stage of them.
      {"frozen-gptq", "fsdp", "not modelled: GPTQ's packed qweight/qzeros/scales are module buffers, not flat parameters"},
      {"frozen-gptq", "fsdp2", "not modelled: GPTQ's packed qweight/qzeros/scales are module buffers, not parameters"},
      {"frozen-gptq", "zero3", "not modelled: GPTQ's packed qweight/qzeros/scales are module buffers, not parameters"},
      {"frozen-gptq", "tp", "not modelled: a tensor-parallel split of GPTQ's packed layers"},
      {"frozen-gptq", "pp", "not modelled"},
      {"frozen-awq", "fsdp", "not modelled: AWQ's packed qweight/qzeros/scales are module buffers, not flat parameters"},
      {"frozen-awq", "fsdp2", "not modelled: AWQ's packed qweight/qzeros/scales are module buffers, not parameters"},
      {"frozen-awq", "zero3", "not modelled: AWQ's packed qweight/qzeros/scales are module buffers, not parameters"},
      {"frozen-awq", "tp", "not modelled: a tensor-parallel split of AWQ's packed layers"},
      {"frozen-awq", "pp", "not modelled"},
      // --deepspeed (report/deepspeed_config.h, cost_models/training_deepspeed.cc): DeepSpeedZeroOptimizer at stages 1
      // and 2, DeepSpeedZeroOptimizer_Stage3 at stage 3 (cost_models/training_deepspeed3.cc), over data parallelism alone, with a torch or DeepSpeed Adam on its float32 partition.
      {"deepspeed", "ddp", "DeepSpeed's ZeRO replaces DDP: give --shard zero1/zero2 or none (the config's stage, 1 to 3)"},
      {"deepspeed", "fsdp", "DeepSpeed's ZeRO is not FSDP: give --shard zero1/zero2 or none (the config's stage, 1 to 3)"},
      {"deepspeed", "fsdp2", "DeepSpeed's ZeRO is not FSDP: give --shard zero1/zero2 or none (the config's stage, 1 to 3)"},
      {"deepspeed", "zero3", "say the stage once: zero_optimization.stage 3 in the config, without --shard zero3"},
      {"deepspeed", "amp", "not modelled: DeepSpeed's fp16/bf16 modes cast the model; give --precision fp16/bf16/fp32"},
      {"deepspeed", "tp", "not modelled"},
      {"deepspeed", "pp", "not modelled"},
      {"deepspeed", "optimizer-in-backward", "DeepSpeedZeroOptimizer steps after backward"},
      {"deepspeed", "bitsandbytes", "not modelled: DeepSpeed steps its optimizer on one float32 partition"},
      {"deepspeed", "fused-linear-ce", "not modelled: the fused loss makes the head's grad in the forward"},
      {"deepspeed", "torch-1.13", "not modelled"},
      {"fsdp2", "torch-1.13", "fully_shard (FSDP2) is PyTorch 2's (torch.distributed._composable.fsdp, then torch.distributed.fsdp): use --torch 2"},
  };
  return all;
}

const Refusal* refusal(const std::string& a, const std::string& b) {
  for (const Refusal& r : refused_pairs())
    if ((r.a == a && r.b == b) || (r.a == b && r.b == a)) return &r;
  return nullptr;
}

bool feature_on(const std::string& name, const EstimateArgs& a) {
  for (const Feature& f : features())
    if (f.name == name) return f.active(a);
  return false;
}

}  // namespace memplan
