// Regression: --tied-embeddings auto, the default, dropped an untied LM head that has its own initializer
// (Llama-3.1-8B's lm_head, constant-folded into a pre-transposed `onnx::MatMul_N`), because the rule took a
// head shaped as the token embedding's transpose for the exporter's copy of a tied embedding. The weights of
// Llama-3-8B and Qwen2.5-7B came out 6.7 % and 7.6 % short. Now auto holds a head as the embedding only when
// the file proves the tie (the head reads the embedding's own initializer), and `shape` keeps the old rule.
#include <gtest/gtest.h>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::resident_bytes;

// A tiny decoder as torch.onnx writes Llama-3.1-8B with constant folding: ids[4] -> Gather(embed_tokens
// [V=10, H=8]) -> x * norm.weight[8] -> MatMul(onnx::MatMul_9 [8, 10]) -> logits[4, 10]. The head is its own
// nn.Linear (own initializer), folded pre-transposed, so its shape is the embedding's transpose.
Graph untied_decoder() {
  GraphBuilder b;
  const int32_t ids = b.input("ids", {4}, DType::Int64);
  const int32_t e = b.node1("Gather", {b.weight("model.embed_tokens.weight", {10, 8}), ids}, "e", {4, 8});
  const int32_t n = b.node1("Mul", {e, b.weight("model.norm.weight", {8})}, "n", {4, 8});
  b.output(b.node1("MatMul", {n, b.weight("onnx::MatMul_9", {8, 10})}, "logits", {4, 10}));
  return b.graph();
}

// The same decoder tied as an export without constant folding writes it (checked with torch 1.13 on a tied
// nn.Embedding / nn.Linear pair): the head reads the embedding's own initializer through a Transpose node.
// One initializer: the file proves the tie.
Graph tied_decoder() {
  GraphBuilder b;
  const int32_t ids = b.input("ids", {4}, DType::Int64);
  const int32_t table = b.weight("model.embed_tokens.weight", {10, 8});
  const int32_t e = b.node1("Gather", {table, ids}, "e", {4, 8});
  const int32_t n = b.node1("Mul", {e, b.weight("model.norm.weight", {8})}, "n", {4, 8});
  const int32_t t = b.node1("Transpose", {table}, "head_t", {8, 10}, {{"perm", testing::ints_attr({1, 0})}});
  b.output(b.node1("MatMul", {n, t}, "logits", {4, 10}));
  return b.graph();
}

// By hand, float32: embedding 10 x 8 x 4 = 320 B, norm 8 x 4 = 32 B, head 8 x 10 x 4 = 320 B
// (vocab x hidden x 4 bytes).
constexpr uint64_t kEmbedding = 10 * 8 * 4, kNorm = 8 * 4, kHead = 10 * 8 * 4;

TEST(TiedEmbeddingsAutoDroppedUntiedHead, InferenceCountsTheHeadByDefaultAndShapeDropsIt) {
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const CostModelResult counted = build_inference_program(untied_decoder(), o);
  EXPECT_EQ(resident_bytes(counted.program), kEmbedding + kNorm + kHead);  // 672
  bool noted = false;
  for (const std::string& note : counted.notes) noted |= note.find("--tied-embeddings shape") != std::string::npos;
  EXPECT_TRUE(noted);
  o.tied_embeddings_by_shape = true;  // --tied-embeddings shape: the user claims the tie
  EXPECT_EQ(resident_bytes(build_inference_program(untied_decoder(), o).program), kEmbedding + kNorm);  // 352
}

TEST(TiedEmbeddingsAutoDroppedUntiedHead, TrainingCountsTheHeadByDefaultAndShapeDropsIt) {
  TrainingRun o;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::Mse;
  const TrainingResult counted = build_training_program(untied_decoder(), o);
  EXPECT_EQ(counted.param_bytes, kEmbedding + kNorm + kHead);                  // 672
  EXPECT_EQ(counted.optimizer_state_bytes, 2 * (kEmbedding + kNorm + kHead));  // Adam: exp_avg, exp_avg_sq
  o.tied_embeddings_by_shape = true;
  const TrainingResult tied = build_training_program(untied_decoder(), o);
  EXPECT_EQ(tied.param_bytes, kEmbedding + kNorm);  // 352
  EXPECT_EQ(tied.optimizer_state_bytes, 2 * (kEmbedding + kNorm));
}

TEST(TiedEmbeddingsAutoDroppedUntiedHead, ProvenTieIsHeldOnceUnderAuto) {
  InferenceRun io;
  io.runtime = Runtime::PyTorch;
  // The Transpose is a view of the embedding in PyTorch: nothing but the two initializers is resident.
  EXPECT_EQ(resident_bytes(build_inference_program(tied_decoder(), io).program), kEmbedding + kNorm);  // 352
  TrainingRun o;
  o.loss = LossKind::Mse;
  EXPECT_EQ(build_training_program(tied_decoder(), o).param_bytes, kEmbedding + kNorm);
}

}  // namespace
}  // namespace memplan
