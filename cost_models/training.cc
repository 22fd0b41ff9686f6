// Training step (PyTorch eager): forward ops keeping what autograd saves, the loss, backward ops in
// reverse order (recomputing checkpointed segments first), then the optimizer step. One Program per
// GPU; the graph's batch is one micro-batch. The phases live in training_*.cc (training_step.h says
// which); this file orders them (training_checkpoints.cc chooses the checkpointed segments). Rules and sources: docs/cost-models.md.
#include <algorithm>
#include <optional>
#include <string>

#include "cost_models/bnb_optimizer.h"
#include "cost_models/fp32_islands.h"
#include "cost_models/fsdp_groups.h"
#include "cost_models/kbit_prep.h"
#include "cost_models/pipeline.h"
#include "cost_models/selective_checkpoint.h"
#include "cost_models/frozen_storage.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

TrainingStep::TrainingStep(const TrainingContext& context, std::vector<int32_t> segment_end_ops,
                           bool from_first_boundary)
    : TrainingStep(context, SegmentPlan{std::move(segment_end_ops), from_first_boundary, {}, false, true}) {}

TrainingStep::TrainingStep(const TrainingContext& context, SegmentPlan plan)
    : context_(context), graph_(*context.graph), options_(context.options), segment_end_ops_(std::move(plan.end_ops)),
      segment_of_op_(context.ops.size(), -1), reentrant_(plan.reentrant), writer_(result_.program),
      forward_(graph_, context.layout, context.runtime, context.shape, /*training=*/true, context.options.precision,
               context.execution.cuda_arch_major, writer_) {
  const size_t ops = context_.ops.size();
  if (context_.op_flops.size() != ops || context_.rules.size() != ops)
    throw InternalError("the training context's per-op facts do not match its " + std::to_string(ops) +
                        " ops (a filter of the ops that did not renumber them)");
  const size_t nt = graph_.tensors.size();
  forward_buffer_.assign(nt, -1);
  recompute_buffer_.assign(nt, -1);
  autocast_weight_copy_.assign(nt, -1);
  grad_buffer_.assign(nt, -1);
  grad_consumed_.assign(nt, false);
  param_grad_buffer_.assign(nt, -1);
  param_grad_via_view_.assign(nt, false);
  saved_by_op_.resize(context_.ops.size());
  params_completed_at_.resize(ops);
  if (options_.optimizer_in_backward || options_.deepspeed.enabled) {  // a parameter's grad is complete after the earliest op reading it
    std::vector<int32_t> earliest(nt, -1);
    for (int32_t i = static_cast<int32_t>(ops) - 1; i >= 0; --i)
      for (int32_t t : context_.ops[i].inputs) {
        const int32_t p = context_.tied_to[t] >= 0 ? context_.tied_to[t] : t;  // a tied copy's grad is its parameter's
        if (context_.is_param[p]) earliest[p] = i;
      }
    for (int32_t p : context_.params)
      if (earliest[p] >= 0) params_completed_at_[earliest[p]].push_back(p);
  }
  autocast_inputs_of_op_.resize(context_.ops.size());
  const bool from_first_boundary = plan.from_first_boundary && !segment_end_ops_.empty();
  int32_t start = from_first_boundary ? segment_end_ops_[0] + 1 : 0;
  for (size_t s = from_first_boundary ? 1 : 0; s < segment_end_ops_.size(); ++s) {
    const bool checkpointed = plan.checkpointed.empty() || (s < plan.checkpointed.size() && plan.checkpointed[s]);
    for (int32_t i = start; i <= segment_end_ops_[s]; ++i) segment_of_op_[i] = checkpointed ? static_cast<int32_t>(s) : -1;
    start = segment_end_ops_[s] + 1;
  }
  sac_saved_ = plan.per_op ? sac_saved_ops(graph_, context_.ops, segment_of_op_) : std::vector<bool>(ops, false);
  sac_cache_.resize(ops);
  sac_extras_.resize(ops);
}

TrainingResult TrainingStep::build() {
  add_parameters();
  if (deepspeed()) ds_add_resident();
  add_inputs();
  add_persistent_grads();
  add_optimizer_states_if_steady();
  if (options_.steady_state) forward_.hold_workspaces(context_.ops);  // a later iteration: kept from the last
  if (options_.loss == LossKind::FusedLinearCrossEntropy && context_.sent.empty()) fused_head_ = find_fused_head();
  for (size_t i = 0; i < context_.ops.size(); ++i) {
    if (ds3_prefetch()) ds3_run_calls(kDs3BeforeForward, static_cast<int32_t>(i));  // module pre-forward hooks
    if (static_cast<int32_t>(i) != fused_head_)  // the fused loss runs the head (training_loss_fused.cc)
      emit_forward(static_cast<int32_t>(i), segment_of_op_[i] >= 0 ? ForwardMode::NoSave : ForwardMode::Save);
    if (ds3()) ds3_after_forward(static_cast<int32_t>(i));
  }
  if (flat_shards() && fsdp2()) fsdp2_root_post_forward();
  if (context_.sent.empty()) emit_loss();
  else emit_stage_send();
  if (deepspeed()) ds_begin_backward();
  for (int32_t i = static_cast<int32_t>(context_.ops.size()) - 1; i >= 0; --i) {
    if (flat_shards()) fsdp2() ? fsdp2_pre_backward(i) : fsdp_pre_backward(i);
    // ZeRO-3: CheckpointFunction.backward recomputes the layer before its modules' pre-backward hooks can fire
    // (they are on the recomputed outputs: training_deepspeed3_recompute.cc).
    if (ds3() && segment_of_op_[i] >= 0 && is_segment_end(i)) recompute_segment(segment_of_op_[i], i);
    if (ds3()) ds3_pre_backward(i);
    if (!ds3() && segment_of_op_[i] >= 0 && is_segment_end(i)) recompute_segment(segment_of_op_[i], i);
    if (i == fused_head_) emit_fused_backward();
    else if (i == chunked_head_) emit_chunked_head_backward();
    else emit_backward(i);
    if (flat_shards()) fsdp2() ? fsdp2_post_backward(i) : fsdp_post_backward(i);
    if (options_.optimizer_in_backward) update_params_completed_at(i);
    if (deepspeed()) ds_after_backward(i);
    if (ds3()) ds3_post_backward(i);
    if (segment_of_op_[i] >= 0 && (i == 0 || segment_of_op_[i - 1] != segment_of_op_[i])) end_segment_backward(i);
  }
  if (deepspeed()) ds_end_backward();
  if (flat_shards() && !fsdp2()) fsdp_post_backward_final();
  emit_optimizer();
  if (options_.offload_activations) apply_offload();
  fill_result();
  return std::move(result_);
}

int32_t TrainingStep::lookup(int32_t t) const {
  if (recomputing_ && recompute_buffer_[t] >= 0) return recompute_buffer_[t];
  if (forward_buffer_[t] < 0 && ds3_param(t)) return ds3_buffer(t);  // offload_param: its gathered copy, if any
  return forward_buffer_[t];
}

void TrainingStep::set_buffer(int32_t t, int32_t b) { (recomputing_ ? recompute_buffer_ : forward_buffer_)[t] = b; }

BufferView TrainingStep::buffer_view() const {
  return BufferView{[this](int32_t t) { return lookup(t); }, &result_.program, nullptr};
}

void TrainingStep::fill_result() {
  for (size_t i = 0; i < context_.ops.size(); ++i) {
    result_.forward_flops = checked_add(result_.forward_flops, context_.op_flops[i], "FLOP count");
    if (segment_of_op_[i] >= 0 && !sac_saved_[i]) result_.recompute_flops = checked_add(result_.recompute_flops, context_.op_flops[i], "FLOP count");
  }
  if (result_.forward_flops > 0)
    result_.recompute_percent = 100.0 * static_cast<double>(result_.recompute_flops) / static_cast<double>(result_.forward_flops);
}

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

}  // namespace

TrainingResult build_training_program(const Graph& base, const ExecutionOptions& execution,
                                      const TrainingOptions& options) {
  // Pass 1: the graph rewrites. LoRA's adapters, then the framework's float32 islands, which change a model whose
  // ops read half-precision parameters only (under fp32 or autocast over float32 parameters every cast they add is a
  // no-op: fp32_islands.h); autocast over a policy's half parameters reads them half, so the islands apply there.
  std::optional<LoraGraph> lora;
  if (lora_requested(options)) lora = add_lora_adapters(base, options);
  // Then PEFT's k-bit preparation, which pins what is left to float32 (kbit_prep.h).
  std::optional<Graph> own;  // the rewrites' copy of a graph LoRA did not copy
  Graph* rewritten = lora ? &lora->graph : nullptr;
  auto rewritable = [&]() -> Graph& { return rewritten ? *rewritten : *(rewritten = &own.emplace(base)); };
  std::vector<bool> float32 = lora ? lora->float32 : std::vector<bool>(base.tensors.size(), false);
  std::vector<bool> no_adapters;
  std::vector<bool>& adapters = lora ? lora->adapter : no_adapters;
  const bool half = compute_param_dtype(options) != DType::Float32;
  std::optional<IslandCounts> islands;
  if ((half && (options.upcast.rms_norm || options.upcast.softmax)) || options.upcast.logits)
    islands = add_fp32_islands(rewritable(), options.upcast, half, execution.attention == AttentionImpl::Eager,
                               float32, &adapters);
  // Refused before any cost model runs otherwise (report/option_checks.cc: nf4, no autocast).
  precondition(!options.kbit_prep || (!is_amp(options.precision) && (options.frozen_storage == FrozenStorage::Nf4 ||
                                                                     options.frozen_storage == FrozenStorage::AwqInt4)),
               "--kbit-prep without an NF4 or AWQ base, or under autocast");
  precondition(options.frozen_storage != FrozenStorage::Nf4 || options.shard != Sharding::Fsdp2 || options.nf4_torchao,
               "bitsandbytes' NF4 under fully_shard (refused by report/option_checks.cc)");
  const int kbit_layers = options.kbit_prep ? prepare_kbit_training(rewritable(), float32, adapters) : 0;
  // Mixtral's and Qwen-MoE's float32 routing softmax, where the ops read half parameters outside autocast.
  const int softmax_routers = half && !is_amp(options.precision) && has_softmax_router(rewritten ? *rewritten : base)
                                  ? add_float32_softmax_routers(rewritable(), float32, &adapters)
                                  : 0;
  const Graph& graph = rewritten ? *rewritten : base;
  // DeepSeek-V3's float32 router and accumulator, where the ops read half parameters (fp32_islands.h).
  const int routers = half ? pin_float32_routers(graph, is_amp(options.precision), float32) : 0;
  const TrainingContext context = make_training_context(graph, execution, options, lora ? &*lora : nullptr, &float32);
  std::vector<std::string> notes = context.notes;
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
  if (options.pp > 1) {
    TrainingResult result = build_pipeline_program(context, notes);
    result.notes.insert(result.notes.begin(), notes.begin(), notes.end());
    return result;
  }
  std::vector<int32_t> chosen;
  TrainingResult result = TrainingStep(context, plan_segments(context, chosen, notes)).build();
  for (const Separator& s : context.separators) result.candidate_boundaries.push_back(graph.tensors[s.tensor].name);
  for (int32_t i : chosen) result.checkpoint_boundaries.push_back(graph.tensors[context.separators[i].tensor].name);
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
  }
  if (lora) {
    result.lora_adapted_layers = lora->adapted_layers;
    result.lora_parameters = lora->adapter_parameters;
    result.lora_adapted_parameters = lora->adapted_parameters;
    const bool half = is_half(options.precision) && options.lora_float32;  // float32 adapters on a half base
    notes.push_back("LoRA (--lora-rank " + std::to_string(options.lora_rank) + "): adapters on " +
                    std::to_string(lora->adapted_layers) + " Linear layer(s), " +
                    std::to_string(lora->adapter_parameters) + " parameters in all, run as PEFT's lora.Linear "
                    "(base output + lora_B(lora_A(dropout(x))) * scaling)" +
                    (half ? "; the float32 adapters copy each adapted layer's input into float32 and the sum back "
                            "into the half-precision base's type."
                          : ".") + lora_parameters_note(*lora));
  }
  result.notes.insert(result.notes.begin(), notes.begin(), notes.end());
  return result;
}

}  // namespace memplan
