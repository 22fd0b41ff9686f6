// Training step (PyTorch eager): forward ops keeping what autograd saves, the loss, backward ops in
// reverse order (recomputing checkpointed segments first), then the optimizer step. One Program per
// GPU; the graph's batch is one micro-batch. The phases live in training_*.cc (training_step.h says
// which); this file orders them (training_checkpoints.cc chooses the checkpointed segments; training_notes.cc writes
// what the configuration's notes say). Rules and sources: docs/cost-models.md.
#include <optional>
#include <string>
#include <utility>

#include "cost_models/fp32_islands.h"
#include "cost_models/kbit_prep.h"
#include "cost_models/pipeline.h"
#include "cost_models/selective_checkpoint.h"
#include "cost_models/training_notes.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

TrainingStep::TrainingStep(const TrainingContext& context, std::vector<int32_t> segment_end_ops,
                           bool from_first_boundary)
    : TrainingStep(context, SegmentPlan{std::move(segment_end_ops), from_first_boundary, {}, false, true, false}) {}

TrainingStep::TrainingStep(const TrainingContext& context, SegmentPlan plan)
    : context_(context), graph_(*context.graph), options_(context.options), segment_end_ops_(std::move(plan.end_ops)),
      segment_of_op_(context.ops.size(), -1), reentrant_(plan.reentrant), early_stop_(plan.early_stop),
      writer_(result_.program),
      forward_(graph_, context.layout, context.runtime, context.shape, /*training=*/true, context.options.precision,
               context.execution.cuda_arch_major, writer_) {
  const size_t ops = context_.ops.size();
  if (context_.op_flops.size() != ops || context_.rules.size() != ops)
    throw InternalError("the training context's per-op facts do not match its " + std::to_string(ops) +
                        " ops (a filter of the ops that did not renumber them)");
  const size_t nt = graph_.tensors.size();
  saves_.assign(ops, false);
  saves_result_.assign(ops, false);
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
  find_last_packs();
  if (deepspeed()) ds_begin_backward();
  for (int32_t i = static_cast<int32_t>(context_.ops.size()) - 1; i >= 0; --i) {
    if (flat_shards()) fsdp2() ? fsdp2_pre_backward(i) : fsdp_pre_backward(i);
    // ZeRO-3: CheckpointFunction.backward recomputes the layer before its modules' pre-backward hooks can fire
    // (they are on the recomputed outputs: training_deepspeed3_recompute.cc).
    if (ds3() && segment_of_op_[i] >= 0 && is_segment_end(i)) recompute_segment(segment_of_op_[i], i);
    if (ds3()) ds3_pre_backward(i);
    if (!ds3() && recomputes_before(i)) recompute_segment(segment_of_op_[i], i);
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
  add_dtype_notes(options, islands, routers, softmax_routers, kbit_layers, notes);
  if (options.pp > 1) {
    TrainingResult result = build_pipeline_program(context, notes);
    result.notes.insert(result.notes.begin(), notes.begin(), notes.end());
    return result;
  }
  std::vector<int32_t> chosen;
  TrainingResult result = TrainingStep(context, plan_segments(context, chosen, notes)).build();
  for (const Separator& s : context.separators) result.candidate_boundaries.push_back(graph.tensors[s.tensor].name);
  for (int32_t i : chosen) result.checkpoint_boundaries.push_back(graph.tensors[context.separators[i].tensor].name);
  add_layout_notes(context, options, result, notes);
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
                     : is_half(options.precision) ? "; the adapters in the base's half type (--lora-dtype base, or "
                                                    "DeepSpeed's cast at stage 1 or 2)."
                                                  : ".") + lora_parameters_note(*lora));
  }
  result.notes.insert(result.notes.begin(), notes.begin(), notes.end());
  return result;
}

}  // namespace memplan
