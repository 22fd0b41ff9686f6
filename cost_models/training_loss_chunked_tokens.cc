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
// Each chunk's F.cross_entropy, the sum and the mean, and their backward: training_loss_litgpt.cc. Here: reshape of a
// contiguous chunk is a view. With batch > 1 the last chunk's [B, k - 1, V] view is not contiguous, so reshape
// copies it (saved by nothing: log_softmax reads it), and so is each [B, k] slice of targets[..., 1:], whose int64
// copy nll_loss keeps. After the losses' backward, the last chunk's SliceBackward0 (made before the losses): a zeroed
// [B, k, V] grad with the slice copied in. Those chunk grads then meet in the head's backward, run per chunk
// (training_loss_chunked.cc emit_chunked_head_backward), which litgpt does not drop: the logits list is alive until
// backward (fit() keeps `logits`), and the loss program keeps the output live to the end unless --free-output.
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
  const uint64_t logits_size = static_cast<uint64_t>(dtype_bits(litgpt_loss_dtype(out, fabric)) / 8);
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

  const std::string tag = "chunked_ce_tokens";
  int32_t count = -1;
  const int32_t targets = emit_litgpt_targets(tag, logits_buffer, checked_mul(batch, seq, "tokens"), loss_tokens, count);
  std::vector<LitgptChunk> chunks(n);
  for (int c = 0; c < n; ++c) {
    LitgptChunk& chunk = chunks[c];
    chunk.rows = checked_mul(batch, loss_positions(c), "chunk rows");
    chunk.reads = {logits_buffer, targets};
    chunk.target = targets;
    if (chunk.rows == 0 || !copies) continue;
    const std::string ctag = ":chunk" + std::to_string(c);
    if (c == n - 1)  // reshape of the sliced last chunk: a contiguous copy that log_softmax reads
      chunk.made.push_back(writer_.new_buffer(logits.name + ":reshape" + ctag,
                                              checked_mul(checked_mul(chunk.rows, vocab, "chunk elements"), logits_size, "bytes"),
                                              Category::Activation));
    chunk.target = writer_.new_buffer("targets" + ctag, checked_mul(chunk.rows, 8, "bytes"), Category::Activation);
    chunk.made.push_back(chunk.target);
  }
  emit_litgpt_chunk_losses(tag, out, chunks, vocab, loss_tokens, fabric, {count});
  std::vector<int32_t> grads = emit_litgpt_chunk_grads(tag, out, fabric);
  const std::string gname = "grad:" + logits.name;
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
