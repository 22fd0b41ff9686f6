// Training, forward phase: parameters and inputs, then each forward op with what autograd keeps for its
// backward; the recomputation of checkpointed segments in backward runs the same ops again.
#include <algorithm>
#include <map>
#include <set>

#include "cost_models/eager_semantics.h"
#include "cost_models/frozen_storage.h"
#include "cost_models/fsdp_groups.h"
#include "cost_models/graph_facts.h"
#include "cost_models/runtime_constants.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

// Parameters and buffers (BatchNorm statistics, float constants): resident. ZeRO-3 keeps 1/N of each
// trainable parameter. Small integer constants that only feed shape math, and Constant-node scalars,
// are Python values (constant_on_device).
// FSDP keeps, instead of each parameter, trained or frozen, its unit's flat-parameter shard (training_fsdp.cc).
void TrainingStep::add_parameters() {
  if (flat_shards()) fsdp2() ? add_fsdp2_shards() : add_fsdp_shards();
  std::vector<bool> partitioned(graph_.tensors.size(), false);  // DeepSpeed ZeRO-3: training_deepspeed3.cc holds them
  if (ds3())
    for (int32_t p : context_.module_parameters) partitioned[p] = true;
  for (size_t t = 0; t < graph_.tensors.size(); ++t) {
    const int32_t id = static_cast<int32_t>(t);
    if (partitioned[t]) continue;
    if (context_.tied_to[t] >= 0 || !constant_on_device(graph_, id, context_.runtime.semantics, context_.shape)) continue;
    if (layout().shard[t] == ParameterShard::FlatShard) {
      forward_buffer_[t] = unit_shard_[layout().shard_group[t]];
      continue;
    }
    uint64_t bytes = bytes_of(id);
    if (layout().shard[t] == ParameterShard::ZeroShard) bytes = shard(bytes);
    if (layout().restored(t)) {  // --frozen-dtype
      bytes = layout().stored_bytes[t];
      result_.frozen_stored_bytes = checked_add(result_.frozen_stored_bytes, bytes, "frozen weight bytes");
    }
    const int32_t b = writer_.new_buffer(graph_.tensors[t].name, bytes, Category::Weight);
    program().buffers[b].resident = true;
    forward_buffer_[t] = b;
    if (context_.is_param[t]) result_.param_bytes = checked_add(result_.param_bytes, bytes, "parameter bytes");
  }
  for (size_t t = 0; t < graph_.tensors.size(); ++t)
    if (context_.tied_to[t] >= 0) forward_buffer_[t] = forward_buffer_[context_.tied_to[t]];  // the same storage, transposed
}

// A pipeline stage's inputs include the activations it receives (torch.distributed.recv into a fresh tensor),
// and it holds the saved activations of the earlier micro-batches still in flight.
void TrainingStep::add_inputs() {
  for (int32_t t : graph_.inputs) {
    if (forward_buffer_[t] >= 0) continue;
    const bool received = std::find(context_.received.begin(), context_.received.end(), t) != context_.received.end();
    if (!received) {
      forward_buffer_[t] = add_batch_tensor(graph_.tensors[t].name, bytes_of(t));
      continue;
    }
    const int32_t b = writer_.new_buffer("p2p_recv:" + graph_.tensors[t].name, bytes_of(t), Category::Activation);
    program().buffers[b].live_at_start = true;  // freed after its last reader, the stage's backward
    forward_buffer_[t] = b;
  }
  for (size_t j = 0; j < context_.in_flight_bytes.size(); ++j) {
    const int32_t b = writer_.new_buffer("pipeline:micro_batch_in_flight_" + std::to_string(j + 1),
                                         context_.in_flight_bytes[j], Category::Activation);
    program().buffers[b].resident = true;
  }
}

int32_t TrainingStep::add_batch_tensor(const std::string& name, uint64_t bytes) {
  const int32_t b = writer_.new_buffer(name, bytes, Category::Activation);
  program().buffers[b].live_at_start = true;
  program().buffers[b].live_at_end = true;
  return b;
}

// --frozen-dtype: a frozen weight stored in another type is dequantized into the compute type (the
// autocast type where autocast would cast it) for each op that reads it, a transient freed at the step:
// bitsandbytes' MatMul4Bit runs F.linear(A, dequantize_4bit(B, quant_state).to(A.dtype).t()) in forward
// and dequantizes again for grad_A in backward (bitsandbytes/autograd/_functions.py); autograd keeps the
// stored form, not the dequantized one.
// An fp16/bf16-stored weight an op uses in that very type is read as it is (-1: no transient).
int32_t TrainingStep::add_dequantized(int32_t t, DType autocast_type, Step& st) {
  const DType d = autocast_type != DType::Undefined ? autocast_type : layout().dtype[t];
  const FrozenStorage s = layout().storage[t];
  if ((s == FrozenStorage::Fp16 && d == DType::Float16) || (s == FrozenStorage::Bf16 && d == DType::BFloat16)) return -1;
  const int32_t b = writer_.new_buffer(graph_.tensors[t].name + ":dequantized", bytes_in(t, d), Category::Weight);
  if (torchao_nf4(options_) && s == FrozenStorage::Nf4) {
    // torchao's LinearNF4 (forward: weight.to(input.dtype); backward: weight.to(grad_output.dtype)) calls
    // NF4Tensor.get_original_weight before its matmul: a step of its own, whose intermediates are freed when it
    // returns its result, which the matmul then reads (frozen_storage.h torchao_nf4_dequantize_scratch).
    const uint64_t n = graph_.tensors[t].elements();
    const uint64_t e = static_cast<uint64_t>(std::max(1, dtype_bits(d) / 8));
    const int32_t scratch = writer_.new_buffer(graph_.tensors[t].name + ":get_original_weight", torchao_nf4_dequantize_scratch(n, e),
                                               Category::Workspace);
    program().steps.push_back({"linear_nf4:get_original_weight:" + graph_.tensors[t].name, "get_original_weight",
                               st.phase, {}, {b, scratch}, 0});
    st.reads.push_back(b);
    return b;
  }
  st.writes.push_back(b);
  return b;
}

bool TrainingStep::is_segment_end(int32_t op) const {
  return std::find(segment_end_ops_.begin(), segment_end_ops_.end(), op) != segment_end_ops_.end();
}

// Each segment's last op that packs a tensor for its backward (-1: none), from the forward's first pass (saves_):
// filled once the forward is emitted.
void TrainingStep::find_last_packs() {
  last_pack_.assign(segment_end_ops_.size(), -1);
  for (size_t i = 0; i < context_.ops.size(); ++i)
    if (segment_of_op_[i] >= 0 && saves_[i]) last_pack_[segment_of_op_[i]] = static_cast<int32_t>(i);
}

// Whether backward recomputes op `op`'s segment just before op `op`'s backward. Reentrant: CheckpointFunction's
// backward, before the segment's last op's. Non-reentrant: the first unpack of a saved tensor, before the backward of
// the segment's last op that packs one (_checkpoint_hook's unpack_hook); the ops after it pack nothing, so their
// backward runs first, and a segment that packs nothing is never recomputed.
bool TrainingStep::recomputes_before(int32_t op) const {
  const int32_t s = segment_of_op_[op];
  if (s < 0) return false;
  return reentrant_ ? is_segment_end(op) : op == last_pack_[s];
}

// The one forward emitter (forward_emitter.h) writes the step; what is training's own is how each input is
// prepared (prepare_input) and what autograd keeps. Save policy: the extras are kept unless the op runs in a
// checkpointed segment's first pass; workspace policy: a recomputation runs on autograd's cuBLAS handle.
void TrainingStep::emit_forward(int32_t i, ForwardMode mode) {
  const FusedOp& op = context_.ops[i];
  const bool recompute = mode == ForwardMode::Recompute;
  if (recompute && sac_saved_[i]) {
    emit_cached(i);
    return hold_frame_references(i);
  }
  const ForwardPolicy policy{recompute ? Phase::Backward : Phase::Forward, recompute ? "recompute:" : "",
                             /*save_extras=*/mode != ForwardMode::NoSave,
                             recompute ? CublasHandle::Autograd : CublasHandle::Caller};
  const int32_t step_before = static_cast<int32_t>(program().steps.size()) - 1;
  Step st = forward_.open(op, context_.op_flops[i], policy);
  if (flat_shards() && i == 0 && !recompute && fsdp_unit_sharded(0)) {  // the root unshards first
    Step gather{"fsdp_pre_forward:root", "all_gather", Phase::Forward, {}, {}, 0};
    fsdp_gathered(0, /*backward=*/false, gather);
    program().steps.push_back(std::move(gather));
  }
  std::map<int32_t, int32_t> effective;  // tensor -> the buffer the op actually consumes
  read_op_inputs(i, st, effective);
  const ClosedOp closed = forward_.close(op, buffer_view(), [this](int32_t t) { return bytes_of(t); },
                                         [this](int32_t t, int32_t b) { set_buffer(t, b); }, std::move(st), policy);
  // A parametrized parameter's value is its dequantized copy, so a view of it (transformers' .transpose(-2, -1) of
  // the stacked experts) views that copy, which the _grouped_mm reading the view keeps (parametrized_experts).
  for (const auto& [t, b] : effective)
    if (layout().parametrized[t])
      for (int32_t y : op.outputs)
        if (y >= 0 && lookup(y) >= 0 && lookup(y) == lookup(t)) set_buffer(y, b);
  // What autograd keeps (the rule's tensors, some the outputs just made, in the form the op consumed), then the
  // extras under the save policy.
  std::vector<int32_t> saved = rule_saved(i, effective);
  if (const int32_t x = packed_layer_input(i); x >= 0) add_unique(saved, x);
  saved.insert(saved.end(), closed.saved.begin(), closed.saved.end());
  if (mode == ForwardMode::NoSave) {  // what the recomputation will pack (recompute_segment's early stop)
    const std::vector<int32_t>& rule = context_.rules[i].saved_tensors;
    saves_result_[i] = !closed.extras.empty() || std::any_of(rule.begin(), rule.end(), [&](int32_t t) {
      return std::find(op.outputs.begin(), op.outputs.end(), t) != op.outputs.end();
    });
    saves_[i] = saves_result_[i] || !rule.empty() || !saved.empty();
  }
  if (options_.offload_activations && !recompute) record_packs(i, mode, saved, step_before);
  if (policy.save_extras) saved_by_op_[i] = std::move(saved);
  if (mode == ForwardMode::NoSave && sac_saved_[i]) {  // the policy's cache: every output, extras included
    for (int32_t t : op.outputs)
      if (lookup(t) >= 0) add_unique(sac_cache_[i], lookup(t));
    for (const EmittedExtra& e : closed.extras) add_unique(sac_extras_[i], e.buffer);
  }
  hold_frame_references(i);
}

void TrainingStep::hold_frame_references(int32_t i) {
  for (int32_t t : context_.held_through[i]) {
    const int32_t b = lookup(t);
    if (b >= 0 && !program().buffers[b].resident) add_unique(program().steps.back().reads, b);
  }
}

// selective:op, an op whose outputs the policy saved (MUST_SAVE), met again in the recomputation: the caching mode
// returns the outputs it cached in forward instead of running the op (torch/utils/checkpoint.py,
// _CachedTorchDispatchMode: storage[func].pop(0)), so no FLOPs and no new buffer. Autograd, above the dispatch
// mode, still records the op's backward node, which keeps what the op's backward reads: its inputs as recomputed
// (and as autocast cast them: the cast is another op, recomputed) and the cached outputs and extras it needs
// (attention's out and logsumexp).
void TrainingStep::emit_cached(int32_t i) {
  const FusedOp& op = context_.ops[i];
  Step st{"recompute:cached:" + op.name, op.op, Phase::Backward, {}, {}, 0};
  std::map<int32_t, int32_t> effective;
  read_op_inputs(i, st, effective);
  for (int32_t b : sac_cache_[i]) add_unique(st.reads, b);
  for (int32_t b : sac_extras_[i]) add_unique(st.reads, b);
  for (int32_t t : op.outputs)
    if (forward_buffer_[t] >= 0) set_buffer(t, forward_buffer_[t]);
  program().steps.push_back(std::move(st));
  std::vector<int32_t> saved = rule_saved(i, effective);
  for (int32_t b : sac_extras_[i]) add_unique(saved, b);
  saved_by_op_[i] = std::move(saved);
}

// bitsandbytes' MatMul4Bit keeps ctx.tensors = (A, B) when any input needs a grad: an NF4 Linear whose input needs a
// grad saves that input, where a frozen nn.Linear saves only its weight. MatMul8bitLt keeps ctx.tensors = (CAt, subA,
// A) then (CAt None on a frozen weight, subA empty without outliers). AutoAWQ's WQLinearMMFunction keeps its
// (float16) input x the same way (training_packed.cc). torchao's LinearNF4 (frozen_storage.h torchao_nf4) saves its
// weight alone: its backward needs no input. The layer is the same whether the export kept F.linear's Transpose or
// pre-transposed the weight into a plain MatMul's initializer. Returns the input's buffer, or -1.
int32_t TrainingStep::packed_layer_input(int32_t i) const {
  const int32_t w = linear_weight_of(graph_, context_.ops[i]), x = linear_input_of(graph_, context_.ops[i]);
  if (w >= 0 && x >= 0 && !torchao_nf4(options_) &&
      (layout().storage[w] == FrozenStorage::Nf4 || layout().storage[w] == FrozenStorage::Int8 ||
       layout().storage[w] == FrozenStorage::AwqInt4) &&
      context_.requires_grad[x])
    return lookup(x);
  return -1;
}

// The buffers of the tensors op `i`'s autograd rule keeps, in the form the op consumed (`effective`).
std::vector<int32_t> TrainingStep::rule_saved(int32_t i, const std::map<int32_t, int32_t>& effective) const {
  std::vector<int32_t> saved;
  for (int32_t t : context_.rules[i].saved_tensors) {
    // ZeRO-3 and FSDP free the gathered copy after forward and gather again in backward; DeepSpeed's autograd keeps
    // the parameter, whose gathered data its release swaps out.
    if (layout().shard[t] == ParameterShard::ZeroShard || ds3_param(t)) continue;
    // A parametrized parameter's dequantized copy is the op's own input, kept as on one GPU (parametrized_experts).
    if (layout().shard[t] == ParameterShard::FlatShard && autocast_inputs_of_op_[i].count(t) == 0 &&
        !layout().parametrized[t])
      continue;
    // bitsandbytes' Linear4bit and AutoAWQ keep the stored form; GPTQ's mm keeps the dequantized weight
    // (training_packed.cc), and _grouped_mm a parametrized stacked parameter's (frozen_storage.h parametrized_experts).
    const bool keeps_stored = layout().restored(t) && layout().storage[t] != FrozenStorage::GptqInt4 && !layout().parametrized[t];
    auto it = keeps_stored ? effective.end() : effective.find(t);
    add_unique(saved, it != effective.end() ? it->second : lookup(t));
  }
  return saved;
}

// Op `i`'s inputs read by `st`, each prepared (prepare_input). A parameter kept on the host has no GPU buffer for
// read_inputs to find, yet the op reads its gathered form: ZeRO-3's offload_param partitions (gathered per module
// first, as DeepSpeed's pre-forward hook does) and --fsdp-cpu-offload's shards (the group's gathered parameters).
void TrainingStep::read_op_inputs(int32_t i, Step& st, std::map<int32_t, int32_t>& effective) {
  if (ds3_offload_param()) ds3_gather_inputs(i, st, effective);
  forward_.read_inputs(context_.ops[i], buffer_view(), st, [&](int32_t t) { prepare_input(i, t, st, effective); });
  if (!fsdp_cpu_offload()) return;
  for (int32_t t : context_.ops[i].inputs)
    if (layout().shard[t] == ParameterShard::FlatShard && lookup(t) < 0 && !effective.count(t)) prepare_input(i, t, st, effective);
}

// What input `t` of op `i` becomes before the op runs, in the step `st`; `effective` records the buffer the op
// consumes in its place (its gathered, dequantized or autocast form).
void TrainingStep::prepare_input(int32_t i, int32_t t, Step& st, std::map<int32_t, int32_t>& effective) {
  const FusedOp& op = context_.ops[i];
  if (ds3_param(t)) return ds3_prepare_input(i, t, st, effective);  // gathered per module (training_deepspeed3.cc)
  const bool fsdp_param = layout().shard[t] == ParameterShard::FlatShard;
  if (fsdp_param) {  // the op reads its view of the unit's all-gathered flat parameter
    const int32_t u = layout().shard_group[t];
    Step gather{"fsdp_pre_forward:" + context_.units.names[u], "all_gather", st.phase, {}, {}, 0};
    const bool gathered = recomputing_ ? unit_gathered_backward_[u] >= 0 ||
                                             (kept_after_forward(context_.units, options_.fsdp_wrap, u) && unit_gathered_forward_[u] >= 0)
                                       : unit_gathered_forward_[u] >= 0;
    effective[t] = fsdp_gathered(u, /*backward=*/recomputing_, gathered ? st : gather);
    add_unique(st.reads, effective[t]);
    if (!gathered) program().steps.push_back(std::move(gather));
  }
  if (layout().shard[t] == ParameterShard::ZeroShard) {  // ZeRO-3 all-gathers the full parameter for the op
    const int32_t full = writer_.new_buffer(graph_.tensors[t].name + ":gathered", bytes_of(t), Category::Weight);
    st.writes.push_back(full);
    effective[t] = full;
  }
  const DType target = autocast_target(graph_, op, t, options_.precision, layout().dtype);
  if (layout().storage[t] == FrozenStorage::Int8) {
    // LLM.int8: no dequantized weight in forward (frozen_storage.h int8_matmul_forward_bytes).
    const int32_t x = linear_input_of(graph_, op);
    const int32_t y = op.outputs.empty() ? -1 : op.outputs[0];
    if (x >= 0 && y >= 0 && x != t && !graph_.tensors[x].shape.empty() && !graph_.tensors[y].shape.empty()) {
      const uint64_t in = static_cast<uint64_t>(std::max<int64_t>(1, graph_.tensors[x].shape.back()));
      const uint64_t out = static_cast<uint64_t>(std::max<int64_t>(1, graph_.tensors[y].shape.back()));
      const uint64_t bytes = int8_matmul_forward_bytes(graph_.tensors[x].elements() / in, in, out, layout().dtype[x]);
      st.writes.push_back(writer_.new_buffer(op.name + ":int8_matmul", bytes, Category::Workspace));
      return;
    }
  }
  if (packed_storage(t)) return packed_forward(i, t, st, effective);
  if (layout().parametrized[t]) {  // dequantized whole into its own type, which the op keeps (parametrized_experts)
    effective[t] = add_dequantized(t, DType::Undefined, st);
    return;
  }
  if (layout().restored(t)) {  // dequantized into the compute type for this op, then freed
    const int32_t b = add_dequantized(t, target, st);
    if (b >= 0) effective[t] = b;
    return;
  }
  if (target == DType::Undefined) {  // read as it is, or as matmul's contiguous copy (an autocast cast is contiguous)
    const int32_t copy = forward_.matmul_copy(op, t, bytes_of(t), st);
    if (copy >= 0) effective[t] = copy;
    return;
  }
  autocast_inputs_of_op_[i].insert(t);
  // Autocast caches the cast of a leaf parameter only (aten/src/ATen/autocast_mode.cpp, cached_cast:
  // arg.is_leaf() && !arg.is_view()); FSDP's parameters are views of the flat parameter, so each op casts
  // its own copy, which its backward keeps.
  if (is_constant(graph_, t) && !fsdp_param) {
    // The autocast weight cache: one low-precision copy per parameter, made at its first use in
    // this forward (or recomputation) and kept until every op that saved it has run backward.
    auto& cache = recomputing_ ? recompute_autocast_weight_copy_ : autocast_weight_copy_;
    if (cache[t] < 0) {
      cache[t] = writer_.new_buffer(graph_.tensors[t].name + ":autocast", bytes_in(t, target), Category::Weight);
      st.writes.push_back(cache[t]);
      if (!recomputing_) forward_autocast_copies_.push_back(cache[t]);
    } else {
      add_unique(st.reads, cache[t]);
    }
    effective[t] = cache[t];
  } else {
    const int32_t copy = writer_.new_buffer(graph_.tensors[t].name + ":autocast", bytes_in(t, target), Category::Activation);
    st.writes.push_back(copy);
    effective[t] = copy;
  }
}

// Reentrant checkpoint (torch 1.13's default; HuggingFace's gradient_checkpointing default):
// CheckpointFunction.backward recomputes the segment, then runs torch.autograd.backward on the
// recomputed outputs with the incoming grads, holding both until the segment's backward is done.
// Non-reentrant (torch/utils/checkpoint.py, _checkpoint_without_reentrant_generator): the recomputation keeps what
// its ops pack (_recomputation_hook) and nothing else; with early stop it ends at the segment's last pack, so the ops
// after the last op that saves a tensor do not run, nor does that op's kernel when it saves its inputs alone (they
// are packed before the kernel is called: early_stop_at).
void TrainingStep::recompute_segment(int32_t segment, int32_t end_op) {
  recomputing_ = true;
  segment_first_step_ = static_cast<int32_t>(program().steps.size());
  recompute_autocast_weight_copy_.assign(graph_.tensors.size(), -1);
  const int32_t last_pack = last_pack_[segment];
  held_by_checkpoint_.clear();
  // The segment's inputs from before it: CheckpointFunction.backward keeps ctx.saved_tensors (the checkpointed call's
  // tensor arguments) and their detached copies in its locals until its inner backward returns, and the
  // non-reentrant frame's recompute_fn closes over the arguments until the frame is freed: both to the segment's
  // backward end (torch/utils/checkpoint.py), whatever the recomputed ops keep of them. The ops run in graph order, so
  // an input no earlier op of the segment made comes from before it.
  std::set<int32_t> made_inside;
  for (size_t i = 0; i < context_.ops.size(); ++i) {
    if (segment_of_op_[i] != segment) continue;
    for (int32_t t : context_.ops[i].inputs)
      if (t >= 0 && !made_inside.count(t) && graph_.tensors[t].kind == TensorKind::Activation && forward_buffer_[t] >= 0)
        add_unique(held_by_checkpoint_, forward_buffer_[t]);
    made_inside.insert(context_.ops[i].outputs.begin(), context_.ops[i].outputs.end());
  }
  for (size_t i = 0; i < context_.ops.size(); ++i) {
    if (segment_of_op_[i] != segment) continue;
    const int32_t op = static_cast<int32_t>(i);
    // selective:op: an op the policy cached whose output the stopped recomputation never asks for (after the last
    // pack, or the last pack itself when it packs its inputs alone, before the dispatch mode pops its cache) leaves
    // that output in the policy's storage (_CachedTorchDispatchMode's storage[func], never popped), which the
    // checkpoint's frame keeps until the segment's saved tensors are all released: the segment's backward end.
    if (early_stop_ && sac_saved_[i] && (op > last_pack || (op == last_pack && !saves_result_[i]))) {
      for (int32_t b : sac_cache_[i]) add_unique(held_by_checkpoint_, b);
      for (int32_t b : sac_extras_[i]) add_unique(held_by_checkpoint_, b);
    }
    if (early_stop_ && op > last_pack) continue;
    if (ds3_prefetch()) ds3_run_calls(kDs3BeforeRecompute, op);  // ZeRO-3's module hooks again
    if (early_stop_ && op == last_pack && !saves_result_[i]) early_stop_at(last_pack);
    else emit_forward(op, ForwardMode::Recompute);
    if (ds3()) ds3_after_recompute(op);
  }
  recomputing_ = false;
  if (!reentrant_) return;
  for (int32_t t : context_.ops[end_op].outputs) {
    add_unique(held_by_checkpoint_, recompute_buffer_[t]);
    add_unique(held_by_checkpoint_, grad_buffer_[t]);
  }
}

// The early stop inside op `i`, the last to pack, which saves its inputs only: they are prepared (an autocast copy is
// an op of its own, run before) and packed, then _StopRecomputationError leaves the kernel uncalled: no output. The
// generated autograd wrappers save the inputs before the call and the outputs after (tools/autograd/
// gen_variable_type.py emit_body: setup_derivative, then emit_call, then emit_save_outputs).
void TrainingStep::early_stop_at(int32_t i) {
  Step st{"recompute:early_stop:" + context_.ops[i].name, context_.ops[i].op, Phase::Backward, {}, {}, 0};
  std::map<int32_t, int32_t> effective;
  read_op_inputs(i, st, effective);
  program().steps.push_back(std::move(st));
  std::vector<int32_t> saved = rule_saved(i, effective);
  if (const int32_t x = packed_layer_input(i); x >= 0) add_unique(saved, x);
  saved_by_op_[i] = std::move(saved);
}

void TrainingStep::end_segment_backward(int32_t first_op) {
  Step st{"checkpoint_end:" + context_.ops[first_op].name, "checkpoint_backward", Phase::Backward, held_by_checkpoint_, {}, 0};
  held_by_checkpoint_.clear();
  program().steps.push_back(std::move(st));
  if (options_.offload_activations)  // the checkpoint function's node: recomputation, inner backward, its end
    record_unpack_node(static_cast<int32_t>(context_.ops.size()) + segment_of_op_[first_op], segment_first_step_);
}

}  // namespace memplan
