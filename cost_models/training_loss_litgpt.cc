// Training, loss phase: what litgpt's two chunked cross-entropies share (--loss chunked-ce-tokens:K on the head's
// chunks, training_loss_chunked_tokens.cc; chunked-ce-rows:N on a whole head, training_loss_chunked_rows.cc).
//
// litgpt v0.5.13 (Lightning-AI/litgpt tag v0.5.13), litgpt/utils.py chunked_cross_entropy, both branches:
//   loss_chunks = [F.cross_entropy(l, t, ignore_index=-100, reduction="none") for l, t in zip(logit_chunks, target_chunks)]
//   non_masked_elems = (targets != ignore_index).sum()
//   return torch.cat(loss_chunks).sum() / non_masked_elems.maximum(torch.ones_like(non_masked_elems))
// No .float(): F.cross_entropy is log_softmax(input, dim, input.scalar_type()) then nll_loss
// (aten/src/ATen/native/LossNLL.cpp cross_entropy_loss), and _log_softmax's result has the input's type unless
// half_to_float (aten/src/ATen/native/SoftMax.cpp, TORCH_META_FUNC(_log_softmax)): under bf16-true each chunk's
// log_softmax, and every grad below, is bf16, as plain cross-entropy's is (training_loss.cc). Under autocast
// (bf16-mixed) log_softmax and nll_loss are on the float32 list (aten/src/ATen/autocast_mode.cpp): a float32 copy of
// the chunk that nothing saves, as torchtune's .float() (training_loss_chunked.cc), then float32 throughout. Under
// Fabric (--outputs-to-default-dtype) the loss reads convert_output's float32 copies (training_loss.cc
// emit_convert_output) outside autocast: float32 throughout, no autocast copy.
// What each chunk keeps (tools/autograd/derivatives.yaml): log_softmax its result; nll_loss its target and
// total_weight (its `self` is that result). The list of per-chunk losses ([rows] each) lives until the function
// returns; cat's result until sum has read it.
// Backward (torch/csrc/autograd/engine.cpp: highest sequence number first) runs the mean's and the sum's (an expand,
// no bytes), cat's (narrow views), then per chunk, last first, nll_loss_backward (zeros [rows, V] with the target's
// -1 scattered) and _log_softmax_backward_data, and under autocast _to_copy_backward (the grad back in the logits'
// type). What the chunk grads meet next is each caller's.
#include <string>
#include <vector>

#include "cost_models/eager_semantics.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

DType TrainingStep::litgpt_loss_dtype(int32_t out, bool fabric) const {
  return fabric ? DType::Float32 : layout().dtype[out];
}

// The targets ([B, T] int64, the batch's: held by the loop to the step's end) and (targets != ignore_index).sum(): a bool mask of the `loss_tokens`
// targets the loss reads, its int64 count (`count`, a local until the function returns); .maximum(torch.ones_like
// (count)): the divisor.
int32_t TrainingStep::emit_litgpt_targets(const std::string& tag, int32_t logits_buffer, uint64_t positions,
                                          uint64_t loss_tokens, int32_t& count) {
  const int32_t targets = add_batch_tensor("targets", checked_mul(positions, 8, "targets"));
  loss_target_buffer_ = targets;
  Step mask{"loss:" + tag + ":ignore_mask", "ne_sum", Phase::Forward, {logits_buffer, targets}, {}, loss_tokens};
  count = writer_.new_buffer("loss:non_masked_elems", 8, Category::Activation);
  total_elements_buffer_ = writer_.new_buffer("loss:total_elements", 8, Category::Activation);
  mask.writes = {writer_.new_buffer("labels:not_ignored", loss_tokens, Category::Activation), count,
                 writer_.new_buffer("loss:ones_like", 8, Category::Activation), total_elements_buffer_};
  program().steps.push_back(std::move(mask));
  return targets;
}

// Each chunk's F.cross_entropy, then cat, sum and the mean. `locals` are what else the function holds until it
// returns (the mean reads them): non_masked_elems, and the caller's (a reshape's copy, the sliced logits).
void TrainingStep::emit_litgpt_chunk_losses(const std::string& tag, int32_t out, const std::vector<LitgptChunk>& chunks,
                                            uint64_t vocab, uint64_t loss_tokens, bool fabric,
                                            const std::vector<int32_t>& locals) {
  const Tensor& logits = graph_.tensors[out];
  const DType low = litgpt_loss_dtype(out, fabric);
  const bool upcast = low != DType::Float32 && loss_in_float32();  // autocast's float32 list
  const uint64_t ls_size = static_cast<uint64_t>(dtype_bits(upcast ? DType::Float32 : low) / 8);
  const int n = static_cast<int>(chunks.size());
  chunk_log_softmax_.assign(n, -1);
  chunk_targets_.assign(n, -1);
  chunk_total_weight_.assign(n, -1);
  std::vector<int32_t> chunk_losses;
  for (int c = 0; c < n; ++c) {
    const uint64_t rows = chunks[c].rows;
    if (rows == 0) continue;
    const uint64_t elements = checked_mul(rows, vocab, "chunk elements");
    const std::string ctag = ":chunk" + std::to_string(c);
    Step st{"loss:" + tag + ctag, "cross_entropy", Phase::Forward, chunks[c].reads, chunks[c].made,
            checked_mul(elements, 3, "FLOP count")};
    if (upcast)  // autocast's float32 copy: read by log_softmax, saved by nothing
      st.writes.push_back(writer_.new_buffer(logits.name + ":autocast" + ctag, checked_mul(elements, 4, "bytes"), Category::Activation));
    chunk_log_softmax_[c] = writer_.new_buffer(logits.name + ":log_softmax" + ctag, checked_mul(elements, ls_size, "bytes"),
                                               Category::Activation);
    chunk_total_weight_[c] = writer_.new_buffer("loss:total_weight" + ctag, ls_size, Category::Activation);
    chunk_targets_[c] = chunks[c].target;
    chunk_losses.push_back(writer_.new_buffer("loss" + ctag, checked_mul(rows, ls_size, "bytes"), Category::Activation));
    st.writes.insert(st.writes.end(), {chunk_log_softmax_[c], chunk_total_weight_[c], chunk_losses.back()});
    program().steps.push_back(std::move(st));
  }
  Step cat{"loss:" + tag + ":cat_sum", "cat_sum", Phase::Forward, chunk_losses, {}, loss_tokens};
  const int32_t sum = writer_.new_buffer("loss:sum", ls_size, Category::Activation);
  cat.writes = {writer_.new_buffer("loss:cat", checked_mul(loss_tokens, ls_size, "bytes"), Category::Activation), sum};
  program().steps.push_back(std::move(cat));
  Step div{"loss:" + tag + ":mean", "div", Phase::Forward, {sum, total_elements_buffer_}, {}, 1};
  // the locals (non_masked_elems, the caller's) and loss_chunks (the list) live until the return
  for (int32_t b : locals) add_unique(div.reads, b);
  div.reads.insert(div.reads.end(), chunk_losses.begin(), chunk_losses.end());
  if (!fabric)  // the loss runs inside the autocast forward; Fabric's loop runs it after autocast has exited
    for (int32_t b : forward_autocast_copies_) add_unique(div.reads, b);  // the autocast cache lives through the forward
  loss_buffer_ = writer_.new_buffer("loss", ls_size, Category::Activation);
  program().buffers[loss_buffer_].live_at_end = true;
  div.writes.push_back(loss_buffer_);
  program().steps.push_back(std::move(div));
}

// Backward of the mean (div saves the divisor), the sum's and cat's views of its grad, then each chunk's loss, last
// chunk first. Returns each chunk's grad, in the type the chunk was read in (-1: a chunk without rows).
std::vector<int32_t> TrainingStep::emit_litgpt_chunk_grads(const std::string& tag, int32_t out, bool fabric) {
  const DType low = litgpt_loss_dtype(out, fabric);
  const bool upcast = low != DType::Float32 && loss_in_float32();
  const uint64_t ls_size = static_cast<uint64_t>(dtype_bits(upcast ? DType::Float32 : low) / 8);
  const uint64_t logits_size = static_cast<uint64_t>(dtype_bits(low) / 8);
  Step seed{"backward:" + tag + ":div", "div_backward", Phase::Backward, {total_elements_buffer_}, {}, 1};
  const int32_t grad_loss = writer_.new_buffer("grad:loss", ls_size, Category::ActivationGrad);  // torch.ones_like(loss)
  const int32_t grad_sum = writer_.new_buffer("grad:loss:sum", ls_size, Category::ActivationGrad);  // expanded, cat-narrowed
  seed.writes = {grad_loss, grad_sum};
  program().steps.push_back(std::move(seed));
  const std::string gname = "grad:" + graph_.tensors[out].name;
  const int n = static_cast<int>(chunk_log_softmax_.size());
  std::vector<int32_t> grads(n, -1);
  for (int c = n - 1; c >= 0; --c) {
    if (chunk_log_softmax_[c] < 0) continue;
    const uint64_t ls_bytes = program().buffers[chunk_log_softmax_[c]].bytes;
    const std::string ctag = ":chunk" + std::to_string(c);
    const int32_t grad_log_softmax = writer_.new_buffer(gname + ":log_softmax" + ctag, ls_bytes, Category::ActivationGrad);
    program().steps.push_back(Step{"backward:nll_loss" + ctag, "nll_loss_backward", Phase::Backward,
                                   {grad_sum, chunk_targets_[c], chunk_total_weight_[c]}, {grad_log_softmax}, 0});
    const int32_t grad = writer_.new_buffer(gname + (upcast ? ":float32" : "") + ctag, ls_bytes, Category::ActivationGrad);
    program().steps.push_back(Step{"backward:log_softmax" + ctag, "log_softmax_backward", Phase::Backward,
                                   {chunk_log_softmax_[c], grad_log_softmax}, {grad}, 0});
    grads[c] = grad;
    if (upcast) {  // _to_copy_backward: the grad back in the logits' type
      grads[c] = writer_.new_buffer(gname + ctag, ls_bytes / 4 * logits_size, Category::ActivationGrad);
      program().steps.push_back(Step{"backward:to_copy" + ctag, "to_copy_backward", Phase::Backward, {grad}, {grads[c]}, 0});
    }
  }
  return grads;
}

}  // namespace memplan
