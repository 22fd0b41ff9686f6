// Training, loss phase: litgpt's chunked cross-entropy on a whole, unchunked head (--loss chunked-ce-rows:N), as its
// full fine-tune runs it.
//
// litgpt v0.5.13 (Lightning-AI/litgpt tag v0.5.13), litgpt/finetune/full.py fit():
//   logits = model(input_ids)              # no lm_head_chunk_size: GPT.forward (litgpt/model.py) returns lm_head(x),
//                                          # the whole [B, T, V] logits (under Fabric, convert_output's float32 copy)
//   loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])   # chunk_size: its default, 128
// and litgpt/utils.py chunked_cross_entropy on a tensor ("lm_head wasn't chunked, chunk cross entropy"):
//   logits = logits.reshape(-1, logits.size(-1)); targets = targets.reshape(-1)
//   logit_chunks = logits.split(chunk_size); target_chunks = targets.split(chunk_size)
//   loss_chunks = [F.cross_entropy(l, t, ignore_index=ignore_index, reduction="none") for l, t in zip(...)]
// then the mean of training_loss_litgpt.cc. So the chunks are of N rows of the B x (T - 1) flattened positions (the
// last shorter), not of positions of the sequence. The slice is a view; at batch 1 its reshape is one too (the first
// T - 1 rows of the logits are contiguous: ReshapeAliasBackward0), at batch > 1 a contiguous copy (clone +
// _unsafe_view), which the function's local `logits` and the chunk views hold until it returns, and which nothing
// saves (log_softmax keeps its own result); the same for the int64 targets, whose copy each chunk's nll_loss keeps (the
// chunks are views of it). The sliced logits (the caller's argument) are held until the function returns too.
// Backward after the chunks' (training_loss_litgpt.cc, last chunk first): SplitBackward0 once every chunk's grad has
// arrived in its input buffer (torch/csrc/autograd/engine.cpp): split_backward -> split_with_sizes_backward, at::cat of
// the chunk grads (torch/csrc/autograd/FunctionsManual.cpp), one [B(T - 1), V] grad, the chunk grads freed after it;
// the reshape's backward (UnsafeViewBackward0 and CloneBackward0, or ReshapeAliasBackward0) a view of that contiguous
// grad; SliceBackward0: zeros [B, T, V] with the slice copied in (slice_backward); under Fabric ToCopyBackward0: that
// float32 grad cast back to the half type. Then the head's backward, as the graph's one op.
#include <algorithm>
#include <string>
#include <vector>

#include "cost_models/eager_semantics.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

void TrainingStep::emit_row_chunked_loss(int32_t out) {
  const Tensor& logits = graph_.tensors[out];
  const int k = options_.loss_chunks;
  const std::string flag = "--loss chunked-ce-rows:" + std::to_string(k);
  if (logits.shape.size() != 3 || logits.shape[1] < 2 || logits.shape[2] <= 0)
    throw InputError(flag + " needs [batch, seq >= 2, vocab] logits as the last output of model '" + graph_.model_path +
                     "' (the loss predicts position t + 1 from t); '" + logits.name + "' has " +
                     std::to_string(logits.shape.size()) + " axes" +
                     (logits.shape.size() == 3 ? ", " + std::to_string(logits.shape[1]) + " positions" : ""));
  if (k < 1) throw InternalError(flag + ": N must be >= 1");
  const uint64_t seq = static_cast<uint64_t>(logits.shape[1]);
  const uint64_t vocab = static_cast<uint64_t>(logits.shape[2]);
  const uint64_t batch = logits.elements() / (seq * vocab);
  const bool fabric = fabric_converts(out);  // the loss reads Fabric's float32 copy (training_loss.cc)
  const uint64_t logits_size = static_cast<uint64_t>(dtype_bits(litgpt_loss_dtype(out, fabric)) / 8);
  const int32_t logits_buffer = fabric ? emit_convert_output(out) : forward_buffer_[out];
  const uint64_t loss_tokens = checked_mul(batch, seq - 1, "tokens");
  const uint64_t rows_bytes = checked_mul(checked_mul(loss_tokens, vocab, "elements"), logits_size, "bytes");

  const std::string tag = "chunked_ce_rows";
  int32_t count = -1;
  const int32_t targets = emit_litgpt_targets(tag, logits_buffer, checked_mul(batch, seq, "tokens"), loss_tokens, count);
  int32_t rows = logits_buffer, row_targets = targets;
  if (batch > 1) {  // the [B, T - 1] slices are not contiguous: reshape copies them
    rows = writer_.new_buffer(logits.name + ":reshape", rows_bytes, Category::Activation);
    row_targets = writer_.new_buffer("targets:reshape", checked_mul(loss_tokens, 8, "bytes"), Category::Activation);
    program().steps.push_back(Step{"loss:" + tag + ":reshape", "reshape", Phase::Forward, {logits_buffer, targets},
                                   {rows, row_targets}, 0});
  }
  std::vector<LitgptChunk> chunks;
  for (uint64_t r = 0; r < loss_tokens; r += static_cast<uint64_t>(k)) {
    LitgptChunk chunk;
    chunk.rows = std::min<uint64_t>(static_cast<uint64_t>(k), loss_tokens - r);
    chunk.reads = {rows, row_targets};
    chunk.target = row_targets;
    chunks.push_back(std::move(chunk));
  }
  emit_litgpt_chunk_losses(tag, out, chunks, vocab, loss_tokens, fabric, {count, rows, logits_buffer});
  std::vector<int32_t> grads = emit_litgpt_chunk_grads(tag, out, fabric);

  const std::string gname = "grad:" + logits.name;
  Step split{"backward:split", "split_backward", Phase::Backward, grads, {}, 0};
  const int32_t rows_grad = writer_.new_buffer(gname + ":rows", rows_bytes, Category::ActivationGrad);
  split.writes.push_back(rows_grad);
  program().steps.push_back(std::move(split));
  const int32_t whole = writer_.new_buffer(gname + ":whole", checked_mul(checked_mul(batch, seq, "rows"), vocab * logits_size, "bytes"),
                                           Category::ActivationGrad);
  program().steps.push_back(Step{"backward:slice", "slice_backward", Phase::Backward, {rows_grad}, {whole}, 0});
  int32_t grad = whole;
  if (fabric) {  // convert_output's ToCopyBackward0: the float32 grad in the half type
    grad = writer_.new_buffer(gname + ":" + std::string(dtype_name(layout().dtype[out])), bytes_of(out), Category::ActivationGrad);
    program().steps.push_back(Step{"backward:to_copy", "to_copy_backward", Phase::Backward, {whole}, {grad}, 0});
  }
  set_grad(out, grad);
}

}  // namespace memplan
