// Training, loss phase: Liger Kernel's fused linear cross-entropy (--loss fused-linear-ce), which replaces the
// graph's head MatMul (hidden @ W^T) and the loss with one autograd Function.
//
// liger_kernel/ops/fused_linear_cross_entropy.py (LigerFusedLinearCrossEntropyFunction.forward, reduction
// "mean", accum_dtype None; what LigerFusedLinearCrossEntropyLoss runs) calls fused_linear_cross_entropy_forward,
// which:
//  - takes the hidden states as [BT, H] and the weight [V, H], and cuts BT into chunks of
//      inc_factor = cdiv(V, H); chunk_size = min(next_power_of_2(cdiv(BT, inc_factor)), BT)
//    (chunk_mem_const 1: "bound transient logits to C x BT x H"), num_chunks = cdiv(BT, chunk_size);
//  - allocates grad_input = zeros_like(_input) (the hidden's type), grad_weight = zeros_like(weight) (the
//    weight's type) when the input requires grad and the weight trains, loss_1d (fp32 [BT]) and the target mask
//    (bool [BT]);
//  - per chunk: logits_chunk = _input_chunk @ weight.t() ([chunk, V] in the compute type; with same-type
//    operands on CUDA and grad disabled, as inside Function.forward, one [chunk, V] buffer reused: _can_use_mm_out),
//    the cross-entropy kernel writes the logits' grad over them in place, grad_input[chunk] = grad_logits @ weight
//    (a [chunk, H] product first unless mm writes into the slice: _can_use_mm_out), and grad_weight accumulates
//    grad_logits^T @ _input_chunk: in place by addmm for fp16/bf16 grad_logits on sm80+ (out_dtype=float32 when
//    grad_weight is fp32, as under autocast; the input chunk cast to the grad's type first), else the legacy
//    `grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()`: a [V, H] product in the compute type
//    and, from fp16/bf16, its fp32 copy;
//  - returns loss = sum(loss_1d), and the Function keeps grad_input and grad_weight (ctx.save_for_backward), not
//    the hidden states, the weight or any logits.
// Backward (fused_linear_cross_entropy_backward): grad_output is 1.0 for a loss that ends the graph, so the saved
// grads are returned as they are: grad_input becomes the hidden states' grad and grad_weight the weight's, which
// AccumulateGrad steals as .grad (torch/csrc/autograd/functions/accumulate_grad.h) once the engine has released
// the node's saved tensors (engine.cpp evaluate_function: fn.release_variables()). Under torch.autocast the
// Function runs with autocast on (amp_custom_fwd, no cast_inputs): the matmuls cast the hidden chunk and the
// weight (a trainable leaf: the autocast cache's copy, aten/src/ATen/autocast_mode.cpp cached_cast).
#include <algorithm>
#include <string>

#include "cost_models/eager_semantics.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
bool TrainingStep::head_operands(int32_t i, int32_t& x, int32_t& w) const {
  const FusedOp& op = context_.ops[i];
  if (i != static_cast<int32_t>(context_.ops.size()) - 1) return false;
  if (op.kind == OpKind::Linear && op.weight >= 0 && op.x >= 0 && op.bias < 0) {
    x = op.x;
    w = op.weight;
    return true;
  }
  if (op.kind == OpKind::Node && op.op == "MatMul" && op.inputs.size() == 2 && is_constant(graph_, op.inputs[1]) &&
      graph_.tensors[op.inputs[1]].shape.size() == 2) {
    x = op.inputs[0];
    w = op.inputs[1];
    return true;
  }
  return false;
}

// The op the fused loss replaces: the last op, a MatMul of the hidden states by the head weight (F.linear's
// Transpose of a [V, H] parameter, or a pre-transposed [H, V] one), without a bias, producing the last output.
int32_t TrainingStep::find_fused_head() const {
  const int32_t out = graph_.outputs.back();
  const std::string model = "model '" + graph_.model_path + "'";
  const std::string refused = "--loss fused-linear-ce: the last output '" + graph_.tensors[out].name + "' of " + model;
  if (options_.pp > 1 || options_.shard == Sharding::Zero2 || options_.shard == Sharding::Zero1 ||
      options_.shard == Sharding::Zero3 || options_.shard == Sharding::Fsdp || options_.shard == Sharding::Fsdp2 || context_.execution.tp > 1)
    throw InputError("--loss fused-linear-ce is modelled without --pp, --tp and ZeRO/FSDP sharding");
  if (context_.ops.empty() || context_.ops.back().outputs != std::vector<int32_t>{out})
    throw InputError(refused + " is not made by the graph's last op: the fused loss replaces the head's MatMul");
  const int32_t h = static_cast<int32_t>(context_.ops.size()) - 1;
  const FusedOp& op = context_.ops[h];
  const bool linear = op.kind == OpKind::Linear && op.weight >= 0 && op.x >= 0;
  const bool matmul = op.kind == OpKind::Node && op.op == "MatMul" && op.inputs.size() == 2 &&
                      is_constant(graph_, op.inputs[1]) && graph_.tensors[op.inputs[1]].shape.size() == 2;
  if (!linear && !matmul)
    throw InputError(refused + " is made by " + op.op + " '" + op.name +
                     "', not by the head's MatMul (hidden @ W^T) the fused loss replaces");
  if (linear && op.bias >= 0)
    throw InputError(refused + " is made by a head with a bias ('" + graph_.tensors[op.bias].name + "'): not modelled");
  const int32_t w = linear ? op.weight : op.inputs[1];
  if (layout().restored(w))
    throw InputError("--loss fused-linear-ce: the head weight '" + graph_.tensors[w].name +
                     "' is re-stored by --frozen-dtype: not modelled");
  if (segment_of_op_[h] >= 0)
    throw InputError(refused + ": its head is inside a checkpointed segment, which is not modelled with the fused loss");
  return h;
}

void TrainingStep::emit_fused_loss() {
  const FusedOp& op = context_.ops[fused_head_];
  const int32_t out = graph_.outputs.back();
  const int32_t x = op.kind == OpKind::Linear ? op.x : op.inputs[0];
  const int32_t w = op.kind == OpKind::Linear ? op.weight : op.inputs[1];
  if (!context_.requires_grad[out])
    throw InputError("output '" + graph_.tensors[out].name + "' of model '" + graph_.model_path +
                     "' does not depend on any trainable parameter");
  const Tensor& hidden = graph_.tensors[x];
  const uint64_t h = static_cast<uint64_t>(std::max<int64_t>(1, hidden.shape.empty() ? 1 : hidden.shape.back()));
  const uint64_t v = static_cast<uint64_t>(std::max<int64_t>(1, graph_.tensors[out].shape.back()));
  const uint64_t bt = hidden.elements() / h;
  const uint64_t rows = std::min(next_power_of_2(ceil_div(bt, ceil_div(v, h))), bt);  // Liger's chunk_size
  const bool amp = is_amp(options_.precision);
  const DType compute = amp ? low_precision_dtype(options_.precision) : layout().dtype[x];
  const uint64_t cbytes = static_cast<uint64_t>(dtype_bits(compute) / 8);
  const bool input_grad = context_.requires_grad[x];
  const int32_t p = context_.tied_to[w] >= 0 ? context_.tied_to[w] : w;
  const bool weight_grad = input_grad && context_.is_param[p];  // Liger makes grad_weight only with grad_input
  const bool lowp = compute == DType::Float16 || compute == DType::BFloat16;
  const bool same_types = layout().dtype[x] == layout().dtype[w] && !amp;  // _can_use_mm_out

  const int32_t hidden_buffer = lookup(x);
  int32_t weight_buffer = forward_buffer_[w];
  const int32_t targets = add_batch_tensor("targets", checked_mul(bt, 8, "targets"));
  Step init{"loss:fused_linear_ce:init", "zeros_like", Phase::Forward, {hidden_buffer, weight_buffer, targets}, {}, 0};
  if (amp && layout().dtype[w] != compute) {  // autocast's copy of the weight: the cache's for a trainable leaf
    if (autocast_weight_copy_[w] >= 0) {
      weight_buffer = autocast_weight_copy_[w];
      init.reads.push_back(weight_buffer);
    } else {
      weight_buffer = writer_.new_buffer(graph_.tensors[w].name + ":autocast", bytes_in(w, compute), Category::Weight);
      init.writes.push_back(weight_buffer);
      if (context_.is_param[p]) {
        autocast_weight_copy_[w] = weight_buffer;
        forward_autocast_copies_.push_back(weight_buffer);
      }
    }
  }
  fused_grad_input_ = writer_.new_buffer("grad:" + hidden.name + ":fused", bytes_of(x), Category::ActivationGrad);
  init.writes.push_back(fused_grad_input_);
  if (weight_grad) {
    fused_grad_weight_ = writer_.new_buffer("grad:" + graph_.tensors[p].name + ":fused", bytes_of(w), Category::Gradient);
    init.writes.push_back(fused_grad_weight_);
  }
  const int32_t loss_1d = writer_.new_buffer("loss:fused_linear_ce:loss_1d", checked_mul(bt, 4, "bytes"), Category::Activation);
  const int32_t mask = writer_.new_buffer("labels:not_ignored", bt, Category::Activation);
  init.writes.insert(init.writes.end(), {loss_1d, mask});
  program().steps.push_back(std::move(init));

  // One chunk (the first, of `rows` rows; the others are no larger): its logits, the grad written over them,
  // the input grad's slice, then the weight grad's accumulation.
  Step logits{"loss:fused_linear_ce:chunk_logits", "fused_linear_cross_entropy", Phase::Forward,
              {hidden_buffer, weight_buffer, targets, fused_grad_input_, loss_1d, mask}, {},
              checked_mul(checked_mul(bt, v, "FLOP count"), checked_mul(h, 6, "FLOP count"), "FLOP count")};
  const int32_t chunk = writer_.new_buffer(graph_.tensors[out].name + ":fused_chunk",
                                           checked_mul(checked_mul(rows, v, "bytes"), cbytes, "bytes"), Category::Activation);
  logits.writes.push_back(chunk);
  const uint64_t row_bytes = checked_mul(checked_mul(rows, h, "bytes"), cbytes, "bytes");
  if (layout().dtype[x] != compute)  // autocast casts the hidden chunk for the matmul
    logits.writes.push_back(writer_.new_buffer(hidden.name + ":fused_chunk:autocast", row_bytes, Category::Activation));
  if (input_grad && !same_types)  // grad_input[chunk] = grad_logits @ weight: the product, then its copy into the slice
    logits.writes.push_back(writer_.new_buffer("grad:" + hidden.name + ":fused_chunk", row_bytes, Category::ActivationGrad));
  program().steps.push_back(std::move(logits));
  Step wgrad{"loss:fused_linear_ce:weight_grad", "addmm", Phase::Forward, {hidden_buffer, chunk}, {}, 0};
  if (weight_grad) {
    wgrad.reads.push_back(fused_grad_weight_);
    if (lowp && context_.execution.cuda_arch_major >= 8) {  // addmm into grad_weight, the input chunk in the grad's type
      if (layout().dtype[x] != compute)
        wgrad.writes.push_back(writer_.new_buffer(hidden.name + ":fused_chunk:cast", row_bytes, Category::Activation));
    } else {  // grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()
      const uint64_t vh = checked_mul(v, h, "bytes");
      wgrad.writes.push_back(writer_.new_buffer(graph_.tensors[p].name + ":fused_grad_chunk", checked_mul(vh, cbytes, "bytes"),
                                                Category::ActivationGrad));
      if (compute != DType::Float32)
        wgrad.writes.push_back(writer_.new_buffer(graph_.tensors[p].name + ":fused_grad_chunk:float32",
                                                  checked_mul(vh, 4, "bytes"), Category::ActivationGrad));
    }
  }
  program().steps.push_back(std::move(wgrad));
  Step sum{"loss:fused_linear_ce:sum", "sum", Phase::Forward, {loss_1d, mask}, {}, bt};
  for (int32_t b : forward_autocast_copies_) add_unique(sum.reads, b);  // the autocast cache lives through the forward
  loss_buffer_ = writer_.new_buffer("loss", 4, Category::Activation);
  program().buffers[loss_buffer_].live_at_end = true;
  sum.writes.push_back(loss_buffer_);
  program().steps.push_back(std::move(sum));
  loss_target_buffer_ = targets;
}

// The head's backward, replaced by the fused Function's: the saved grads become the hidden states' and the
// weight's.
void TrainingStep::emit_fused_backward() {
  const FusedOp& op = context_.ops[fused_head_];
  const int32_t x = op.kind == OpKind::Linear ? op.x : op.inputs[0];
  const int32_t w = op.kind == OpKind::Linear ? op.weight : op.inputs[1];
  const int32_t p = context_.tied_to[w] >= 0 ? context_.tied_to[w] : w;
  Step st{"backward:fused_linear_ce", "fused_linear_cross_entropy_backward", Phase::Backward, {fused_grad_input_}, {}, 0};
  st.writes.push_back(writer_.new_buffer("grad:loss", 4, Category::ActivationGrad));  // torch.ones_like(loss)
  if (context_.requires_grad[x]) accumulate(x, fused_grad_input_, /*fresh=*/false, st);
  if (fused_grad_weight_ >= 0) {
    st.reads.push_back(fused_grad_weight_);
    const int32_t old = param_grad_buffer_[p];
    if (old >= 0) {  // grads kept between steps or accumulated: added in place, the fused grad then freed
      add_unique(st.reads, old);
    } else {  // AccumulateGrad steals it as .grad
      param_grad_buffer_[p] = fused_grad_weight_;
      program().buffers[fused_grad_weight_].live_at_end = true;
      param_grad_via_view_[p] = false;
      result_.grad_bytes = checked_add(result_.grad_bytes, bytes_of(w), "gradient bytes");
    }
  }
  program().steps.push_back(std::move(st));
}

}  // namespace memplan
