// Training, backward phase: each op's backward in reverse order, the activation grads it creates and
// frees, and how parameter grads accumulate (torch/csrc/autograd/engine.cpp, input_buffer.cpp).
#include <algorithm>
#include <set>
#include "cost_models/fsdp_groups.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

// ---- backward ----
// A grad for `t` arrives (fresh: allocated by this backward; else a view of another grad). Autograd's
// InputBuffer keeps the first, adds later ones in place into an unshared buffer, or out of place.
// In-place accumulation needs the old grad to be unshared (engine's can_accumulate_inplace: use_count 1):
// it is shared while another tensor whose backward has not run yet holds the same buffer as its grad.
void TrainingStep::accumulate(int32_t t, int32_t incoming, bool fresh, Step& st) {
  const int32_t old = grad_buffer_[t];
  if (fresh) st.writes.push_back(incoming);
  if (old < 0) {
    set_grad(t, incoming);
    return;
  }
  add_unique(st.reads, old);
  if (fresh && !grad_shared_by_others(t, old)) return;  // old.add_(incoming); incoming freed
  const int32_t sum = writer_.new_buffer("grad:" + graph_.tensors[t].name, bytes_of(t), Category::ActivationGrad);
  st.writes.push_back(sum);
  set_grad(t, sum);
}

void TrainingStep::set_grad(int32_t t, int32_t buffer) {
  grad_buffer_[t] = buffer;
  grad_buffer_holders_[buffer].push_back(t);
}

bool TrainingStep::grad_shared_by_others(int32_t t, int32_t buffer) const {
  auto it = grad_buffer_holders_.find(buffer);
  if (it == grad_buffer_holders_.end()) return false;
  for (int32_t other : it->second)
    if (other != t && grad_buffer_[other] == buffer && !grad_consumed_[other]) return true;
  return false;
}

// A parameter's grad. Contributions meet in the InputBuffer of the parameter's AccumulateGrad node
// (torch/csrc/autograd/input_buffer.cpp), which then steals the sum as .grad (accumulate_grad.h):
//  - a later contribution is added in place into the buffered one, unless that one is a view (a grad
//    that reached the parameter through transpose/reshape, e.g. a tied output embedding): a view's
//    base keeps its storage shared, so `old + new` allocates the sum and frees the old one;
//  - with grads already resident (accumulation across micro-batches) every contribution is added in
//    place into .grad; ZeRO-2/3 first hold the full grad, then keep their shard.
void TrainingStep::add_param_grad(int32_t p, DType cast_to, bool via_view, Step& st) {
  const std::string name = "grad:" + graph_.tensors[p].name;
  // The grad of the autocast copy, in the copy's type (low-precision of a float32 parameter; float32 of a policy's
  // half one read by a float32 op), before ToCopyBackward makes it the parameter's type.
  if (cast_to != DType::Undefined)
    st.writes.push_back(writer_.new_buffer(name + ":autocast", bytes_in(p, cast_to), Category::ActivationGrad));
  if (layout().shard[p] == ParameterShard::FlatShard) {
    fsdp_add_param_grad(p, st);
    return;
  }
  if (layout().shard[p] == ParameterShard::ZeroShard)
    st.writes.push_back(writer_.new_buffer(graph_.tensors[p].name + ":gathered", bytes_of(p), Category::Weight));
  const uint64_t full = bytes_of(p);
  const int32_t old = param_grad_buffer_[p];
  const bool sharded = layout().grad_sharded[p];
  if (old >= 0 || sharded)
    st.writes.push_back(writer_.new_buffer(name + ":partial", full, Category::ActivationGrad));
  if (old >= 0) {
    add_unique(st.reads, old);
    Buffer& held = program().buffers[old];
    if (!param_grad_via_view_[p] || held.resident || sharded) return;
    held.live_at_end = false;  // replaced by the out-of-place sum
    param_grad_buffer_[p] = writer_.new_buffer(name, full, Category::Gradient);
    program().buffers[param_grad_buffer_[p]].live_at_end = true;
    st.writes.push_back(param_grad_buffer_[p]);
    param_grad_via_view_[p] = false;
    return;
  }
  const uint64_t bytes = sharded ? shard(full) : full;
  param_grad_buffer_[p] = writer_.new_buffer(name, bytes, Category::Gradient);
  program().buffers[param_grad_buffer_[p]].live_at_end = true;
  st.writes.push_back(param_grad_buffer_[p]);
  param_grad_via_view_[p] = via_view;
  result_.grad_bytes = checked_add(result_.grad_bytes, bytes, "gradient bytes");
}

void TrainingStep::emit_backward(int32_t i) {
  const FusedOp& op = context_.ops[i];
  const AutogradRule& rule = context_.rules[i];
  Step st;
  st.name = "backward:" + op.name;
  st.op = op.op + "_backward";
  st.phase = Phase::Backward;
  st.flops = checked_mul(context_.op_flops[i], 2, "FLOP count");
  int32_t out_grad = -1;
  for (int32_t t : op.outputs)
    if (grad_buffer_[t] >= 0) {
      add_unique(st.reads, grad_buffer_[t]);
      if (out_grad < 0) out_grad = grad_buffer_[t];
    }
  if (out_grad < 0) return;  // nothing downstream reached the loss
  std::vector<int32_t> parts;  // chunked-ce: the other chunks' grads of an output
  for (int32_t t : op.outputs)
    if (auto it = grad_parts_.find(t); it != grad_parts_.end())
      for (int32_t b : it->second) add_unique(parts, b);
  for (int32_t b : parts) add_unique(st.reads, b);
  for (int32_t t : op.outputs) grad_consumed_[t] = true;
  bool any_input = false;
  std::set<int32_t> done;
  for (int32_t t : op.inputs) any_input |= context_.requires_grad[t];
  if (!any_input) return;
  for (int32_t b : saved_by_op_[i]) add_unique(st.reads, b);
  for (int32_t t : op.inputs)  // the input grad reads the weights: the unit's unsharded flat parameter (fsdp_pre_backward)
    if (layout().shard[t] == ParameterShard::FlatShard) {
      const int32_t u = layout().shard_group[t];
      add_unique(st.reads, kept_after_forward(context_.units, options_.fsdp_wrap, u) && unit_gathered_forward_[u] >= 0 ? unit_gathered_forward_[u]
                                                                                   : unit_gathered_backward_[u]);
    }
  for (int32_t t : op.inputs)  // DeepSpeed ZeRO-3: the whole parameter its backward fetch gathered (or kept)
    if (ds3_param(t) && ds3_buffer(t) >= 0) add_unique(st.reads, ds3_buffer(t));
  for (int32_t t : op.inputs)  // --frozen-dtype: dequantized again for the input grad
    if (packed_storage(t))
      packed_backward(i, t, st);
    else if (layout().restored(t) && !layout().parametrized[t])  // a parametrized one: the forward's copy, kept
      add_dequantized(t, autocast_target(graph_, op, t, options_.precision, layout().dtype), st);
  for (int32_t t : op.inputs) {
    if (!context_.requires_grad[t] || !done.insert(t).second) continue;
    const bool was_cast = autocast_inputs_of_op_[i].count(t) > 0;
    const DType cast_to = was_cast ? autocast_target(graph_, op, t, options_.precision, layout().dtype) : DType::Undefined;
    if (context_.tied_to[t] >= 0) {  // the grad of a transposed view of the embedding
      add_param_grad(context_.tied_to[t], cast_to, /*via_view=*/true, st);
      continue;
    }
    if (context_.is_param[t] || layout().shard[t] == ParameterShard::FlatShard) {  // FSDP: a frozen parameter's view may need a grad
      const bool via_view = std::find(rule.passthrough_inputs.begin(), rule.passthrough_inputs.end(), t) !=
                            rule.passthrough_inputs.end();
      add_param_grad(t, cast_to, via_view, st);
      continue;
    }
    if (was_cast) {
      st.writes.push_back(writer_.new_buffer("grad:" + graph_.tensors[t].name + ":autocast", bytes_in(t, cast_to),
                                             Category::ActivationGrad));
    }
    const bool passthrough = !was_cast && std::find(rule.passthrough_inputs.begin(), rule.passthrough_inputs.end(), t) !=
                                              rule.passthrough_inputs.end();
    if (passthrough) {
      accumulate(t, out_grad, /*fresh=*/false, st);
      if (!parts.empty()) grad_parts_[t] = parts;  // a view of the output: its grad is the same chunks
    } else {
      accumulate(t, writer_.new_buffer("grad:" + graph_.tensors[t].name, bytes_of(t), Category::ActivationGrad), true, st);
    }
  }
  for (const SavedExtra& e : rule.backward_temporaries)
    st.writes.push_back(writer_.new_buffer(op.name + e.suffix, forward_.local_extra_bytes(op, e.bytes), Category::Workspace));
  // --sequence-parallel: backward gathers the input again for the weight grad and computes the input grad
  // full-size before reduce-scattering it (megatron/core/tensor_parallel/layers.py,
  // LinearWithGradAccumulationAndAsyncCommunication).
  const int32_t x = forward_.add_gather(op, st);
  if (x >= 0 && context_.requires_grad[x])
    st.writes.push_back(writer_.new_buffer("grad:" + graph_.tensors[x].name + ":full", forward_.gathered_bytes(op, x),
                                           Category::ActivationGrad));
  forward_.touch_workspace(op, CublasHandle::Autograd, st);
  program().steps.push_back(std::move(st));
  if (options_.offload_activations) record_unpack_node(i, static_cast<int32_t>(program().steps.size()) - 1);
}

}  // namespace memplan
