// litgpt's chunked cross-entropy (--loss chunked-ce-tokens:K: the head and the loss in chunks of K positions, in the
// logits' type) on the tiny decoder tail of loss_test.cc; every expected number is worked out by hand below.
#include <gtest/gtest.h>

#include <string>

#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::decoder_head;
using testing::buffer_named;
using testing::peak_live_bytes;
using testing::bytes_of;

TrainingRun sgd_loss_tokens(int tokens) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;  // no states: the figures are the forward, loss and backward
  o.loss = LossKind::ChunkedCrossEntropyTokens;
  o.loss_chunks = tokens;
  return o;
}

// chunked-ce-tokens:2, fp32: the head's chunks hold positions [0, 2) and [2, 4); the loss reads 2 of the first and
// 1 of the last (logits[-1][..., :-1, :]): rows 2 x 2 = 4 (32 elements) and 2 x 1 = 2 (16). Live bytes (x and
// targets, the batch, live from the start to the end; the resident W1 + Wh apart):
//   MatMul h 320; head + logits 256 = 576;
//   mask: + bools 6 (2 x 3 labels) + non_masked_elems 8 + ones_like 8 + divisor 8 = 606, then 592 (the count and
//   the divisor kept: the count is a local until the return);
//   chunk 0: + its label copy ([2, 2] slice, not contiguous: 32) + log_softmax 128 + total_weight 4 + losses 16 = 772;
//   chunk 1: + the sliced chunk's reshape copy 64 + labels 16 + log_softmax 64 + total_weight 4 + losses 8 = 928,
//   then 864 (the copy freed);
//   cat and sum: + 24 + 4 = 892; the mean: 868 + loss 4 = 872, then 836 (sum, count, the losses' list freed).
// Backward: the mean's grad 4 + the sum's 4: 844, then 832; chunk 1 first: nll_loss's grad 64 (896, then 876:
// its labels and total_weight freed), log_softmax's grad 64 (940, then 812); chunk 0: 128 (940, then 900),
// 128 (1028, then 772 = x, targets, h, logits 576 + loss 4 + the chunk grads 64 + 128);
// SliceBackward0: the last chunk's whole grad [2, 2, 8] = 128 (900, then 836).
// The head once per chunk, last first: chunk 1 writes h's slice of grad (2 x 2 x 4 = 64) and Wh's first
// contribution 128: 1028, then 900; chunk 0: + 64 + 128 = 1092, the peak.
TEST(ChunkedCrossEntropyTokens, TwoChunksByHand) {
  const TrainingResult r = build_training_program(decoder_head(), sgd_loss_tokens(2));
  const Program& p = r.program;
  EXPECT_EQ(peak_live_bytes(p).bytes, 1092u);
  EXPECT_EQ(p.steps[peak_live_bytes(p).step].name, "backward:/MatMul_2:chunk0");
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk0"), 128u);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk1"), 64u);
  EXPECT_EQ(bytes_of(p, "logits:reshape:chunk1"), 64u);
  EXPECT_EQ(buffer_named(p, "logits:reshape:chunk0"), -1);
  EXPECT_EQ(bytes_of(p, "targets:chunk1"), 16u);
  EXPECT_EQ(bytes_of(p, "loss:cat"), 24u);
  EXPECT_EQ(bytes_of(p, "labels:not_ignored"), 6u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk1"), 64u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk1:whole"), 128u);
  EXPECT_EQ(bytes_of(p, "grad:h:chunk1"), 64u);
  EXPECT_EQ(r.grad_bytes, 64u + 128u);
}

// --precision bf16 (litgpt's bf16-true): no upcast anywhere. The logits are bf16 (128); chunk 0's log_softmax 4 rows
// x 8 x 2 = 64 and its grad 64; chunk 1's 2 x 8 x 2 = 32, its reshape copy 32, its whole grad [2, 2, 8] bf16 = 64;
// the per-chunk losses and their cat are bf16 (4 x 2 = 8; 6 x 2 = 12). Under amp-bf16 (bf16-mixed) autocast casts
// each chunk to float32 (cross_entropy on its float32 list): chunk 0's copy 4 x 8 x 4 = 128, log_softmax 128, its
// float32 grad 128 cast back to bf16 (64).
TEST(ChunkedCrossEntropyTokens, Bf16KeepsTheLogitsTypeAndAutocastUpcastsEachChunk) {
  TrainingRun o = sgd_loss_tokens(2);
  o.precision = Precision::Bf16;
  const Program p = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(bytes_of(p, "logits"), 128u);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk0"), 64u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk0"), 64u);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk1"), 32u);
  EXPECT_EQ(bytes_of(p, "logits:reshape:chunk1"), 32u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk1:whole"), 64u);
  EXPECT_EQ(bytes_of(p, "loss:chunk0"), 8u);
  EXPECT_EQ(bytes_of(p, "loss:cat"), 12u);
  EXPECT_EQ(buffer_named(p, "logits:autocast:chunk0"), -1);
  EXPECT_EQ(buffer_named(p, "grad:logits:float32:chunk0"), -1);
  o.precision = Precision::AmpBf16;
  const Program amp = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(bytes_of(amp, "logits"), 128u);
  EXPECT_EQ(bytes_of(amp, "logits:autocast:chunk0"), 128u);
  EXPECT_EQ(bytes_of(amp, "logits:log_softmax:chunk0"), 128u);
  EXPECT_EQ(bytes_of(amp, "grad:logits:float32:chunk0"), 128u);
  EXPECT_EQ(bytes_of(amp, "grad:logits:chunk0"), 64u);
}

// chunked-ce-tokens:3 on 4 positions: the head's chunks hold 3 and 1; the loss drops the last chunk's one position,
// so zip(logit_chunks, target_chunks) has one pair (targets[..., 1:] split by 3 is one chunk): no loss, no grad
// and no head backward for chunk 1. Chunk 0: 2 x 3 = 6 rows, log_softmax 6 x 8 x 4 = 192; h's slice of grad
// 2 x 3 x 4 x 4 = 96; no slice backward (its chunk is not the last). With K >= 4, one chunk: the head is the graph's
// one op, and the whole grad of the logits (256) is SliceBackward0's.
TEST(ChunkedCrossEntropyTokens, ALastChunkLeftWithoutPositionsHasNoLossAndOneChunkIsTheWholeHead) {
  const Program p = build_training_program(decoder_head(), sgd_loss_tokens(3)).program;
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk0"), 192u);
  EXPECT_EQ(buffer_named(p, "logits:log_softmax:chunk1"), -1);
  EXPECT_EQ(bytes_of(p, "grad:h:chunk0"), 96u);
  EXPECT_EQ(buffer_named(p, "grad:h:chunk1"), -1);
  EXPECT_EQ(buffer_named(p, "grad:logits:chunk0:whole"), -1);
  int head_chunks = 0;
  for (const Step& s : p.steps) head_chunks += s.name.rfind("backward:/MatMul_2:chunk", 0) == 0;
  EXPECT_EQ(head_chunks, 1);
  const Program one = build_training_program(decoder_head(), sgd_loss_tokens(128)).program;
  EXPECT_EQ(bytes_of(one, "logits:log_softmax:chunk0"), 192u);  // 2 x 3 rows
  EXPECT_EQ(bytes_of(one, "grad:logits:chunk0:whole"), 256u);
  EXPECT_EQ(buffer_named(one, "grad:h:chunk0"), -1);
}

TEST(ChunkedCrossEntropyTokens, AnOutputWithoutTwoPositionsIsAnInputError) {
  GraphBuilder b;
  const int32_t x = b.input("x", {8, 4});
  b.output(b.node1("MatMul", {x, b.weight("W", {4, 8})}, "scores", {8, 8}));
  try {
    build_training_program(b.graph(), sgd_loss_tokens(128));
    ADD_FAILURE() << "a 2-D output accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("chunked-ce-tokens:128"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'scores'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memplan
