// Lightning Fabric's output conversion (--outputs-to-default-dtype) before litgpt's chunked loss (--loss
// chunked-ce-tokens:K) on the tiny decoder tail of loss_test.cc (graph_builder.h decoder_head), in bf16 (litgpt's
// bf16-true): _FabricModule.forward returns precision.convert_output(output), a float32 copy of each half chunk
// (lightning/fabric/wrappers.py, plugins/precision/half.py and utils.py _convert_fp_tensor, Lightning 2.6.1), which
// the loss reads and fit() keeps; _to_copy saves nothing, so backward casts each float32 chunk grad back to bf16
// (ToCopyBackward0) after every loss node. Every expected number is worked out by hand below.
#include <gtest/gtest.h>

#include <string>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::decoder_head;
using testing::last_reader;
using testing::peak_live_bytes;
using testing::step_named;
using testing::bytes_of;

TrainingRun fabric_bf16(bool convert) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;  // no states: the figures are the forward, loss and backward
  o.precision = Precision::Bf16;
  o.loss = LossKind::ChunkedCrossEntropyTokens;
  o.loss_chunks = 2;
  o.outputs_to_default_dtype = convert;
  return o;
}

// bf16 sizes: x [2,4,4] 64, h 64, the bf16 logits [2,4,8] 128, targets 8 x int64 = 64; the float32 copy of the
// logits 2 x 4 x 8 x 4 = 256. chunked-ce-tokens:2: chunk 0 holds positions [0, 2) (4 rows, 32 elements), chunk 1
// positions [2, 4) of which the loss reads 1 (2 rows, 16 elements). Live bytes (x and targets, the batch, from the
// start to the end: 128):
//   h 192; the head's bf16 logits 320; convert_output: + the float32 copy 256 = 576, then 448 (the bf16 logits
//   freed: the model's list is dropped once every copy exists);
//   mask: + bools 6 + non_masked_elems 8 + ones_like 8 + divisor 8 = 478, then 464 (bools and ones_like freed);
//   chunk 0, float32 (the copy is float32: no autocast, no cast): its [2, 2] targets copy 32 + log_softmax 4 x 8 x 4
//   = 128 + total_weight 4 + losses 4 x 4 = 16: 644;
//   chunk 1: + the sliced chunk's float32 reshape copy 16 x 4 = 64 + targets 16 + log_softmax 64 + total_weight 4 +
//   losses 8 = 800; then 736 (the reshape copy freed);
//   cat 6 x 4 = 24 and sum 4: 764, then 740; the mean: + loss 4 = 744, then 708 (sum, count and the losses freed).
// Backward: the mean's grad 4 + the sum's 4: 716, then 704 (grad:loss and the divisor freed); chunk 1: nll's grad 64
// (768, then 748), log_softmax's grad 64 (812, then 684); chunk 0: 128 (812, then 772: its targets, total_weight and
// the sum's grad freed), 128 (900, the peak: x 64, targets 64, h 64, the copy 256, loss 4, chunk 0's log_softmax 128,
// its grad 128 and its input grad 128, chunk 1's grad 64; then 644 = x, targets, h, the copy, loss and the float32
// chunk grads 128 + 64); SliceBackward0: chunk 1's whole float32 grad [2, 2, 8] 128 (772, then 708); ToCopyBackward0,
// last chunk first: chunk 1's bf16 grad 64 (772, then 644), chunk 0's 64 (708, then 580). The head per chunk then
// stays below: chunk 1 writes h's bf16 slice 32 and Wh's first part 64 (676, then 612), chunk 0 the same (708, then
// 644).
// Without the flag (Bf16KeepsTheLogitsType... in loss_tokens_test.cc) the loss reads the bf16 logits, which live
// through backward instead of the copy: log_softmax 64 and 32, grads in bf16, no cast back.
TEST(FabricOutputs, FloatCopiesOfTheChunksByHand) {
  const Program p = build_training_program(decoder_head(), fabric_bf16(true)).program;
  EXPECT_EQ(peak_live_bytes(p).bytes, 900u);
  EXPECT_EQ(p.steps[peak_live_bytes(p).step].name, "backward:log_softmax:chunk0");
  EXPECT_EQ(testing::live_at_step(p, "loss:chunked_ce_tokens:chunk1"), 800u);
  EXPECT_EQ(testing::live_at_step(p, "fabric:convert_output"), 576u);
  EXPECT_EQ(testing::live_at_step(p, "backward:to_copy:chunk1"), 772u);
  EXPECT_EQ(bytes_of(p, "logits"), 128u);
  EXPECT_EQ(bytes_of(p, "logits:to_default_dtype"), 256u);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk0"), 128u);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk1"), 64u);
  EXPECT_EQ(bytes_of(p, "logits:reshape:chunk1"), 64u);
  EXPECT_EQ(bytes_of(p, "loss:cat"), 24u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk0"), 128u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk1:whole"), 128u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk0:bfloat16"), 64u);
  EXPECT_EQ(bytes_of(p, "grad:logits:chunk1:bfloat16"), 64u);
  EXPECT_EQ(buffer_named(p, "logits:autocast:chunk0"), -1);
  // The copy directly after the head, and the bf16 logits' last reader; the copy lives to the end (fit() keeps it).
  const int32_t convert = step_named(p, "fabric:convert_output");
  ASSERT_GE(convert, 1);
  EXPECT_EQ(p.steps[convert - 1].name, "/MatMul_2");
  EXPECT_EQ(last_reader(p, buffer_named(p, "logits")), convert);
  EXPECT_FALSE(p.buffers[buffer_named(p, "logits")].live_at_end);
  EXPECT_TRUE(p.buffers[buffer_named(p, "logits:to_default_dtype")].live_at_end);
  // The casts back follow every loss node and the slice, last chunk first.
  const int32_t slice = step_named(p, "backward:slice");
  EXPECT_EQ(step_named(p, "backward:to_copy:chunk1"), slice + 1);
  EXPECT_EQ(step_named(p, "backward:to_copy:chunk0"), slice + 2);
  EXPECT_GT(slice, step_named(p, "backward:log_softmax:chunk0"));
}

// Without the flag the figures are the bf16 loss's: the copy, the float32 loss and the casts back are absent.
TEST(FabricOutputs, WithoutTheFlagTheLossReadsTheHalfChunks) {
  const Program p = build_training_program(decoder_head(), fabric_bf16(false)).program;
  EXPECT_EQ(buffer_named(p, "logits:to_default_dtype"), -1);
  EXPECT_EQ(step_named(p, "backward:to_copy:chunk0"), -1);
  EXPECT_EQ(bytes_of(p, "logits:log_softmax:chunk0"), 64u);
  EXPECT_TRUE(p.buffers[buffer_named(p, "logits")].live_at_end);
}

// --free-output: the loop holds no reference, so the copy dies at its last reader, chunk 1's loss step (the last
// that reads the logits list).
TEST(FabricOutputs, AFreedOutputsCopyDiesWithTheLoss) {
  TrainingRun o = fabric_bf16(true);
  o.free_output = true;
  const Program p = build_training_program(decoder_head(), o).program;
  const int32_t copy = buffer_named(p, "logits:to_default_dtype");
  ASSERT_GE(copy, 0);
  EXPECT_FALSE(p.buffers[copy].live_at_end);
  EXPECT_EQ(last_reader(p, copy), step_named(p, "loss:chunked_ce_tokens:chunk1"));
}

// Under amp-bf16 (bf16-mixed: MixedPrecision.convert_output) the head's autocast output is bf16 and copied the same
// way; the loss, after autocast has exited, reads float32 and makes no autocast copy (the flag-less amp run makes
// one per chunk: loss_tokens_test.cc), and its mean reads no autocast cache: sum, divisor, count and the two losses.
// On float32 outputs (fp32) nothing is copied.
TEST(FabricOutputs, AutocastOutputsAreCopiedAndFloatOnesAreNot) {
  TrainingRun o = fabric_bf16(true);
  o.precision = Precision::AmpBf16;
  const Program amp = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(bytes_of(amp, "logits:to_default_dtype"), 256u);
  EXPECT_EQ(buffer_named(amp, "logits:autocast:chunk0"), -1);
  EXPECT_EQ(bytes_of(amp, "logits:log_softmax:chunk0"), 128u);
  EXPECT_EQ(bytes_of(amp, "grad:logits:chunk0:bfloat16"), 64u);
  EXPECT_EQ(amp.steps[step_named(amp, "loss:chunked_ce_tokens:mean")].reads.size(), 5u);
  o.precision = Precision::Fp32;
  const Program fp32 = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(buffer_named(fp32, "logits:to_default_dtype"), -1);
  EXPECT_EQ(step_named(fp32, "fabric:convert_output"), -1);
}

}  // namespace
}  // namespace memplan
