// Training, loss phase: litgpt's chunked cross-entropy (--loss chunked-ce-tokens:K) on the last output.
//
// litgpt v0.5.13, litgpt/finetune/lora.py fit():
//   logits = model(input_ids, lm_head_chunk_size=128)   # GPT.forward (litgpt/model.py): a list,
//            # [lm_head(x_i) for x_i in x.split(lm_head_chunk_size, dim=1)]: chunks of K positions, the last shorter
//   logits[-1] = logits[-1][..., :-1, :]                 # a view: the last chunk's storage stays whole
//   loss = chunked_cross_entropy(logits, targets[..., 1:])
// and litgpt/utils.py chunked_cross_entropy, the head chunked (logits is a list):
//   logit_chunks = [c.reshape(-1, c.size(-1)) for c in logits]
//   target_chunks = [c.reshape(-1) for c in targets.split(logits[0].size(1), dim=1)]
//   loss_chunks = [F.cross_entropy(l, t, ignore_index=-100, reduction="none") for l, t in zip(...)]
//   non_masked_elems = (targets != ignore_index).sum()
//   return torch.cat(loss_chunks).sum() / non_masked_elems.maximum(torch.ones_like(non_masked_elems))
// No .float(): F.cross_entropy is log_softmax(input, dim, input.scalar_type()) then nll_loss
// (aten/src/ATen/native/LossNLL.cpp cross_entropy_loss), and _log_softmax's result has the input's type unless
// half_to_float (aten/src/ATen/native/SoftMax.cpp, TORCH_META_FUNC(_log_softmax)): under bf16-true each chunk's
// log_softmax, and every grad below, is bf16, as plain cross-entropy's is (training_loss.cc). Under autocast
// (bf16-mixed) log_softmax and nll_loss are on the float32 list (aten/src/ATen/autocast_mode.cpp): a float32 copy of
// the chunk that nothing saves, as torchtune's .float() (training_loss_chunked.cc), then float32 throughout.
// What each chunk keeps (tools/autograd/derivatives.yaml): log_softmax its result; nll_loss its target and
// total_weight (its `self` is that result); reshape of a contiguous chunk is a view. With batch > 1 the last
// chunk's [B, k - 1, V] view is not contiguous, so reshape copies it (saved by nothing: log_softmax reads it), and
// so is each [B, k] slice of targets[..., 1:], whose int64 copy nll_loss keeps. The list of per-chunk losses
// ([rows] each) lives until the function returns; cat's result until sum has read it.
// Backward (torch/csrc/autograd/engine.cpp: highest sequence number first) runs the mean's and the sum's (an
// expand, no bytes), cat's (narrow views), then per chunk, last first, nll_loss_backward (zeros [rows, V] with the
// target's -1 scattered) and _log_softmax_backward_data; then the last chunk's SliceBackward0 (made before the
// losses): a zeroed [B, k, V] grad with the slice copied in. Those chunk grads then meet in the head's backward, run
// per chunk (training_loss_chunked.cc emit_chunked_head_backward), which litgpt does not drop: the logits list is
// alive until backward (fit() keeps `logits`), and the loss program keeps the output live to the end unless
// --free-output.
#include <algorithm>
#include <string>
#include <vector>

#include "cost_models/eager_semantics.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

void TrainingStep::emit_token_chunked_loss(int32_t out) {
  const Tensor& logits = graph_.tensors[out];
  const int k = options_.loss_chunks;
  const std::string flag = "--loss chunked-ce-tokens:" + std::to_string(k);
  const std::string model = "model '" + graph_.model_path + "'";
  if (logits.shape.size() != 3 || logits.shape[1] < 2 || logits.shape[2] <= 0)
    throw InputError(flag + " needs [batch, seq >= 2, vocab] logits as the last output of " + model +
                     " (the loss predicts position t + 1 from t); '" + logits.name + "' has " +
                     std::to_string(logits.shape.size()) + " axes" +
                     (logits.shape.size() == 3 ? ", " + std::to_string(logits.shape[1]) + " positions" : ""));
  if (k < 1) throw InternalError(flag + ": K must be >= 1");
  const uint64_t seq = static_cast<uint64_t>(logits.shape[1]);
  const uint64_t vocab = static_cast<uint64_t>(logits.shape[2]);
  const uint64_t batch = logits.elements() / (seq * vocab);
  // Under Fabric (--outputs-to-default-dtype) the loss reads convert_output's float32 copies of the half chunks
  // (training_loss.cc emit_convert_output), outside autocast: float32 throughout, no autocast copy; each copy's grad
  // is cast back to the half type after the loss's backward.
  const bool fabric = fabric_converts(out);
  const DType low = fabric ? DType::Float32 : layout().dtype[out];  // the type the loss reads
  const bool upcast = low != DType::Float32 && loss_in_float32();  // autocast's float32 list
  const uint64_t ls_size = static_cast<uint64_t>(dtype_bits(upcast ? DType::Float32 : low) / 8);
  const uint64_t logits_size = static_cast<uint64_t>(dtype_bits(low) / 8);
  const bool copies = batch > 1;  // [B, k] slices of a [B, T] tensor are not contiguous
  const int32_t logits_buffer = fabric ? emit_convert_output(out) : forward_buffer_[out];

  // x.split(K, dim=1): ceil(T / K) chunks of K positions, the last T - K * (n - 1); the loss reads one position
  // fewer of the last (logits[-1][..., :-1, :]), and zip drops that chunk when it is left with none.
  chunk_positions_.clear();
  for (uint64_t p = 0; p < seq; p += static_cast<uint64_t>(k))
    chunk_positions_.push_back(std::min<uint64_t>(static_cast<uint64_t>(k), seq - p));
  const int n = static_cast<int>(chunk_positions_.size());
  auto loss_positions = [&](int c) { return chunk_positions_[c] - (c == n - 1 ? 1 : 0); };
  const uint64_t loss_tokens = checked_mul(batch, seq - 1, "tokens");

  const int32_t targets = add_batch_tensor("targets", checked_mul(batch * seq, 8, "targets"));
  loss_target_buffer_ = targets;
  // (targets != ignore_index).sum(): a bool mask, its int64 count; .maximum(torch.ones_like(count)): the divisor.
  Step mask{"loss:chunked_ce_tokens:ignore_mask", "ne_sum", Phase::Forward, {logits_buffer, targets}, {}, loss_tokens};
  const int32_t count = writer_.new_buffer("loss:non_masked_elems", 8, Category::Activation);
  total_elements_buffer_ = writer_.new_buffer("loss:total_elements", 8, Category::Activation);
  mask.writes = {writer_.new_buffer("labels:not_ignored", loss_tokens, Category::Activation), count,
                 writer_.new_buffer("loss:ones_like", 8, Category::Activation), total_elements_buffer_};
  program().steps.push_back(std::move(mask));

  chunk_log_softmax_.assign(n, -1);
  chunk_targets_.assign(n, -1);
  chunk_total_weight_.assign(n, -1);
  std::vector<int32_t> chunk_losses;
  for (int c = 0; c < n; ++c) {
    const uint64_t rows = checked_mul(batch, loss_positions(c), "chunk rows");
    if (rows == 0) continue;
    const uint64_t elements = checked_mul(rows, vocab, "chunk elements");
    const std::string tag = ":chunk" + std::to_string(c);
    Step st{"loss:chunked_ce_tokens" + tag, "cross_entropy", Phase::Forward, {logits_buffer, targets}, {},
            checked_mul(elements, 3, "FLOP count")};
    if (copies && c == n - 1)  // reshape of the sliced last chunk: a contiguous copy that log_softmax reads
      st.writes.push_back(writer_.new_buffer(logits.name + ":reshape" + tag, checked_mul(elements, logits_size, "bytes"),
                                             Category::Activation));
    if (upcast)  // autocast's float32 copy: read by log_softmax, saved by nothing
      st.writes.push_back(writer_.new_buffer(logits.name + ":autocast" + tag, checked_mul(elements, 4, "bytes"), Category::Activation));
    int32_t target = targets;
    if (copies) {
      target = writer_.new_buffer("targets" + tag, checked_mul(rows, 8, "bytes"), Category::Activation);
      st.writes.push_back(target);
    }
    chunk_log_softmax_[c] = writer_.new_buffer(logits.name + ":log_softmax" + tag, checked_mul(elements, ls_size, "bytes"),
                                               Category::Activation);
    chunk_total_weight_[c] = writer_.new_buffer("loss:total_weight" + tag, ls_size, Category::Activation);
    chunk_targets_[c] = target;
    chunk_losses.push_back(writer_.new_buffer("loss" + tag, checked_mul(rows, ls_size, "bytes"), Category::Activation));
    st.writes.insert(st.writes.end(), {chunk_log_softmax_[c], chunk_total_weight_[c], chunk_losses.back()});
    program().steps.push_back(std::move(st));
  }
  Step cat{"loss:chunked_ce_tokens:cat_sum", "cat_sum", Phase::Forward, chunk_losses, {}, loss_tokens};
  const int32_t sum = writer_.new_buffer("loss:sum", ls_size, Category::Activation);
  cat.writes = {writer_.new_buffer("loss:cat", checked_mul(loss_tokens, ls_size, "bytes"), Category::Activation), sum};
  program().steps.push_back(std::move(cat));
  Step div{"loss:chunked_ce_tokens:mean", "div", Phase::Forward, {sum, total_elements_buffer_, count}, {}, 1};
  // the locals non_masked_elems and loss_chunks (the list) live until the return
  div.reads.insert(div.reads.end(), chunk_losses.begin(), chunk_losses.end());
  if (!fabric)  // the loss runs inside the autocast forward; Fabric's loop runs it after autocast has exited
    for (int32_t b : forward_autocast_copies_) add_unique(div.reads, b);  // the autocast cache lives through the forward
  loss_buffer_ = writer_.new_buffer("loss", ls_size, Category::Activation);
  program().buffers[loss_buffer_].live_at_end = true;
  div.writes.push_back(loss_buffer_);
  program().steps.push_back(std::move(div));

  // Backward: the mean's grad (div saves the divisor), the sum's and cat's views of it, then each chunk's.
  Step seed{"backward:chunked_ce_tokens:div", "div_backward", Phase::Backward, {total_elements_buffer_}, {}, 1};
  const int32_t grad_loss = writer_.new_buffer("grad:loss", ls_size, Category::ActivationGrad);  // torch.ones_like(loss)
  const int32_t grad_sum = writer_.new_buffer("grad:loss:sum", ls_size, Category::ActivationGrad);  // expanded, cat-narrowed
  seed.writes = {grad_loss, grad_sum};
  program().steps.push_back(std::move(seed));
  const std::string gname = "grad:" + logits.name;
  std::vector<int32_t> grads(n, -1);
  for (int c = n - 1; c >= 0; --c) {
    if (chunk_log_softmax_[c] < 0) continue;
    const uint64_t ls_bytes = program().buffers[chunk_log_softmax_[c]].bytes;
    const std::string tag = ":chunk" + std::to_string(c);
    const int32_t grad_log_softmax = writer_.new_buffer(gname + ":log_softmax" + tag, ls_bytes, Category::ActivationGrad);
    program().steps.push_back(Step{"backward:nll_loss" + tag, "nll_loss_backward", Phase::Backward,
                                   {grad_sum, chunk_targets_[c], chunk_total_weight_[c]}, {grad_log_softmax}, 0});
    const int32_t grad = writer_.new_buffer(gname + (upcast ? ":float32" : "") + tag, ls_bytes, Category::ActivationGrad);
    program().steps.push_back(Step{"backward:log_softmax" + tag, "log_softmax_backward", Phase::Backward,
                                   {chunk_log_softmax_[c], grad_log_softmax}, {grad}, 0});
    grads[c] = grad;
    if (upcast) {  // _to_copy_backward: the grad back in the logits' type
      grads[c] = writer_.new_buffer(gname + tag, ls_bytes / 4 * logits_size, Category::ActivationGrad);
      program().steps.push_back(Step{"backward:to_copy" + tag, "to_copy_backward", Phase::Backward, {grad}, {grads[c]}, 0});
    }
  }
  // SliceBackward0 of logits[-1][..., :-1, :]: the last chunk's whole grad, zeros with the slice copied in.
  if (grads[n - 1] >= 0) {
    const int32_t whole = writer_.new_buffer(gname + ":chunk" + std::to_string(n - 1) + ":whole",
                                             checked_mul(checked_mul(batch, chunk_positions_[n - 1], "rows"), vocab * logits_size, "bytes"),
                                             Category::ActivationGrad);
    program().steps.push_back(Step{"backward:slice", "slice_backward", Phase::Backward, {grads[n - 1]}, {whole}, 0});
    grads[n - 1] = whole;
  }
  // convert_output's copies were made before the slice and the losses, so their ToCopyBackward0 nodes run after
  // every loss node (highest sequence number first), last chunk first: each float32 chunk grad, the last one whole,
  // cast back to the half type.
  if (fabric) {
    const DType half = layout().dtype[out];
    for (int c = n - 1; c >= 0; --c) {
      if (grads[c] < 0) continue;
      const int32_t cast = writer_.new_buffer(gname + ":chunk" + std::to_string(c) + ":" + std::string(dtype_name(half)),
                                              checked_mul(checked_mul(batch, chunk_positions_[c], "rows"),
                                                          vocab * static_cast<uint64_t>(dtype_bits(half) / 8), "bytes"),
                                              Category::ActivationGrad);
      program().steps.push_back(Step{"backward:to_copy:chunk" + std::to_string(c), "to_copy_backward", Phase::Backward,
                                     {grads[c]}, {cast}, 0});
      grads[c] = cast;
    }
  }
  set_chunk_grads(out, grads);
  mark_chunked_head(out);
}

}  // namespace memplan
