// Pipeline parallelism (--pp), 1F1B: the stages of a four-block graph, each stage's held activations and
// peak worked out by hand in the comments (cost_models/pipeline.cc).
#include <gtest/gtest.h>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::int_attr;

// x[4,8] -> 4 x (MatMul(layers.i.fc.w[8,8]) -> Relu) -> Gemm(head.w[2,8], head.b[2]) -> y[4,2]; every
// activation [4,8] fp32 = 128 bytes, each block weight 256 bytes.
Graph pp_blocks() {
  GraphBuilder b;
  int32_t h = b.input("x", {4, 8});
  for (int i = 0; i < 4; ++i) {
    const std::string n = std::to_string(i);
    h = b.node1("MatMul", {h, b.weight("layers." + n + ".fc.w", {8, 8})}, "h" + n, {4, 8});
    h = b.node1("Relu", {h}, "r" + n, {4, 8});
  }
  const int32_t y = b.node1("Gemm", {h, b.weight("head.w", {2, 8}), b.weight("head.b", {2})}, "y", {4, 2},
                            {{"transB", int_attr(1)}});
  b.output(y);
  return b.graph();
}

TrainingRun pipeline(int pp, int micro_batches = 0) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::CrossEntropy;
  o.pp = pp;
  o.micro_batches = micro_batches;
  return o;
}

// --pp 2, M = 2. Stage 0: layers.0-1 (ops MatMul, Relu, MatMul, Relu), sends r1; stage 1: layers.2-3 and
// the head, receives r1.
// Stage 0, one micro-batch: MatMul_0 saves x (W0's grad; x needs none), Relu saves its output r0, MatMul_2
// saves r0 (and W1, a parameter), Relu saves r1; r1 is sent. Live when its backward starts (the received
// grad of r1): x + r0 + r1 = 384 bytes. 1F1B: min(2 - 0, 2) = 2 micro-batches in flight, one resident
// block of 384 beside its own. Resident: weights 512 + Adam states 1024 + 384 = 1920. Live peak: the
// optimizer step, x 128 (its micro-batch of the batch the training loop holds to the step's end) + grads 512
// + foreach sqrt temporaries 512 = 1152 (the backward's largest is 768: x + r0 + grad h1 + grad r0 + grad W1).
// Stage 0's lower bound: 3072: the busiest stage.
// Stage 1: min(2 - 1, 2) = 1 in flight. When its backward starts (nll_loss's backward): the received r1
// (MatMul_4 saves it for W2's grad), r2, r3 = 384, y 32, targets 32, log_softmax 32, total_weight 4,
// loss 4: 488. Resident: weights 256 + 256 + 72 = 584, states 1168. Live peak, the optimizer step: grads
// 584 + temporaries 584 + y 32 + loss 4 + targets 32 (held with the batch; the received r1 is freed by its last
// reader, MatMul_4's backward) = 1236. Lower bound 1752 + 1236 = 2988.
TEST(Pipeline, OneFOneBStagesByHand) {
  const TrainingResult r = build_training_program(pp_blocks(), pipeline(2));
  ASSERT_EQ(r.pipeline_stages.size(), 2u);
  const PipelineStageFacts& s0 = r.pipeline_stages[0];
  const PipelineStageFacts& s1 = r.pipeline_stages[1];
  EXPECT_EQ(s0.first_unit, "layers.0");
  EXPECT_EQ(s0.last_unit, "layers.1");
  EXPECT_EQ(s1.first_unit, "layers.2");
  EXPECT_EQ(s0.in_flight_micro_batches, 2);
  EXPECT_EQ(s1.in_flight_micro_batches, 1);
  EXPECT_EQ(s0.saved_bytes_per_micro_batch, 384u);
  EXPECT_EQ(s1.saved_bytes_per_micro_batch, 488u);
  EXPECT_EQ(s0.param_bytes, 512u);
  EXPECT_EQ(s1.param_bytes, 584u);
  EXPECT_EQ(s0.peak_bytes, 3072u);
  EXPECT_EQ(s1.peak_bytes, 2988u);
  EXPECT_EQ(r.pipeline_busiest_stage, 0);
  EXPECT_EQ(r.param_bytes, 512u);  // the result is the busiest stage's program
  EXPECT_TRUE(r.program.buffers[buffer_named(r.program, "x")].live_at_end);
}

// One micro-batch (--micro-batches 1): nothing else in flight on stage 0, 3072 - 384 = 2688; stage 1 (2988) is
// now the busiest, and its program receives r1, freed after its last reader while the targets stay.
TEST(Pipeline, MicroBatchesBoundWhatIsInFlight) {
  const TrainingResult r = build_training_program(pp_blocks(), pipeline(2, 1));
  EXPECT_EQ(r.pipeline_stages[0].in_flight_micro_batches, 1);
  EXPECT_EQ(r.pipeline_stages[0].peak_bytes, 2688u);
  ASSERT_EQ(r.pipeline_busiest_stage, 1);
  const int32_t received = buffer_named(r.program, "p2p_recv:r1");
  ASSERT_GE(received, 0);
  EXPECT_FALSE(r.program.buffers[received].live_at_end);
  EXPECT_TRUE(r.program.buffers[buffer_named(r.program, "targets")].live_at_end);
}

std::string pp_message(const TrainingRun& o) {
  try {
    build_training_program(pp_blocks(), o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Pipeline, BadOptionsAreInputErrors) {
  EXPECT_NE(pp_message(pipeline(5)).find("--pp 5 needs at least 5 blocks"), std::string::npos) << pp_message(pipeline(5));
  TrainingRun o = pipeline(2);
  o.gpus = 2;
  o.shard = Sharding::Fsdp;
  // Combinations the option checks refuse (report/option_checks.cc) are preconditions here: a bug if they arrive.
  EXPECT_THROW(pp_message(o), InternalError);
  o = pipeline(1, 2);
  EXPECT_THROW(pp_message(o), InternalError);
}

}  // namespace
}  // namespace memplan
