// torchtune's chunked cross-entropy (--loss chunked-ce:N) and Liger's fused linear cross-entropy
// (--loss fused-linear-ce) on a tiny decoder tail; every expected number is worked out by hand in the comments.
#include <gtest/gtest.h>

#include <algorithm>
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
using testing::resident_bytes;

// SGD without momentum: no states, the update in place, so the figures below are the forward, loss and backward.
TrainingRun sgd(LossKind loss, int chunks = 0) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;
  o.loss = loss;
  o.loss_chunks = chunks;
  return o;
}

std::string peak_step(const Program& p) { return p.steps[peak_live_bytes(p).step].name; }

// Plain cross-entropy. Live bytes (x and targets, the batch, live from the start to the end; the resident W1 + Wh
// = 192 apart):
//   MatMul h: x 128 + targets 64 + h 128 = 320; head: + logits 256 = 576;
//   loss: + log_softmax 256 + total_weight 4 + loss 4 = 840;
//   nll_loss backward: + grad:loss 4 + its grad of log_softmax 256 = 1100 (total_weight read last);
//   log_softmax backward: x 128 + targets 64 + h 128 + logits 256 + log_softmax 256 + loss 4 + grad 256
//     + grad:logits 256 = 1348;
//   head backward: x + targets + h + logits + loss + grad:logits + grad:h 128 + grad:Wh 128 = 1092.
// The peak is 1348, at the log_softmax backward.
TEST(ChunkedCrossEntropy, OneChunkIsPlainCrossEntropy) {
  const Program ce = build_training_program(decoder_head(), sgd(LossKind::CrossEntropy)).program;
  EXPECT_EQ(resident_bytes(ce), 192u);
  EXPECT_EQ(peak_live_bytes(ce).bytes, 1348u);
  EXPECT_EQ(peak_step(ce), "backward:log_softmax");
  // chunked-ce:1: the labels' mask (8 bools) and its int64 count come first (592 live), then one chunk: on fp32
  // logits .float() is the tensor itself and the one label chunk a view, so the chunk keeps its log_softmax (256)
  // and total_weight as cross_entropy does; the count (8) lives until the mean's backward. At the log_softmax
  // backward the count is gone: the same 1348.
  const Program one = build_training_program(decoder_head(), sgd(LossKind::ChunkedCrossEntropy, 1)).program;
  EXPECT_EQ(resident_bytes(one), 192u);
  EXPECT_EQ(peak_live_bytes(one).bytes, 1348u);
  EXPECT_EQ(peak_step(one), "backward:log_softmax:chunk0");
  EXPECT_EQ(buffer_named(one, "logits:float32:chunk0"), -1);
  EXPECT_EQ(buffer_named(one, "targets:chunk0"), -1);
}

// chunked-ce:4: one sequence position a chunk, 2 rows x 8 = 16 elements: log_softmax 64 bytes; a [2, 1] label
// slice is not contiguous, so reshape(-1) copies it: 16 bytes of int64, saved by nll_loss; total_weight 4.
// With x, h, logits (512) and targets 64 (held with the batch to the step's end; the label copies are what the
// chunks' losses keep):
//   chunks 0..3: 584 (with the count 8) + 84 per finished chunk + the running sum 4 + this chunk's 92 (copy 16,
//   log_softmax 64, total_weight, its loss, the new sum): the fourth, 584 + 252 + 4 + 92 = 932;
//   the mean's backward: 584 + 336 + loss 4 + grad:loss 4 + its grad via the sums 4 = 932;
//   last chunk first (x, h, logits and targets 576): nll_loss backward 576 + 336 + 8 + grad of log_softmax 64
//   = 984, log_softmax backward 576 + 252 + log_softmax 64 + 8 + 64 + grad of the chunk 64 = 1028; each earlier
//   chunk frees 84 and adds a chunk grad of 64: 1008, 988, 964.
// Then the head once per chunk, last first (TransformerDecoder.chunked_output), from x 128 + targets 64 + h 128 +
// logits 256 + loss 4 + the chunk grads 256 = 836: chunk 3 reads its grad and makes h's slice of grad (2 x 1 x 4
// fp32 = 32) and Wh's first contribution (128): 996; chunk 2: 836 - 64 + 32 + 128 + 32 + 128 = 1092; its
// contribution is added out of place (F.linear's weight.t() makes the kept one a view): sum, contribution and new
// sum together, 836 - 128 + 64 + 3 x 128 = 1156; chunk 1: 1060, its sum 1124; chunk 0: 1028, its sum 964 (h read
// last by chunk 0); SplitBackward cats the four slices into grad:h (128): x + targets + logits + loss + 128 + 128
// + Wh's grad 128 = 836.
// The peak is 1156, at chunk 2's weight-grad sum, 192 under plain cross-entropy's (the full log_softmax and its
// grad never coexist; the per-chunk head's weight-grad sums give back 64 of the 256).
TEST(ChunkedCrossEntropy, FourChunksByHand) {
  const TrainingResult r = build_training_program(decoder_head(), sgd(LossKind::ChunkedCrossEntropy, 4));
  const Program& p = r.program;
  EXPECT_EQ(peak_live_bytes(p).bytes, 1156u);
  EXPECT_EQ(peak_step(p), "backward:/MatMul_2:accumulate:chunk2");
  EXPECT_EQ(p.buffers[buffer_named(p, "logits:log_softmax:chunk3")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "targets:chunk3")].bytes, 16u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:logits:chunk0")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:logits:chunk3")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "labels:not_ignored")].bytes, 8u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:h:chunk3")].bytes, 32u);
  // The last sum is Wh's .grad, kept to the end; the step's grads are W1's 64 and Wh's 128.
  EXPECT_TRUE(p.buffers[buffer_named(p, "grad:Wh:chunk0")].live_at_end);
  EXPECT_EQ(r.grad_bytes, 64u + 128u);
}

// Under autocast (amp-bf16) the head's matmuls run in bf16 on the cached bf16 copy of Wh: each chunk's weight-grad
// contribution is bf16 [8, 4] = 64 bytes, summed (out of place: a view) in bf16 where they meet, the cached cast's
// _to_copy_backward, which makes the one float32 grad of Wh (128 bytes) after the last chunk. h is the first
// MatMul's output, bf16 under autocast, so each chunk's slice of its grad is bf16 (2 x 1 x 4 = 16 bytes), no cast.
TEST(ChunkedCrossEntropy, AutocastSumsTheHeadWeightGradInTheLowTypeAndCastsItOnce) {
  TrainingRun o = sgd(LossKind::ChunkedCrossEntropy, 4);
  o.precision = Precision::AmpBf16;
  const Program p = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:Wh:autocast")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:Wh:autocast:partial:chunk2")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:Wh:autocast:sum:chunk0")].bytes, 64u);
  const int32_t grad = buffer_named(p, "grad:Wh");
  EXPECT_EQ(p.buffers[grad].bytes, 128u);
  EXPECT_TRUE(p.buffers[grad].live_at_end);
  int writers = 0;
  for (const Step& s : p.steps) writers += static_cast<int>(std::count(s.writes.begin(), s.writes.end(), grad));
  EXPECT_EQ(writers, 1);
  EXPECT_EQ(buffer_named(p, "grad:h:autocast:chunk3"), -1);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:h:chunk3")].bytes, 16u);
}

// --precision bf16 (model.half()): the logits are bf16 (128 bytes), which plain cross-entropy log_softmaxes in bf16
// (128 bytes); torchtune's loss upcasts each chunk: a fp32 copy (16 elements, 64 bytes) that nothing saves, a fp32
// log_softmax (64), and in backward a fp32 grad (64) cast back to bf16 (32).
TEST(ChunkedCrossEntropy, HalfLogitsAreUpcastPerChunkAndTheirGradsCastBack) {
  TrainingRun o = sgd(LossKind::ChunkedCrossEntropy, 4);
  o.precision = Precision::Bf16;
  const Program p = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(p.buffers[buffer_named(p, "logits")].bytes, 128u);
  EXPECT_EQ(p.buffers[buffer_named(p, "logits:float32:chunk1")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "logits:log_softmax:chunk1")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:logits:float32:chunk1")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:logits:chunk1")].bytes, 32u);
  // The fp32 copy is read by nothing after its own step: only log_softmax's result is kept.
  const int32_t copy = buffer_named(p, "logits:float32:chunk1");
  for (const Step& s : p.steps)
    for (int32_t r : s.reads) EXPECT_NE(r, copy) << s.name;
  TrainingRun plain = sgd(LossKind::CrossEntropy);
  plain.precision = Precision::Bf16;
  const Program ce = build_training_program(decoder_head(), plain).program;
  EXPECT_EQ(ce.buffers[buffer_named(ce, "logits:log_softmax")].bytes, 128u);
}

TEST(ChunkedCrossEntropy, MoreChunksThanPositionsOrNoSequenceAxisIsAnInputError) {
  try {
    build_training_program(decoder_head(), sgd(LossKind::ChunkedCrossEntropy, 5));
    ADD_FAILURE() << "5 chunks of 4 positions accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'logits'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("from 1 to 4"), std::string::npos) << e.what();
  }
  GraphBuilder b;
  const int32_t x = b.input("x", {8, 4});
  b.output(b.node1("MatMul", {x, b.weight("W", {4, 8})}, "scores", {8, 8}));
  EXPECT_THROW(build_training_program(b.graph(), sgd(LossKind::ChunkedCrossEntropy, 2)), InputError);
}

// fused-linear-ce, fp32: BT 8 rows of H 4, V 8. Liger's chunk: inc_factor = cdiv(8, 4) = 2, chunk_size =
// next_power_of_2(cdiv(8, 2)) = 4 rows. The head's MatMul never runs: no logits, h not saved by it.
//   MatMul h: x 128 + targets 64 + h 128 = 320;
//   init: + grad_input 128 + grad_weight 128 + loss_1d (8 fp32) 32 + target mask 8 = 616;
//   one chunk's logits (4 x 8 fp32 = 128; the CE kernel writes their grad over them): 744 (targets, the batch,
//   held to the end);
//   grad_weight += mm(grad_logits^T, input_chunk).float(): fp32 grad_logits take Liger's legacy path, a [V, H]
//   product (128): x + targets + h + grad_input + grad_weight + loss_1d + mask + chunk + product = 872;
//   sum: x + targets + grad_input + grad_weight + loss_1d + mask + loss 4 = 492 (h read last by the chunk steps).
//   backward: grad_input becomes h's grad, grad_weight is stolen as Wh's .grad: x + targets + both + loss
//   + grad:loss = 456.
// The peak is 872, at the weight grad's accumulation; Wh's grad is the fused one, 128 bytes, kept to the end.
TEST(FusedLinearCrossEntropy, Fp32ByHand) {
  const TrainingResult r = build_training_program(decoder_head(), sgd(LossKind::FusedLinearCrossEntropy));
  const Program& p = r.program;
  EXPECT_EQ(resident_bytes(p), 192u);
  EXPECT_EQ(peak_live_bytes(p).bytes, 872u);
  EXPECT_EQ(peak_step(p), "loss:fused_linear_ce:weight_grad");
  EXPECT_EQ(buffer_named(p, "logits"), -1);
  EXPECT_EQ(p.buffers[buffer_named(p, "logits:fused_chunk")].bytes, 128u);
  const int32_t gw = buffer_named(p, "grad:Wh:fused");
  EXPECT_EQ(p.buffers[gw].bytes, 128u);
  EXPECT_TRUE(p.buffers[gw].live_at_end);
  EXPECT_EQ(buffer_named(p, "grad:Wh"), -1);  // no second grad of the head weight
  EXPECT_EQ(r.grad_bytes, 64u + 128u);
}

// --precision bf16 on sm90: everything halves (x, h, grad_input, grad_weight 64; one chunk of logits 64) except
// loss_1d (fp32, 32) and the mask (8); bf16 grad_logits on sm80+ accumulate into grad_weight by addmm in place,
// so the weight-grad step adds nothing:
//   h: x 64 + targets 64 + h 64 = 192; init: + 64 + 64 + 32 + 8 = 360; chunk: + 64 = 424;
//   weight grad: the same 424 (the chunk's logits give way to nothing the in-place addmm makes).
// The peak is 424, first reached at the chunk's logits.
TEST(FusedLinearCrossEntropy, HalfOnSm90AccumulatesTheWeightGradInPlace) {
  TrainingRun o = sgd(LossKind::FusedLinearCrossEntropy);
  o.precision = Precision::Bf16;
  const Program p = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(peak_live_bytes(p).bytes, 424u);
  EXPECT_EQ(peak_step(p), "loss:fused_linear_ce:chunk_logits");
  EXPECT_EQ(buffer_named(p, "Wh:fused_grad_chunk"), -1);
  // On sm75 the legacy path: a bf16 [V, H] product (64) and its fp32 copy (128) at the weight grad: 424 + 192 = 616.
  o.cuda_arch_major = 7;
  const Program old = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(peak_live_bytes(old).bytes, 616u);
  EXPECT_EQ(peak_step(old), "loss:fused_linear_ce:weight_grad");
}

TEST(FusedLinearCrossEntropy, AnOutputNotMadeByTheHeadMatMulIsAnInputError) {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 4, 4});
  const int32_t y = b.node1("MatMul", {x, b.weight("W", {4, 8})}, "y", {2, 4, 8});
  b.output(b.node1("Relu", {y}, "scores", {2, 4, 8}));
  try {
    build_training_program(b.graph(), sgd(LossKind::FusedLinearCrossEntropy));
    ADD_FAILURE() << "a Relu output accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'scores'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Relu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memplan
