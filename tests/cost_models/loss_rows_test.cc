// litgpt's chunked cross-entropy on a whole head (--loss chunked-ce-rows:N), as finetune/full.py's fit() runs it
// (litgpt v0.5.13): chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:]) with the head unchunked, so the loss
// reshapes the sliced logits to rows (a copy at batch > 1), splits them into chunks of N rows and, in backward,
// concatenates the chunk grads (SplitBackward0), then SliceBackward0 makes the whole grad; under Fabric
// (--outputs-to-default-dtype) on the float32 copy of the whole logits, its grad cast back to bf16 at the end. On the
// tiny decoder tail of loss_test.cc (graph_builder.h decoder_head), in bf16. Every expected number is worked out by
// hand below.
#include <gtest/gtest.h>

#include <string>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_of;
using testing::decoder_head;
using testing::last_reader;
using testing::live_at_step;
using testing::peak_live_bytes;
using testing::step_named;

TrainingRun rows_bf16(bool fabric) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;  // no states: the figures are the forward, loss and backward
  o.precision = Precision::Bf16;
  o.loss = LossKind::ChunkedCrossEntropyRows;
  o.loss_chunks = 4;
  o.outputs_to_default_dtype = fabric;
  return o;
}

// bf16 sizes: x [2,4,4] 64, h 64, the bf16 logits [2,4,8] 128, targets [2,4] int64 64; Fabric's float32 copy of the
// logits 2 x 4 x 8 x 4 = 256. The loss reads 2 x 3 = 6 rows of 8: chunked-ce-rows:4 makes chunks of 4 and 2 rows.
// Live bytes (x and targets, the batch, from the start to the end: 128):
//   h 192; the bf16 logits 320; convert_output: + the float32 copy 256 = 576, then 448 (the bf16 logits freed);
//   mask: + bools 6 + non_masked_elems 8 + ones_like 8 + divisor 8 = 478, then 464;
//   reshape (batch 2: the [2, 3, 8] slice is not contiguous): + the float32 rows 6 x 8 x 4 = 192 and the int64
//   targets' rows 6 x 8 = 48: 704;
//   chunk 0 (4 rows, float32: no autocast): log_softmax 4 x 8 x 4 = 128 + total_weight 4 + losses 4 x 4 = 16: 852;
//   chunk 1 (2 rows): 64 + 4 + 8: 928; cat 6 x 4 = 24 and sum 4: 956 (the peak), then 932 (cat freed);
//   the mean: + loss 4 = 936, then 708 (sum 4, count 8, the losses 24 and the rows 192 freed: the function's
//   locals, held until it returns).
// Backward: the mean's grad 4 + the sum's 4: 716, then 704 (grad:loss and the divisor freed); chunk 1's nll grad 64
// (768, then 764: its total_weight), log_softmax grad 64 (828, then 700); chunk 0's 128 (828, then 772: its
// total_weight, the targets' rows and the sum's grad freed), 128 (900, then 644); SplitBackward0's cat of the chunk
// grads, 6 x 8 x 4 = 192 (836, then 644); SliceBackward0's zeros [2, 4, 8] float32 256 (900, then 708);
// ToCopyBackward0's bf16 grad 128 (836, then 580).
TEST(ChunkedCrossEntropyRows, FabricsWholeCopyInChunksOfRowsByHand) {
  const Program p = build_training_program(decoder_head(), rows_bf16(true)).program;
  EXPECT_EQ(peak_live_bytes(p).bytes, 956u);
  EXPECT_EQ(p.steps[peak_live_bytes(p).step].name, "loss:chunked_ce_rows:cat_sum");
  EXPECT_EQ(live_at_step(p, "fabric:convert_output"), 576u);
  EXPECT_EQ(live_at_step(p, "loss:chunked_ce_rows:reshape"), 704u);
  EXPECT_EQ(live_at_step(p, "loss:chunked_ce_rows:chunk1"), 928u);
  EXPECT_EQ(live_at_step(p, "loss:chunked_ce_rows:mean"), 936u);
  EXPECT_EQ(live_at_step(p, "backward:log_softmax:chunk0"), 900u);
  EXPECT_EQ(live_at_step(p, "backward:split"), 836u);
  EXPECT_EQ(live_at_step(p, "backward:slice"), 900u);
  EXPECT_EQ(live_at_step(p, "backward:to_copy"), 836u);
  EXPECT_EQ(bytes_of(p, "logits:to_default_dtype"), 256u);
  EXPECT_EQ(bytes_of(p, "logits:reshape"), 192u);
  EXPECT_EQ(bytes_of(p, "targets:reshape"), 48u);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk0"), 128u);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk1"), 64u);
  EXPECT_EQ(buffer_named(p, "logits:log_softmax:chunk2"), -1);
  EXPECT_EQ(bytes_of(p, "grad:logits:rows"), 192u);
  EXPECT_EQ(bytes_of(p, "grad:logits:whole"), 256u);
  EXPECT_EQ(bytes_of(p, "grad:logits:bfloat16"), 128u);
  EXPECT_EQ(buffer_named(p, "logits:autocast:chunk0"), -1);
  // The copy lives to the end (fit() keeps `logits`); the targets' rows until chunk 0's nll_loss backward, the last
  // node that keeps them; the head's backward follows the cast back.
  EXPECT_TRUE(p.buffers[buffer_named(p, "logits:to_default_dtype")].live_at_end);
  EXPECT_FALSE(p.buffers[buffer_named(p, "logits")].live_at_end);
  EXPECT_EQ(last_reader(p, buffer_named(p, "targets:reshape")), step_named(p, "backward:nll_loss:chunk0"));
  EXPECT_EQ(last_reader(p, buffer_named(p, "logits:reshape")), step_named(p, "loss:chunked_ce_rows:mean"));
  EXPECT_EQ(step_named(p, "backward:split"), step_named(p, "backward:log_softmax:chunk0") + 1);
  EXPECT_EQ(step_named(p, "backward:slice"), step_named(p, "backward:split") + 1);
  EXPECT_EQ(step_named(p, "backward:to_copy"), step_named(p, "backward:slice") + 1);
  EXPECT_EQ(last_reader(p, buffer_named(p, "grad:logits:bfloat16")), step_named(p, "backward:to_copy") + 1);
}

// Without Fabric the loss reads the bf16 logits, which live through backward instead of the copy: rows 6 x 8 x 2 = 96
// and targets' rows 48. Live bytes: h 192; logits 320; mask 350, then 336; reshape 480; chunk 0: log_softmax 64 +
// total_weight 2 + losses 8: 554; chunk 1: 32 + 2 + 4: 592; cat 12 + sum 2: 606 (the peak), then 594; the mean 596,
// then 478. Backward: 482, then 472; chunk 1 504 (then 502), 534 (then 470); chunk 0 534 (then 482), 546 (then 418);
// the cat 96: 514 (then 418); the slice's bf16 zeros 128: 546 (then 450), the head's grad: no cast back.
TEST(ChunkedCrossEntropyRows, WithoutFabricTheLossReadsTheBf16Logits) {
  const Program p = build_training_program(decoder_head(), rows_bf16(false)).program;
  EXPECT_EQ(peak_live_bytes(p).bytes, 606u);
  EXPECT_EQ(live_at_step(p, "loss:chunked_ce_rows:chunk1"), 592u);
  EXPECT_EQ(live_at_step(p, "backward:log_softmax:chunk0"), 546u);
  EXPECT_EQ(live_at_step(p, "backward:split"), 514u);
  EXPECT_EQ(live_at_step(p, "backward:slice"), 546u);
  EXPECT_EQ(bytes_of(p, "logits:reshape"), 96u);
  EXPECT_EQ(bytes_of(p, "grad:logits:whole"), 128u);
  EXPECT_EQ(buffer_named(p, "logits:to_default_dtype"), -1);
  EXPECT_EQ(step_named(p, "backward:to_copy"), -1);
  EXPECT_TRUE(p.buffers[buffer_named(p, "logits")].live_at_end);
}

// At batch 1 the sliced logits' rows are the first T - 1 rows of the logits, contiguous: reshape is a view (no
// copy, no reshape step), the chunks read the logits (here Fabric's copy) and the targets themselves. 3 rows: one
// chunk; its grad still goes through SplitBackward0's cat (a new [3, 8] float32 grad, 96) and the slice (zeros
// [1, 4, 8] float32, 128).
TEST(ChunkedCrossEntropyRows, AtBatchOneTheRowsAreAViewOfTheLogits) {
  testing::GraphBuilder b;
  const int32_t x = b.input("x", {1, 4, 4});
  const int32_t h = b.node1("MatMul", {x, b.weight("W1", {4, 4})}, "h", {1, 4, 4});
  b.output(b.node1("MatMul", {h, b.weight("Wh", {4, 8})}, "logits", {1, 4, 8}));
  const Program p = build_training_program(b.graph(), rows_bf16(true)).program;
  EXPECT_EQ(step_named(p, "loss:chunked_ce_rows:reshape"), -1);
  EXPECT_EQ(buffer_named(p, "logits:reshape"), -1);
  EXPECT_EQ(buffer_named(p, "logits:log_softmax:chunk1"), -1);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk0"), 96u);
  EXPECT_EQ(bytes_of(p, "grad:logits:rows"), 96u);
  EXPECT_EQ(bytes_of(p, "grad:logits:whole"), 128u);
  const Step& chunk = p.steps[step_named(p, "loss:chunked_ce_rows:chunk0")];
  EXPECT_EQ(chunk.reads, (std::vector<int32_t>{buffer_named(p, "logits:to_default_dtype"), buffer_named(p, "targets")}));
}

// Under bf16-mixed without Fabric (amp-bf16) the head's output is autocast's bf16 and each chunk's cross_entropy is
// on autocast's float32 list: a float32 copy of the chunk's rows (4 x 8 x 4 = 128) that nothing keeps, log_softmax
// in float32, its grad cast back to bf16 (4 x 8 x 2 = 64) before the cat, which is bf16 (6 x 8 x 2 = 96).
TEST(ChunkedCrossEntropyRows, AutocastCopiesEachChunk) {
  TrainingRun o = rows_bf16(false);
  o.precision = Precision::AmpBf16;
  const Program p = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(bytes_of(p, "logits:autocast:chunk0"), 128u);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk0"), 128u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk0"), 64u);
  EXPECT_EQ(bytes_of(p, "grad:logits:rows"), 96u);
}

}  // namespace
}  // namespace memplan
