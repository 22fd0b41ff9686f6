// Training, loss phase: torchtune's CEWithChunkedOutputLoss (--loss chunked-ce:N) on the last output.
//
// torchtune/modules/loss/ce_chunked_output_loss.py, CEWithChunkedOutputLoss.forward: the model returns its
// logits as a list of chunks along the sequence (TransformerDecoder.chunked_output, torchtune/modules/
// transformer.py: the output projection applied to each chunk of the last hidden state), and the loss
//   total_elements = (labels != ignore_index).sum()
//   labels = [c.reshape(-1) for c in labels.tensor_split(N, dim=1)]
//   for each chunk: total_loss += F.cross_entropy(logits_chunk.float(), labels_chunk, reduction="sum")
//   return total_loss / total_elements
// What each chunk keeps (tools/autograd/derivatives.yaml):
//  - `.float()` (_to_copy) saves nothing (self: _to_copy_backward(grad, self.options())): its fp32 copy dies as
//    soon as log_softmax has read it; on fp32 logits `.float()` returns the tensor itself, no copy;
//  - log_softmax saves its result (self: _log_softmax_backward_data(grad, result, dim, self.scalar_type())):
//    one fp32 chunk per chunk until that chunk's backward;
//  - nll_loss saves its target and total_weight (self: nll_loss_backward(grad, self, target, weight, reduction,
//    ignore_index, total_weight)); a label chunk of [batch > 1, seq / N] is not contiguous, so reshape(-1)
//    copies it (int64), and that copy is what nll_loss keeps;
//  - div saves the divisor (other: total_elements), a scalar.
// The chunks of the logits are the list the model returned: all live together, the same bytes as the whole
// output, which memplan keeps as the graph's one output, made by the head's forward as the graph's one op (byte for
// byte the same); the head's backward runs per chunk (emit_chunked_head_backward). Backward (torch/csrc/autograd/engine.cpp: the ready queue runs the node of
// highest sequence number first) runs every chunk's loss backward, last chunk first, before any op of the
// model: per chunk nll_loss_backward (an fp32 grad of the chunk's log_softmax), _log_softmax_backward_data (the
// fp32 grad of the chunk; its saved result and incoming grad then die) and, on low-precision logits,
// _to_copy_backward (the grad in the logits' type). The N chunk grads then meet in the head's backward.
#include <algorithm>
#include <string>
#include <vector>

#include "cost_models/eager_semantics.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

void TrainingStep::emit_chunked_loss(int32_t out) {
  const Tensor& logits = graph_.tensors[out];
  const int n = options_.loss_chunks;
  const std::string model = "model '" + graph_.model_path + "'";
  if (logits.shape.size() != 3 || logits.shape[1] <= 0 || logits.shape[2] <= 0)
    throw InputError("--loss chunked-ce:" + std::to_string(n) + " needs [batch, seq, vocab] logits as the last output of " +
                     model + "; '" + logits.name + "' has shape " + shape_text(logits.shape));
  const int64_t seq = logits.shape[1];
  if (n < 1 || n > seq)
    throw InputError("--loss chunked-ce:" + std::to_string(n) + ": output '" + logits.name + "' of " + model + " has " +
                     std::to_string(seq) + " positions on its sequence axis (the second-to-last), so N must be from 1 to " +
                     std::to_string(seq));
  const uint64_t vocab = static_cast<uint64_t>(logits.shape[2]);
  const uint64_t batch = logits.elements() / (static_cast<uint64_t>(seq) * vocab);
  const uint64_t tokens = checked_mul(batch, static_cast<uint64_t>(seq), "tokens");
  const uint64_t logits_size = static_cast<uint64_t>(dtype_bits(layout().dtype[out]) / 8);
  const bool upcast = layout().dtype[out] != DType::Float32;  // .float() copies low-precision logits only
  const bool label_copies = batch > 1 && n > 1;               // a [batch, seq / N] slice is not contiguous
  const int32_t logits_buffer = forward_buffer_[out];

  const int32_t targets = add_batch_tensor("targets", checked_mul(tokens, 8, "targets"));
  loss_target_buffer_ = targets;
  // (labels != ignore_index).sum(): a bool mask of the labels, then the int64 count the loss is divided by.
  Step mask{"loss:chunked_ce:ignore_mask", "ne_sum", Phase::Forward, {logits_buffer, targets}, {}, tokens};
  total_elements_buffer_ = writer_.new_buffer("loss:total_elements", 8, Category::Activation);
  mask.writes = {writer_.new_buffer("labels:not_ignored", tokens, Category::Activation), total_elements_buffer_};
  program().steps.push_back(std::move(mask));

  chunk_log_softmax_.clear();
  chunk_targets_.clear();
  chunk_total_weight_.clear();
  int32_t running_sum = -1;
  // tensor_split: the first seq % N chunks hold one position more.
  chunk_positions_.clear();
  for (int c = 0; c < n; ++c) chunk_positions_.push_back(static_cast<uint64_t>(seq / n + (c < seq % n ? 1 : 0)));
  for (int c = 0; c < n; ++c) {
    const uint64_t positions = chunk_positions_[c];
    const uint64_t rows = checked_mul(batch, positions, "chunk rows");
    const uint64_t elements = checked_mul(rows, vocab, "chunk elements");
    const std::string tag = ":chunk" + std::to_string(c);
    Step st{"loss:chunked_ce" + tag, "cross_entropy", Phase::Forward, {logits_buffer, targets}, {},
            checked_mul(elements, 3, "FLOP count")};
    if (running_sum >= 0) st.reads.push_back(running_sum);
    if (upcast)  // logits_chunk.float(): read by log_softmax, saved by nothing
      st.writes.push_back(writer_.new_buffer(logits.name + ":float32" + tag, checked_mul(elements, 4, "bytes"), Category::Activation));
    int32_t target = targets;
    if (label_copies) {
      target = writer_.new_buffer("targets" + tag, checked_mul(rows, 8, "bytes"), Category::Activation);
      st.writes.push_back(target);
    }
    const int32_t log_softmax = writer_.new_buffer(logits.name + ":log_softmax" + tag, checked_mul(elements, 4, "bytes"),
                                                   Category::Activation);
    const int32_t total_weight = writer_.new_buffer("loss:total_weight" + tag, 4, Category::Activation);
    const int32_t chunk_loss = writer_.new_buffer("loss" + tag, 4, Category::Activation);  // added into the sum, then freed
    running_sum = writer_.new_buffer("loss:sum" + tag, 4, Category::Activation);
    st.writes.insert(st.writes.end(), {log_softmax, total_weight, chunk_loss, running_sum});
    chunk_log_softmax_.push_back(log_softmax);
    chunk_targets_.push_back(target);
    chunk_total_weight_.push_back(total_weight);
    program().steps.push_back(std::move(st));
  }
  Step div{"loss:chunked_ce:mean", "div", Phase::Forward, {running_sum, total_elements_buffer_}, {}, 1};
  for (int32_t b : forward_autocast_copies_) add_unique(div.reads, b);  // the autocast cache lives through the forward
  loss_buffer_ = writer_.new_buffer("loss", 4, Category::Activation);
  program().buffers[loss_buffer_].live_at_end = true;
  div.writes.push_back(loss_buffer_);
  program().steps.push_back(std::move(div));

  // Backward: the grad of the mean (div saves the count), then each chunk's, last chunk first.
  Step seed{"backward:chunked_ce:div", "div_backward", Phase::Backward, {total_elements_buffer_}, {}, 1};
  const int32_t grad_loss = writer_.new_buffer("grad:loss", 4, Category::ActivationGrad);  // torch.ones_like(loss)
  const int32_t grad_sum = writer_.new_buffer("grad:loss:sum", 4, Category::ActivationGrad);  // every chunk's, via add
  seed.writes = {grad_loss, grad_sum};
  program().steps.push_back(std::move(seed));
  std::vector<int32_t> chunk_grads;
  for (int c = n - 1; c >= 0; --c) {
    const uint64_t fp32_bytes = program().buffers[chunk_log_softmax_[c]].bytes;
    const uint64_t elements = fp32_bytes / 4;
    const std::string tag = ":chunk" + std::to_string(c);
    const std::string gname = "grad:" + logits.name;
    const int32_t grad_log_softmax = writer_.new_buffer(gname + ":log_softmax" + tag, fp32_bytes, Category::ActivationGrad);
    program().steps.push_back(Step{"backward:nll_loss" + tag, "nll_loss_backward", Phase::Backward,
                                   {grad_sum, chunk_targets_[c], chunk_total_weight_[c]}, {grad_log_softmax}, 0});
    const int32_t grad_fp32 = writer_.new_buffer(gname + (upcast ? ":float32" : "") + tag, fp32_bytes, Category::ActivationGrad);
    program().steps.push_back(Step{"backward:log_softmax" + tag, "log_softmax_backward", Phase::Backward,
                                   {chunk_log_softmax_[c], grad_log_softmax}, {grad_fp32}, 0});
    int32_t grad_chunk = grad_fp32;
    if (upcast) {  // _to_copy_backward: the grad back in the logits' type
      grad_chunk = writer_.new_buffer(gname + tag, checked_mul(elements, logits_size, "bytes"), Category::ActivationGrad);
      program().steps.push_back(Step{"backward:to_copy" + tag, "to_copy_backward", Phase::Backward, {grad_fp32}, {grad_chunk}, 0});
    }
    chunk_grads.push_back(grad_chunk);
  }
  set_chunk_grads(out, std::vector<int32_t>(chunk_grads.rbegin(), chunk_grads.rend()));
  mark_chunked_head(out);
}

// The grads of the chunks, together the grad of the output: the first chunk's is its grad buffer, the others its
// parts, read (and freed) by the same backward. A chunk no loss reads (-1) has no grad.
void TrainingStep::set_chunk_grads(int32_t out, std::vector<int32_t> grads) {
  chunk_grads_ = grads;  // in chunk order
  grads.erase(std::remove(grads.begin(), grads.end(), -1), grads.end());
  set_grad(out, grads.front());
  grads.erase(grads.begin());
  grad_parts_[out] = std::move(grads);
}

// The head's backward runs once per chunk (chunk_positions_), as TransformerDecoder.chunked_output's (torchtune) or
// GPT.forward's lm_head_chunk_size (litgpt) per-chunk linear does, when the output is the head's (the last op, the
// hidden state [batch, seq, hidden]) on one GPU's whole weight; otherwise as the graph's one op. Its forward is left
// as one op: byte for byte the same (each chunk's matmul saves its slice of the hidden state, as a contiguous copy
// or autocast's cast when the slice is not contiguous, and the copies add up to the whole).
void TrainingStep::mark_chunked_head(int32_t out) {
  const int64_t seq = graph_.tensors[out].shape[1];
  const int32_t h = static_cast<int32_t>(context_.ops.size()) - 1;
  int32_t x = -1, w = -1;
  if (chunk_positions_.size() > 1 && context_.ops[h].outputs == std::vector<int32_t>{out} && head_operands(h, x, w) &&
      !flat_shards() && !layout().restored(w) && segment_of_op_[h] < 0 && graph_.tensors[x].shape.size() == 3 &&
      graph_.tensors[x].shape[1] == seq)
    chunked_head_ = h;
}

// The head's backward per chunk, last chunk first (the engine's order: the chunks' matmuls were made in chunk
// order). Each chunk's MmBackward frees that chunk's grad of the logits and makes its slice of the hidden state's
// grad, kept by SplitBackward (chunk's backward, tools/autograd/derivatives.yaml split: cat of the grads) until the
// last chunk, and its contribution to the weight's grad, accumulated where the weight's grad meets
// (torch/csrc/autograd/input_buffer.cpp): the first kept, each later one added in place, or out of place into a new
// sum when the kept one is a view (F.linear's weight.t()); under autocast they meet at the cached cast's
// _to_copy_backward in the low type, cast to float32 once after the last chunk.
void TrainingStep::emit_chunked_head_backward() {
  const int32_t h = chunked_head_;
  const FusedOp& op = context_.ops[h];
  int32_t x = -1, w = -1;
  head_operands(h, x, w);
  grad_consumed_[op.outputs[0]] = true;
  const int n = static_cast<int>(chunk_grads_.size());
  const uint64_t seq = static_cast<uint64_t>(graph_.tensors[x].shape[1]);
  const bool x_cast = autocast_inputs_of_op_[h].count(x) > 0;
  const DType x_compute = x_cast ? autocast_target(graph_, op, x, options_.precision, layout().dtype) : layout().dtype[x];
  const bool w_grad = context_.requires_grad[w];
  const int32_t p = context_.tied_to[w] >= 0 ? context_.tied_to[w] : w;
  const bool w_cast = autocast_inputs_of_op_[h].count(w) > 0;
  const std::vector<int32_t>& passthrough = context_.rules[h].passthrough_inputs;
  const bool w_view = context_.tied_to[w] >= 0 || std::find(passthrough.begin(), passthrough.end(), w) != passthrough.end();
  // Where the weight's contributions meet: under autocast the cast's node, in the low type; else the weight's
  // AccumulateGrad, whose sum becomes .grad when the weight has no grad yet (else each contribution goes to
  // add_param_grad, as one op's would).
  const bool own_sum = w_grad && (w_cast || (param_grad_buffer_[p] < 0 && !layout().grad_sharded[p] &&
                                             layout().shard[p] == ParameterShard::Whole));
  const uint64_t part_bytes = w_cast ? bytes_in(w, low_precision_dtype(options_.precision)) : bytes_of(w);
  const std::string wname = "grad:" + graph_.tensors[p].name + (w_cast ? ":autocast" : "");
  std::vector<int32_t> x_grads;
  int32_t sum = -1;
  for (int c = n - 1; c >= 0; --c) {
    if (chunk_grads_[c] < 0) continue;  // no loss read this chunk: its matmul gets no grad
    const uint64_t positions = chunk_positions_[c];
    const std::string tag = ":chunk" + std::to_string(c);
    Step st{"backward:" + op.name + tag, op.op + "_backward", Phase::Backward, {chunk_grads_[c]}, {},
            checked_mul(context_.op_flops[h] / static_cast<uint64_t>(n), 2, "FLOP count")};
    for (int32_t b : saved_by_op_[h]) add_unique(st.reads, b);
    if (context_.requires_grad[x]) {
      const std::string gname = "grad:" + graph_.tensors[x].name;
      if (x_cast)  // the low-precision grad of the cast slice, then its cast back
        st.writes.push_back(writer_.new_buffer(gname + ":autocast" + tag,
                                               checked_mul(bytes_in(x, x_compute) / seq, positions, "bytes"), Category::ActivationGrad));
      x_grads.push_back(writer_.new_buffer(gname + tag, checked_mul(bytes_of(x) / seq, positions, "bytes"), Category::ActivationGrad));
      st.writes.push_back(x_grads.back());
    }
    if (w_grad && !own_sum) add_param_grad(p, /*cast_to=*/DType::Undefined, w_view, st);
    int32_t part = -1;
    if (own_sum) {
      part = writer_.new_buffer(wname + (sum < 0 ? "" : ":partial" + tag), part_bytes,
                                sum < 0 && !w_cast ? Category::Gradient : Category::ActivationGrad);
      st.writes.push_back(part);
    }
    forward_.touch_workspace(op, CublasHandle::Autograd, st);
    program().steps.push_back(std::move(st));
    if (!own_sum) continue;
    if (sum < 0) {
      sum = part;
    } else {  // the next node adds it: in place, or out of place into a new sum when the kept one is a view
      Step add{"backward:" + op.name + ":accumulate" + tag, "add", Phase::Backward, {sum, part}, {}, 0};
      if (w_view) {
        sum = writer_.new_buffer(wname + (w_cast ? ":sum" : "") + tag, part_bytes, w_cast ? Category::ActivationGrad : Category::Gradient);
        add.writes.push_back(sum);
      }
      program().steps.push_back(std::move(add));
    }
  }
  if (own_sum && w_cast) {  // _to_copy_backward: the float32 grad, as one op's would arrive
    Step cast{"backward:" + op.name + ":weight_cast", "to_copy_backward", Phase::Backward, {sum}, {}, 0};
    add_param_grad(p, /*cast_to=*/DType::Undefined, /*via_view=*/false, cast);
    program().steps.push_back(std::move(cast));
  } else if (own_sum) {  // AccumulateGrad steals the sum as .grad
    param_grad_buffer_[p] = sum;
    program().buffers[sum].live_at_end = true;
    param_grad_via_view_[p] = w_view;
    result_.grad_bytes = checked_add(result_.grad_bytes, bytes_of(w), "gradient bytes");
  }
  if (x_grads.empty()) return;
  Step cat{"backward:" + op.name + ":split", "split_backward", Phase::Backward, x_grads, {}, 0};
  accumulate(x, writer_.new_buffer("grad:" + graph_.tensors[x].name, bytes_of(x), Category::ActivationGrad), /*fresh=*/true, cat);
  program().steps.push_back(std::move(cat));
}

}  // namespace memplan
