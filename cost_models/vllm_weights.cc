#include "cost_models/vllm_weights.h"

#include "cost_models/graph_facts.h"
#include "cost_models/tensor_parallel.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

// The token embedding: a Gather of a rank-2 weight by a graph input, `vocab` rows (-1: none).
int32_t token_embedding(const Graph& g, int64_t vocab) {
  for (const Node& n : g.nodes) {
    if (n.op_type != "Gather" || n.inputs.size() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0) continue;
    const Tensor& table = g.tensors[n.inputs[0]];
    if (table.kind == TensorKind::Weight && table.producer < 0 && table.shape.size() == 2 && table.shape[0] == vocab &&
        g.tensors[n.inputs[1]].kind == TensorKind::Input)
      return n.inputs[0];
  }
  return -1;
}

}  // namespace

int64_t vllm_padded_vocab(int64_t vocab) {
  return (vocab + kVllmVocabPaddingSize - 1) / kVllmVocabPaddingSize * kVllmVocabPaddingSize;
}

VllmVocabPadding vllm_vocab_padding(const Graph& g, const std::string& lm_head, int64_t vocab, int tp,
                                    bool replicate_kv_heads, bool tied_by_shape, DType dtype, const std::string& model) {
  VllmVocabPadding p;
  p.vocab = vocab;
  p.padded_vocab = vllm_padded_vocab(vocab);
  int32_t head_w = -1;
  for (const Node& n : g.nodes)
    if (n.name == lm_head && n.inputs.size() >= 2) head_w = matmul_weight(g, n.inputs[1]);
  if (head_w < 0) return p;
  if (tp > 1 && p.padded_vocab % tp != 0)
    throw InputError("--tp " + std::to_string(tp) + " does not divide the padded vocabulary of " + model + ", " +
                     std::to_string(p.padded_vocab) + " rows (" + std::to_string(vocab) +
                     " padded to a multiple of 64: vLLM's VocabParallelEmbedding splits them evenly)");
  const int32_t embedding = token_embedding(g, vocab);
  const std::vector<int32_t> tied = held_tied_copies(g, tied_by_shape);
  const bool head_is_embedding = embedding >= 0 && (head_w == embedding || tied[head_w] == embedding);
  TensorParallelPlan plan;
  if (tp > 1) plan = plan_tensor_parallel(g, tp, false, replicate_kv_heads);
  const int64_t rows_per_rank = p.padded_vocab / tp;
  uint64_t elements = 0;
  auto pad = [&](int32_t t) {
    const Tensor& w = g.tensors[t];
    // The vocabulary axis: the last one whose size is the vocabulary (a head [hidden, vocab], or its transposed
    // copy and the embedding [vocab, hidden]).
    const int axis = w.shape[1] == vocab ? 1 : 0;
    const int64_t rows = tp > 1 && plan.sharded(t) && plan.axis[t] == axis ? plan.local_dim[t] : vocab;
    if (rows_per_rank > rows)
      elements = checked_add(elements, checked_mul(static_cast<uint64_t>(rows_per_rank - rows),
                                                   static_cast<uint64_t>(w.shape[1 - axis]), "vocabulary padding"),
                             "vocabulary padding");
    ++p.tables;
  };
  if (embedding >= 0) pad(embedding);
  if (!head_is_embedding) pad(head_w);
  p.bytes = checked_mul(elements, static_cast<uint64_t>(dtype_bits(dtype)) / 8, "vocabulary padding");
  return p;
}

}  // namespace memplan
