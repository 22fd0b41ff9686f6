// What a training step's notes say of its configuration, in the order the report lists them (build_training_program
// in training.cc calls these around the step; the step's phases add their own notes as they run).
#include "cost_models/training_notes.h"

#include <algorithm>

#include "cost_models/bnb_optimizer.h"
#include "cost_models/eager_semantics.h"
#include "cost_models/frozen_storage.h"
#include "cost_models/fsdp_groups.h"
#include "cost_models/graph_facts.h"
#include "cost_models/lora_parameters.h"

namespace memplan {

namespace {

// What --upcast did: the islands found, or why it changed nothing.
std::string upcast_note(const TrainingOptions& o, const std::optional<IslandCounts>& islands) {
  const bool half = compute_param_dtype(o) != DType::Float32;
  if (!half && !o.upcast.logits)
    return "--upcast changes nothing under " + std::string(is_amp(o.precision) ? "autocast" : "fp32") +
           ": the float32 copies it names are no-ops when the model's tensors are float32 already.";
  std::string text = "Float32 islands in the model (--upcast):";
  if (o.upcast.rms_norm)
    text += " " + std::to_string(islands ? islands->rms_norms : 0) +
            " RMSNorms normalise a float32 copy of their input (transformers' LlamaRMSNorm) and cast back;";
  if (o.upcast.softmax)
    text += " " + std::to_string(islands ? islands->softmaxes : 0) +
            " softmaxes run in float32 (eager attention's softmax(dtype=torch.float32)) and keep that result;";
  if (o.upcast.loss) text += " the loss reads a float32 copy of the logits (transformers' ForCausalLMLoss);";
  if (o.upcast.logits)
    text += std::string(" the model returns its logits as float32 (logits.float(), transformers up to 4.45") +
            (islands && islands->logits ? "" : ": no float output found") +
            ") and the loss copies the shifted logits (shift_logits.contiguous());";
  text.back() = '.';
  return text;
}

// Autocast over half parameters (a policy's, accelerate's FSDP; or stored half, --param-dtype): what it casts then.
std::string policy_autocast_note(const TrainingOptions& o) {
  if (!is_amp(o.precision) || compute_param_dtype(o) == DType::Float32) return "";
  return " Under torch.autocast (accelerate's mixed_precision) on top: the low-precision ops read the half parameters "
         "without a cast (none cached), the float32 ops copy their half inputs to float32.";
}

// --frozen-dtype int8/nf4/gptq/awq re-stores linear layers' weights; a mixture of experts' stacked [E, in, out]
// parameters (transformers 5's grouped experts, read by aten::_grouped_mm) are no Linear module, so bitsandbytes'
// conversion (replace_with_bnb_linear replaces nn.Linear) skips them and they keep their type, float32 after
// prepare_model_for_kbit_training (bitsandbytes-foundation/bitsandbytes issue #1849, "Failed to quant MoE models
// with fused expert weights in transformers v5"); GPTQ's and AWQ's conversions replace Linear layers only as well
// (frozen_storage.h: optimum's GPTQQuantizer.convert_model, AutoAWQ's decoder linears). Whether --lora-targets adapts
// them through PEFT's target_parameters (the _grouped_mm then reads their W + delta: lora_parameters.h) or not. Says
// how many and how many bytes, or nothing.
std::string unquantized_experts_note(const TrainingContext& context, const TrainingOptions& options) {
  if (options.frozen_storage == FrozenStorage::Same || options.frozen_storage == FrozenStorage::Fp16 ||
      options.frozen_storage == FrozenStorage::Bf16 || context.graph == nullptr)
    return "";
  const Graph& g = *context.graph;
  std::vector<bool> seen(g.tensors.size(), false);
  int count = 0;
  uint64_t bytes = 0;
  for (const Node& n : g.nodes) {
    const int32_t w = grouped_mm_stacked_parameter(g, n);  // adapted through --lora-targets or not
    if (w < 0 || seen[w] || context.is_param[w] || context.layout.restored(w)) continue;
    seen[w] = true;
    ++count;
    bytes += context.layout.local_bytes(g, w);
  }
  if (count == 0) return "";
  return std::to_string(count) + " stacked experts' parameters (" + std::to_string(bytes) +
         " bytes) are not re-stored: they are no Linear layers (transformers 5's grouped experts), which " +
         (options.frozen_storage == FrozenStorage::GptqInt4 ? "GPTQ's conversion (optimum's GPTQQuantizer, Linear "
                                                               "layers only) skips"
          : options.frozen_storage == FrozenStorage::AwqInt4 ? "AutoAWQ's conversion (Linear layers only) skips"
                                                              : "bitsandbytes' 4- and 8-bit conversion skips "
                                                                "(bitsandbytes issue #1849)") +
         (options.kbit_prep ? ", and k-bit preparation makes them float32" : "") +
         "; --experts-implementation eager (transformers 4's per-expert Linear layers) quantizes them" +
         (options.frozen_storage == FrozenStorage::Nf4 && !options.nf4_torchao
              ? ", and so does --quantize-experts (axolotl's quantize_moe_experts: bitsandbytes' parametrization)."
              : ".");
}

// --quantize-experts (frozen_storage.h parametrized_experts): how many stacked parameters, their stored bytes, and
// what each forward makes of them.
std::string parametrized_experts_note(const TrainingContext& context, const TrainingOptions& options) {
  if (context.graph == nullptr) return "";
  int count = 0;
  uint64_t stored = 0, largest = 0;
  DType type = DType::Undefined;
  for (size_t t = 0; t < context.layout.parametrized.size(); ++t) {
    if (!context.layout.parametrized[t]) continue;
    ++count;
    stored += context.layout.stored_bytes[t];
    largest = std::max(largest, context.layout.local_bytes(*context.graph, static_cast<int32_t>(t)));
    type = context.layout.dtype[t];
  }
  if (count == 0) return "";
  return std::to_string(count) + " stacked experts' parameters (" + std::to_string(stored) + " of those bytes) are "
         "bitsandbytes' replace_parameter_4bit parametrizations (--quantize-experts, axolotl's quantize_moe_experts): "
         "each experts forward dequantizes each whole into " + std::string(dtype_name(type)) + " (the largest " +
         std::to_string(largest) + " bytes), which _grouped_mm keeps until its backward; backward dequantizes "
         "nothing, but a checkpointed layer's recomputation makes its copies again." +
         // bitsandbytes PR #1999 (in 0.50) made the parametrization's cache hook run even when the non-reentrant
         // checkpoint stops its recomputation early; before it, issue #2005: the cache stays on and keeps every copy.
         (options.checkpoint.mode != CheckpointMode::None && !options.checkpoint.reentrant &&
                  options.checkpoint.early_stop
              ? std::string(" This follows bitsandbytes 0.50 on: with 0.49 (axolotl's pin) a non-reentrant "
                            "checkpoint's early-stopped recomputation can leave the parametrization cache on "
                            "(bitsandbytes issue #2005, fixed by PR #1999), every layer's dequantized copies then "
                            "stay resident and the peak is above this answer; use bitsandbytes 0.50 or "
                            "--checkpoint-impl reentrant.")
              : std::string());
}

}  // namespace

void add_dtype_notes(const TrainingOptions& options, const std::optional<IslandCounts>& islands, int routers,
                     int softmax_routers, int kbit_layers, std::vector<std::string>& notes) {
  if (routers > 0) notes.push_back(float32_router_note(routers, is_amp(options.precision)));
  if (softmax_routers > 0) notes.push_back(softmax_router_note(softmax_routers));
  if (options.upcast.any()) notes.push_back(upcast_note(options, islands));
  if (is_amp(options.precision) && !options.fsdp2_mp && stored_param_dtype(options) != DType::Float32)
    notes.push_back("Parameters stored in " + std::string(dtype_name(stored_param_dtype(options))) +
                    " under torch.autocast (--param-dtype): their grads and the optimizer's states are " +
                    std::string(dtype_name(stored_param_dtype(options))) + " too, with no float32 master copy." +
                    policy_autocast_note(options));
  if (options.kbit_prep)
    notes.push_back("k-bit preparation (--kbit-prep, PEFT's prepare_model_for_kbit_training): the parameters "
                    "bitsandbytes left unquantized and every activation are float32; " + std::to_string(kbit_layers) +
                    " 4-bit layers each copy their input into " + std::string(dtype_name(low_precision_dtype(options.precision))) +
                    (options.frozen_storage == FrozenStorage::AwqInt4
                         ? " (WQLinear_GEMM's x.half(), kept by WQLinearMMFunction)"
                         : " (Linear4bit's compute_dtype, kept by MatMul4Bit)") +
                    " and their result back into float32.");
}

void add_layout_notes(const TrainingContext& context, const TrainingOptions& options, const TrainingResult& result,
                      std::vector<std::string>& notes) {
  if (options.checkpoint.mode != CheckpointMode::None && context.separators.empty())
    notes.push_back("The graph has no tensor that separates it: nothing can be checkpointed.");
  if (options.shard == Sharding::Zero3 && !options.deepspeed.enabled)
    notes.push_back("ZeRO-3: each op gathers its full parameters in forward and again in backward (transient).");
  if (options.shard == Sharding::Fsdp) {
    const WrapUnits& w = context.units;
    notes.push_back("FSDP FULL_SHARD: " + std::to_string(w.count()) + " wrapping units (" +
                    std::to_string(w.count() - 1) + " blocks and the root); each GPU keeps 1/" +
                    std::to_string(options.gpus) + " of each unit's flat parameter (padded to a multiple of " +
                    std::to_string(options.gpus) + "), its grad and its optimizer states. A unit is all-gathered "
                    "for its forward and freed after it (the root stays gathered), gathered again in backward with "
                    "the next unit prefetched (BACKWARD_PRE), and its unsharded grad is reduce-scattered after its "
                    "backward. " +
                    (options.fsdp2_mp ? "MixedPrecision: the shards, their grads and the optimizer states float32; each "
                                        "shard cast to a " + std::string(dtype_name(compute_param_dtype(options))) +
                                        " _mp_shard for its all-gather, gathered and computed in it, the unsharded grad "
                                        "reduce-scattered in " + std::string(dtype_name(options.fsdp2_reduce_dtype)) +
                                        " and the grad shard cast back to float32." +
                                        (frozen_half_dtype(options) != DType::Float32
                                             ? " A unit with nothing to train keeps its flat parameter " +
                                                   std::string(dtype_name(frozen_half_dtype(options))) +
                                                   " (accelerate upcasts only what requires grad), gathered uncast."
                                             : std::string()) +
                                        policy_autocast_note(options)
                                      : std::string("No MixedPrecision: the flat parameter is in the parameters' type.")) +
                    (options.fsdp_cpu_offload ? " CPUOffload(offload_params=True): each shard (pinned), a shard-sized "
                                                "_cpu_grad per unit and the optimizer states on the host (the "
                                                "optimizer steps there); a unit's shard copied to the GPU for each "
                                                "all-gather; each grad shard stays on the GPU (_saved_grad_shard) "
                                                "from its reduce-scatter to the end of backward, copied to the host."
                                              : std::string()));
  }
  if (options.shard == Sharding::Fsdp2)
    notes.push_back("FSDP2 (fully_shard): " + std::to_string(context.units.count()) + " parameter groups (" +
                    (options.fsdp_wrap == kTorchtitanWrap || options.fsdp_wrap == kAccelerateWrap
                         ? std::string(options.fsdp_wrap == kTorchtitanWrap ? "torchtitan's apply_fsdp: "
                                                                             : "accelerate's fsdp2_prepare_model: ") +
                               std::to_string(std::count_if(context.units.names.begin() + 1, context.units.names.end(),
                                                            [](const std::string& n) {
                                                              return n != "tok_embeddings" && n != kTorchtitanKeptUnit;
                                                            })) +
                               " blocks, tok_embeddings and norm_output (the final norm and the head, kept gathered "
                               "from forward to backward) where the graph has them, and the root"
                         : std::to_string(context.units.count() - 1) + " blocks and the root") +
                    "); each GPU keeps ceil(dim0/" +
                    std::to_string(options.gpus) + ") rows of every parameter" +
                    (context.execution.tp > 1 ? std::string(" (of its --tp slice: the group gathers the slice)") : "") +
                    ", and the grads and optimizer states of "
                    "the trainable ones only. A group is all-gathered for its forward (the output kept until the next "
                    "group's all-gather) and freed after it (the root stays gathered), gathered again in backward with "
                    "the group before it prefetched, and its grads are reduce-scattered after its backward (the root's at "
                    "the end). " +
                    (options.fsdp2_mp ? "MixedPrecisionPolicy: shards, their grads and the optimizer states float32, "
                                        "gathered and computed in " + std::string(dtype_name(compute_param_dtype(options))) +
                                        ", reduced in " + std::string(dtype_name(options.fsdp2_reduce_dtype)) + "." +
                                        policy_autocast_note(options)
                                      : std::string("No MixedPrecisionPolicy: gathered and reduced in the parameters' type.")) +
                    (torchao_nf4(options) ? " NF4 weights (torchao's NF4Tensor): 1/" + std::to_string(options.gpus) +
                                                " of each quantized tensor, gathered in NF4 through fsdp_pre_all_gather."
                                          : std::string()) +
                    (options.fsdp_cpu_offload ? " CPUOffloadPolicy: the shards, their grads and the optimizer states on "
                                                "the host (the optimizer steps there); each group's shards copied to "
                                                "the GPU for its all-gather, each grad shard copied back after its "
                                                "reduce-scatter."
                                              : std::string()));
  if (options.loss == LossKind::ChunkedCrossEntropy && !options.free_output)
    notes.push_back("chunked-ce: the output's chunks are held through backward; torchtune's recipes drop them after "
                    "the loss (del logits): add --free-output to model that.");
  if (options.loss == LossKind::FusedLinearCrossEntropy)
    notes.push_back("fused-linear-ce: Liger's Function runs the head and the loss chunk by chunk and keeps the grads "
                    "of the hidden states and of the head weight from its forward; no logits exist.");
  if (options.grads_kept_between_steps)
    notes.push_back("zero_grad() keeps the grads allocated between steps (torch 1.x): they exist before the step "
                    "and each backward contribution is added into them.");
  if (options.grad_accum > 1)
    notes.push_back("Gradient accumulation: this is one micro-batch of " + std::to_string(options.grad_accum) +
                    (options.fsdp_no_sync && options.shard == Sharding::Fsdp
                         ? " after the others ran inside FSDP1's no_sync(): each trained unit's unsharded flat grad "
                           "from them on the GPU until its reduce-scatter"
                         : options.shard == Sharding::Fsdp
                               ? " with the sharded grads of earlier micro-batches resident: each micro-batch's "
                                 "backward reduce-scattered its grads (accumulation outside no_sync()); a loop under "
                                 "model.no_sync() keeps every trained unit's unsharded flat grad until the last one "
                                 "(--fsdp-no-sync, which the hf-* recipes set)"
                               : " with the grads of earlier micro-batches resident") +
                    (options.fsdp_cpu_offload && options.shard == Sharding::Fsdp2 ? " (on the host: CPU offload)" : "") +
                    ", plus the optimizer step.");
  if (options.optimizer == Optimizer::Adam || options.optimizer == Optimizer::AdamW) {
    static const char* impl[] = {
        "foreach (PyTorch 2.x default on CUDA): one parameter-sized temporary per parameter during step()",
        "foreach as in torch 1.13: two parameter-sized temporaries per parameter during step()",
        "single-tensor: two temporaries of one parameter's size at a time", "fused: no temporaries"};
    notes.push_back(std::string("Adam update: ") + impl[static_cast<int>(options.optimizer_impl)] +
                    (options.fsdp_cpu_offload && (options.shard == Sharding::Fsdp2 || options.shard == Sharding::Fsdp)
                         ? ", on the host (CPU offload)."
                         : "."));
    if (options.optimizer_flags.amsgrad) notes.push_back("amsgrad: a third state per parameter, max_exp_avg_sq.");
  }
  if (options.optimizer_in_backward)
    notes.push_back("Optimizer in backward (torchtune's optimizer_in_bwd): each parameter is updated by its own "
                    "optimizer as soon as its grad is complete and the grad is freed there; no step after backward.");
  if (is_bitsandbytes(options.optimizer))
    notes.push_back(std::string("bitsandbytes ") +
                    (is_eight_bit(options.optimizer) ? "8-bit states (uint8, a float32 scale per 256 elements; float32 "
                                                       "for parameters under 4096 elements)"
                                                     : "32-bit states") +
                    (options.optimizer == Optimizer::AdamW8bit
                         ? ""
                         : ", paged for parameters of 1e5 elements or more: CUDA managed memory outside the allocator, "
                           "reported apart and not counted in what must fit (evicted to the host under pressure)") +
                    "; the update runs in place, one kernel per parameter (bitsandbytes/optim/optimizer.py, >= 0.44).");
  if (options.optimizer_flags.maximize || options.optimizer_flags.weight_decay)
    notes.push_back("The update first copies the grads (maximize negates them; Adam's and SGD's L2 weight decay adds "
                    "wd * param; AdamW decays the parameters in place), except where PyTorch does it in place.");
  if (context.runtime.library_workspaces)
    notes.push_back("Matmuls use two cuBLAS workspaces: the forward thread's and autograd's backward thread's (CublasHandlePool.cpp).");
  notes.push_back(options.steady_state ? "Steady state: optimizer states exist from the start (a later iteration)."
                                       : "First iteration: optimizer states are created inside the optimizer step.");
  if (options.frozen_storage != FrozenStorage::Same) {
    static const char* name[] = {"same", "fp16", "bf16", "int8", "nf4", "gptq-int4", "awq-int4"};
    const std::string how =
        options.frozen_storage == FrozenStorage::Int8
            ? "each Linear's forward quantizes its input to int8 (transients), and its backward dequantizes the weight "
              "into the compute type for the input grad."
        : options.frozen_storage == FrozenStorage::GptqInt4
            ? "each layer's forward dequantizes its weight (gptqmodel's TorchQuantLinear: float16, then the model's "
              "type) and its matmul keeps that copy for the input grad until the layer's backward."
        : options.frozen_storage == FrozenStorage::AwqInt4
            ? "each layer keeps its float16 input; its forward dequantizes the weight at 1024 tokens or more (else "
              "8 split-K partial products), and its backward dequantizes it again and repeats it once per sequence "
              "of the batch (AutoAWQ's WQLinearMMFunction)."
        : torchao_nf4(options) && options.shard == Sharding::Fsdp2
            ? std::string("torchao's NF4Tensor (uint8 data, int8 scalers, a factor per 256 scalers, sharded by "
                          "fully_shard; the bytes above are this rank's shards") +
                  (options.fsdp_cpu_offload ? ", on the host under CPU offload" : "") +
                  "), all-gathered in NF4 for each group, and dequantized into the compute type by each linear_nf4, in "
                  "forward and again in backward."
        : options.frozen_storage == FrozenStorage::Nf4 && options.shard == Sharding::Fsdp2
            ? std::string("bitsandbytes' Params4bit (the packed values in the compute type's storage, sharded by "
                          "fully_shard as a plain parameter; the bytes above are this rank's shards") +
                  (options.fsdp_cpu_offload ? ", on the host under CPU offload," : "") +
                  " plus every weight's QuantState, whole on each GPU), all-gathered packed for each group, and "
                  "dequantized into the compute type by each op that reads them, in forward and again in backward."
        : torchao_nf4(options)
            ? "torchao's NF4Tensor (uint8 data, int8 scalers, a factor per 256 scalers), dequantized into the compute "
              "type by each linear_nf4 (NF4Tensor.get_original_weight), in forward and again in backward; linear_nf4 "
              "keeps the weight for backward, not the layer's input."
            : "each op dequantizes the ones it reads into the compute type as a transient, in forward and again in "
              "backward.";
    notes.push_back(std::string("--frozen-dtype ") + name[static_cast<int>(options.frozen_storage)] +
                    (options.double_quant ? " with double quantization" : "") + ": the re-stored frozen weights take " +
                    std::to_string(result.frozen_stored_bytes) + " bytes" +
                    (options.frozen_storage == FrozenStorage::GptqInt4 || options.frozen_storage == FrozenStorage::AwqInt4
                         ? " (groups of " + std::to_string(options.quant_group_size) + ")"
                         : std::string()) +
                    "; " + how);
    if (const std::string experts = unquantized_experts_note(context, options); !experts.empty())
      notes.push_back(experts);
    if (const std::string experts = parametrized_experts_note(context, options); !experts.empty()) notes.push_back(experts);
  }
}

}  // namespace memplan
