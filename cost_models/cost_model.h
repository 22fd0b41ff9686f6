// Cost models: a shaped Graph -> a memory Program (what each op allocates, saves and frees),
// per runtime, precision and mode. The cost model never packs; the planner never asks why.
// Every rule and the source of every constant: docs/cost-models.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost_models/deepspeed_zero.h"
#include "cost_models/runtime.h"
#include "onnx_import/checked.h"
#include "onnx_import/graph.h"
#include "planner/measure.h"
#include "planner/program.h"

namespace memplan {

// --dtype: float weights and activations are stored in this type. How the model runs (runtime, attention, tensor
// parallelism, ...) is ExecutionOptions' (cost_models/runtime.h), shared with training.
struct InferenceOptions {
  DType float_dtype = DType::Float32;
  // Tensors held outside the step's allocator, named (a serving engine's paged KV cache: the past inputs and
  // present outputs live in its own preallocated blocks): their buffers take 0 bytes, as does a tensor such a
  // name is an Identity of (the same storage).
  std::vector<std::string> held_outside;
};

struct CostModelResult {
  Program program;
  // Bytes the runtime holds outside the program's buffers and outside any allocator's counters
  // (documented per runtime; the CUDA context is never included).
  uint64_t fixed_bytes = 0;
  std::vector<std::string> notes;  // assumptions the user should know about, one sentence each
};

CostModelResult build_inference_program(const Graph& graph, const ExecutionOptions& execution,
                                        const InferenceOptions& options);

// ---- Training (PyTorch eager semantics) ----

// AdamW8bit, PagedAdamW, PagedAdamW8bit: bitsandbytes' (cost_models/bnb_optimizer.h).
enum class Optimizer { Sgd, Momentum, Adam, AdamW, AdamW8bit, PagedAdamW, PagedAdamW8bit };
enum class Precision { Fp32, Fp16, Bf16, AmpFp16, AmpBf16 };
// ChunkedCrossEntropy: torchtune's CEWithChunkedOutputLoss over TrainingOptions::loss_chunks slices of the sequence;
// ChunkedCrossEntropyTokens: litgpt's chunked_cross_entropy on the head's chunks of loss_chunks positions;
// ChunkedCrossEntropyRows: the same on a whole head (litgpt's full fine-tune), in chunks of loss_chunks rows;
// FusedLinearCrossEntropy: Liger Kernel's LigerFusedLinearCrossEntropyLoss in place of the head and the loss
// (cost_models/training_loss_chunked.cc, training_loss_chunked_tokens.cc, training_loss_chunked_rows.cc,
// training_loss_fused.cc).
enum class LossKind {
  None, CrossEntropy, Mse, ChunkedCrossEntropy, ChunkedCrossEntropyTokens, ChunkedCrossEntropyRows, FusedLinearCrossEntropy
};
// Fsdp: PyTorch FullyShardedDataParallel (FSDP1), FULL_SHARD, one FlatParameter per wrapping unit (wrap_units.h).
// Fsdp2: PyTorch's fully_shard (FSDP2), each parameter sharded on dim 0, one parameter group per unit
// (cost_models/training_fsdp2.cc).
enum class Sharding { None, Ddp, Zero1, Zero2, Zero3, Fsdp, Fsdp2 };
// SelectiveOp, SelectiveLayers: torchtitan's selective activation checkpointing (cost_models/selective_checkpoint.h).
enum class CheckpointMode { None, Sqrt, Every, At, Auto, Layers, SelectiveOp, SelectiveLayers };
// How torch.optim runs the update (torch/optim/adam.py):
//  - Foreach: _multi_tensor_adam of PyTorch >= 2.0, the CUDA default: torch._foreach_sqrt allocates one
//    temporary per parameter, updated in place afterwards (one parameter-sized set alive at once);
//  - ForeachTorch1: torch 1.13's _multi_tensor_adam, whose out-of-place torch._foreach_add(sqrt, eps)
//    makes a second set while the first is alive (two sets);
//  - SingleTensor: _single_tensor_adam, torch 1.13's default: per parameter, sqrt() then the division
//    allocate two temporaries of that parameter's size (two at once, one parameter at a time);
//  - Fused: fused=True kernels, no temporaries.
// SGD (with or without momentum) updates in place in every implementation.
enum class OptimizerImpl { Foreach, ForeachTorch1, SingleTensor, Fused };
// --frozen-dtype: how frozen weights are stored (cost_models/frozen_storage.h). Same: as the precision says.
// GptqInt4 / AwqInt4: a GPTQ or AWQ 4-bit checkpoint's packed layers (cost_models/packed_int_weights.h).
enum class FrozenStorage { Same, Fp16, Bf16, Int8, Nf4, GptqInt4, AwqInt4 };

// Optimizer flags that change what the update allocates (torch/optim/adam.py, sgd.py).
struct OptimizerFlags {
  bool amsgrad = false;       // Adam/AdamW: a third state per parameter, max_exp_avg_sq
  bool maximize = false;      // the update negates the grads first: a grad-sized copy
  // weight_decay > 0. AdamW decays the parameters in place (decoupled); Adam and SGD add wd * param to
  // a copy of the grads (L2), except torch 1.13's foreach Adam, which adds it into the grads in place.
  bool weight_decay = false;
};

struct CheckpointOptions {
  CheckpointMode mode = CheckpointMode::None;
  int every = 0;                          // every:K: a boundary every K candidate boundaries; selective:N: N
  std::vector<std::string> at;            // at:T1,T2: boundary tensor names
  // auto: the device memory the step must run in, compared with the allocator's required bytes (planner/measure.h)
  // as fit and check compare them.
  uint64_t budget_bytes = 0;
  // auto: the boundaries (tensor names) a search over the same graph already chose, taken without searching again:
  // the first iteration runs with the steady-state step's checkpoints, the ones the estimate reports.
  std::optional<std::vector<std::string>> auto_chosen;
  // --checkpoint-impl: torch.utils.checkpoint's reentrant implementation (use_reentrant=True: torch 1.13's default,
  // transformers' gradient_checkpointing_enable default) or the non-reentrant one (use_reentrant=False; torch 2's
  // checkpoint_wrapper default, CheckpointImpl.NO_REENTRANT, so torchtune's and litgpt's checkpointing, and
  // torchtitan's selective modes, which are always non-reentrant).
  bool reentrant = true;
  // Non-reentrant only: the recomputation stops at its last saved tensor (torch/utils/checkpoint.py,
  // _recomputation_hook raising _StopRecomputationError once every forward pack is recomputed; early stop is on by
  // default from torch 2.1). torch 1.13 recomputes the whole segment.
  bool early_stop = true;
};

// --upcast: the float32 islands a framework runs inside a half-precision model (cost_models/fp32_islands.h):
// RMSNorm's float32 copy, eager attention's float32 softmax, and the logits' float32 copy for the loss.
// `logits`: transformers before ForCausalLMLoss (LlamaForCausalLM.forward up to 4.45): the forward returns
// logits.float(), and the loss copies the shifted logits (shift_logits = logits[..., :-1, :].contiguous()).
struct Upcast {
  bool rms_norm = false;
  bool softmax = false;
  bool loss = false;
  bool logits = false;
  bool any() const { return rms_norm || softmax || loss || logits; }
};

struct TrainingOptions {
  // The runtime (ExecutionOptions, runtime_model(e, true)): pytorch, eager PyTorch on a CUDA GPU with the cuBLAS
  // workspaces (one per thread's handle: the forward's and autograd's backward device thread's); ideal, the same
  // eager semantics without any library workspace (what a CPU run under torch.profiler measures); onnxruntime:
  // not modelled. The defaults are the CLI's: AdamW and a cross-entropy loss.
  Optimizer optimizer = Optimizer::AdamW;
  OptimizerImpl optimizer_impl = OptimizerImpl::Foreach;
  OptimizerFlags optimizer_flags;
  Precision precision = Precision::Fp32;
  // --param-dtype, under --precision amp-* only: the type the parameters are stored in, and so their grads and the
  // optimizer's states (torch.optim's AdamW makes exp_avg/exp_avg_sq with zeros_like(param)); torch.autocast runs over
  // them. Float32: plain PyTorch AMP (float32 master weights). BFloat16/Float16: transformers 5's Trainer with bf16=True
  // (fp16=True) over a checkpoint loaded in its stored half type (from_pretrained dtype="auto"): accelerate wraps the
  // forward in autocast and upcasts nothing outside FSDP (eager_semantics.h stored_param_dtype).
  DType amp_param_dtype = DType::Float32;
  LossKind loss = LossKind::CrossEntropy;
  int loss_chunks = 0;                    // --loss chunked-ce:N: N (>= 1) slices of the logits' sequence axis;
                                          // chunked-ce-tokens:K: slices of K positions;
                                          // chunked-ce-rows:N: chunks of N rows
  CheckpointOptions checkpoint;
  int grad_accum = 1;                     // micro-batches per optimizer step (the graph's batch is one micro-batch)
  int gpus = 1;
  // --ep N: expert-parallel GPUs among the gpus, the graph already rank 0's (onnx_import/hf_moe_grouped.h);
  // FSDP2 shards an expert's slice over gpus / N (cost_models/training_ep.cc).
  int expert_parallel = 1;
  Sharding shard = Sharding::None;
  bool gradient_as_bucket_view = false;   // DDP: buckets alias the grads instead of copying them
  std::string fsdp_wrap;                  // --fsdp-wrap: regex whose first group names a parameter's unit (empty: default rule)
  // --pp N --micro-batches M: pipeline parallel, 1F1B (cost_models/pipeline.h); micro_batches 0: N.
  int pp = 1;
  int micro_batches = 0;
  // true: optimizer states exist from the start (a later iteration; the headline).
  // false: the first iteration (states are created inside the optimizer step).
  bool steady_state = true;
  // torch 1.x's optimizer.zero_grad() zeroes each .grad and keeps it allocated between steps (set_to_none
  // defaults to True only from 2.0, torch/optim/optimizer.py): the grads exist before the step and each
  // backward contribution is added into them in place, as with gradient accumulation.
  bool grads_kept_between_steps = false;
  // --optimizer-in-backward: each parameter updated by its own optimizer as soon as its grad is complete, in
  // backward, and its grad freed there (training_optimizer.cc update_params_completed_at).
  bool optimizer_in_backward = false;
  // --free-output: the loop keeps no reference to the model's output past the loss, as Hugging Face's
  // Trainer.training_step does (compute_loss returns the loss alone; transformers/trainer.py): the output dies
  // at its last reader. false: `output = model(x)` holds it through backward and the step (a plain loop).
  bool free_output = false;
  // --outputs-to-fp32: accelerate's convert_outputs_to_fp32 around the autocast forward (Accelerator.prepare_model
  // under mixed precision): the half output comes back as a float32 copy taken after the loss, which takes the
  // output's place (training_loss.cc emit_output_to_fp32).
  bool outputs_to_fp32 = false;
  // --outputs-to-default-dtype: Lightning Fabric's output conversion (_FabricModule.forward returns
  // precision.convert_output(output)): the model's half outputs come back as float32 copies made before the loop's
  // loss, which reads them; the copies replace the outputs, and backward casts each copy's grad back to the half
  // type (training_loss.cc emit_convert_output). Modelled before --loss chunked-ce-tokens:K (litgpt's).
  bool outputs_to_default_dtype = false;
  // torch 1.13's MeanBackward1 (mean.dim) keeps its whole input: derivatives.yaml's formula
  // `mean_backward(grad, self.sym_sizes(), dim, self.sym_numel(), keepdim)` uses self.sym_numel(), which
  // the autograd codegen (tools/autograd/load_derivatives.py, saved_variables) had no replacement for, so
  // it saved `self` (on 1.13 `y.grad_fn._saved_self` is the input). pytorch#109935 (2023-09, "Avoid saving
  // `self` for mean.backward", first in 2.2) added the sym_numel replacement: from 2.2 only sizes are kept.
  bool mean_saves_input = false;
  // Which parameters train (--trainable / --frozen): regular expressions searched in initializer names;
  // empty: every float parameter trains. Frozen parameters get no grad and no optimizer state.
  std::string trainable;
  std::string frozen;
  // LoRA, what-if (cost_models/lora_adapters.h): rank-`lora_rank` adapters on every MatMul/Gemm whose weight
  // name `lora_targets` (a regular expression, searched) finds; the base weights freeze. 0 / empty: none.
  // `lora_dropout` > 0: nn.Dropout on the adapter's input (a copy and a mask per adapted layer).
  int lora_rank = 0;
  std::string lora_targets;
  double lora_dropout = 0;
  // --lora-dtype: PEFT keeps the adapters in float32 on a half base (BaseTuner._cast_adapter_dtype,
  // autocast_adapter_dtype=True); false: in the base's type (autocast_adapter_dtype=False, or PEFT before it).
  bool lora_float32 = true;
  // --frozen-dtype / --double-quant: frozen weights stored as fp16, bf16, int8 or NF4 (bitsandbytes), each
  // dequantized into the compute type for the op that reads it, in forward and again in backward; or as a GPTQ or
  // AWQ checkpoint's packed layers, run as gptqmodel and AutoAWQ train them (cost_models/training_packed.cc).
  FrozenStorage frozen_storage = FrozenStorage::Same;
  bool double_quant = false;              // NF4: QLoRA's double quantization of the block scales
  // --quantize-experts: with bitsandbytes' NF4, a mixture of experts' stacked parameters (transformers 5's grouped
  // experts, no Linear layers) re-stored too, by bitsandbytes' replace_parameter_4bit as axolotl's
  // quantize_moe_experts applies it (frozen_storage.h parametrized_experts).
  bool quantize_experts = false;
  // --nf4-impl: whose NF4 --frozen-dtype nf4 is. false: bitsandbytes' Params4bit and MatMul4Bit (PEFT's QLoRA);
  // true: torchao's NF4Tensor and linear_nf4 (torchtune's qlora_* models, on one GPU or under fully_shard;
  // frozen_storage.h torchao_nf4).
  bool nf4_torchao = false;
  // --frozen-group-size: GPTQ's or AWQ's inputs per scale and zero point (-1, GPTQ only: one group over the input);
  // 128 is transformers' GPTQConfig and AwqConfig default group_size.
  int64_t quant_group_size = 128;
  // --upcast: what the framework computes in float32 inside a half-precision model (cost_models/fp32_islands.h).
  Upcast upcast;
  // --kbit-prep: PEFT's prepare_model_for_kbit_training over the NF4 base (cost_models/kbit_prep.h): every other
  // parameter and activation float32, each 4-bit layer computing in the precision's type.
  bool kbit_prep = false;
  // --offload-activations: torchtune's OffloadActivations over the model's forward (cost_models/activation_offload.h).
  bool offload_activations = false;
  // --fsdp2-mp PARAM:REDUCE, with --shard fsdp2: FSDP2's MixedPrecisionPolicy(param_dtype, reduce_dtype)
  // (cost_models/training_fsdp2.cc); with --shard fsdp: FSDP1's MixedPrecision(param_dtype, reduce_dtype)
  // (cost_models/training_fsdp_mp.cc). `precision` is then param_dtype (fp16/bf16: the all-gathered parameters' and
  // the compute's type) while the sharded parameters, their grads and the optimizer states keep the model's
  // float32; fsdp2_reduce_dtype is the reduce-scatter's (Float32, or param_dtype's type).
  bool fsdp2_mp = false;
  DType fsdp2_reduce_dtype = DType::Float32;
  // --fsdp-cpu-offload, with --shard fsdp2: fully_shard's CPUOffloadPolicy(pin_memory=True) (torchtune's
  // fsdp_cpu_offload; cost_models/training_fsdp2.cc); with --shard fsdp: FSDP1's CPUOffload(offload_params=True)
  // (cost_models/training_fsdp_offload.cc): the shards, their grads and the optimizer states on the host.
  bool fsdp_cpu_offload = false;
  // --fsdp-no-sync, with --shard fsdp and grad_accum > 1: the micro-batches before the last run under FSDP1's
  // no_sync(), each trained unit's unsharded flat grad kept across them (cost_models/training_fsdp_mp.cc).
  bool fsdp_no_sync = false;
  // --deepspeed CONFIG.json: DeepSpeed ZeRO-1/2's own buffers (cost_models/deepspeed_zero.h, training_deepspeed.cc),
  // with `shard` Zero1/Zero2; disabled: ZeRO is the idealised division by `gpus` (training_context.cc pass 6).
  DeepSpeedZero deepspeed;
};

// --pp: one pipeline stage (its GPU), cost_models/pipeline.h.
struct PipelineStageFacts {
  std::string first_unit, last_unit;      // its wrapping units (blocks), in forward order
  int units = 0;
  int in_flight_micro_batches = 0;        // micro-batches whose activations it holds at once (1F1B)
  uint64_t saved_bytes_per_micro_batch = 0;  // activations one micro-batch leaves for the backward
  uint64_t param_bytes = 0;
  uint64_t peak_bytes = 0;                // its program's live-bytes peak plus resident bytes (the lower bound)
  uint64_t required_bytes = 0;            // what its program needs of the device (planner/measure.h): the busiest needs most
};

struct TrainingResult : CostModelResult {
  uint64_t forward_flops = 0;             // one forward pass of one micro-batch
  uint64_t recompute_flops = 0;           // forward FLOPs re-run by checkpointing in backward
  double recompute_percent = 0;           // recompute_flops / forward_flops * 100
  std::vector<std::string> checkpoint_boundaries;  // tensor names chosen as segment boundaries
  std::vector<std::string> candidate_boundaries;   // every tensor that separates the graph, in order
  uint64_t param_bytes = 0;               // per GPU, in the parameters' storage dtype
  uint64_t grad_bytes = 0;                // per GPU
  uint64_t optimizer_state_bytes = 0;     // per GPU (includes fp32 master weights where kept)
  uint64_t paged_state_bytes = 0;         // per GPU: bitsandbytes' paged states, CUDA managed memory outside the
                                          // allocator (evicted to the host under pressure): not in the program
  int lora_adapted_layers = 0;            // --lora-rank: the Linear layers given adapters
  int lora_adapted_parameters = 0;        // --lora-rank: the stacked experts' parameters (target_parameters)
  uint64_t lora_parameters = 0;           // --lora-rank: elements of every lora_A and lora_B
  uint64_t frozen_stored_bytes = 0;       // --frozen-dtype: the frozen weights it re-stores, as stored
  uint64_t deepspeed_host_bytes = 0;      // --deepspeed with offload_optimizer cpu: the float32 partition, its grad,
                                          // the optimizer states and the staging buffers on the host: not in the program
  uint64_t deepspeed_param_host_bytes = 0;  // --deepspeed with offload_param cpu: the parameters' partitions in pinned
                                            // host memory (stage 3): not in the program
  uint64_t deepspeed_nvme_bytes = 0;      // --deepspeed with offload_param / offload_optimizer nvme: the swap files
                                          // (partitions, float32 sub-groups, states, gradients): not in the program
  uint64_t offloaded_host_bytes = 0;      // --offload-activations: pinned host memory the offloaded saved tensors
                                          // take (all alive at the forward's end): not in the program
  uint64_t fsdp_offload_host_bytes = 0;   // --fsdp-cpu-offload: the sharded parameters (pinned), their grads and the
                                          // optimizer states on the host: not in the program
  std::vector<PipelineStageFacts> pipeline_stages;  // --pp: every stage; the program is the busiest one's
  int pipeline_busiest_stage = -1;
};

// --tp inside each data-parallel replica (ExecutionOptions::tp): the program is rank 0's.
TrainingResult build_training_program(const Graph& graph, const ExecutionOptions& execution,
                                      const TrainingOptions& options);

// A training step's program measured on its runtime's allocator (planner/measure.h), the fixed bytes added to each
// figure: its required bytes are what fit and check compare with a budget, and what --checkpoint auto and the
// busiest pipeline stage decide by.
inline Measure training_measure(const CostModelResult& r, const ExecutionOptions& e) {
  Measure m = measure(r.program, runtime_model(e, /*training=*/true).allocator);
  for (uint64_t* b : {&m.allocated_bytes, &m.reserved_bytes, &m.required_bytes})
    *b = checked_add(*b, r.fixed_bytes, "required bytes");
  return m;
}

}  // namespace memplan
