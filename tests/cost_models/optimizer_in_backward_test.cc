// --optimizer-in-backward (torchtune's optimizer_in_bwd): each parameter's update runs right after the backward of
// the earliest op reading it, and its grad is freed there. Every figure by hand.
#include <gtest/gtest.h>

#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::int_attr;
using testing::peak_live_bytes;
using testing::resident_bytes;
using testing::step_named;

// x[4,8] -> Gemm(W1[16,8], b1[16]) -> h[4,16] -> Relu -> r[4,16] -> Gemm(W2[2,16], b2[2]) -> y[4,2], the MLP of
// training_test.cc: parameters W1 512 + b1 64 + W2 128 + b2 8 = 712 bytes.
Graph mlp() {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h = b.node1("Gemm", {x, b.weight("W1", {16, 8}), b.weight("b1", {16})}, "h", {4, 16}, {{"transB", int_attr(1)}});
  const int32_t r = b.node1("Relu", {h}, "r", {4, 16});
  const int32_t y = b.node1("Gemm", {r, b.weight("W2", {2, 16}), b.weight("b2", {2})}, "y", {4, 2}, {{"transB", int_attr(1)}});
  b.output(y);
  return b.graph();
}

TrainingRun adam_in_backward() {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;  // foreach: one sqrt temporary of the parameter's size per update
  o.loss = LossKind::CrossEntropy;
  o.optimizer_in_backward = true;
  return o;
}

// training_test.cc's AdamStepPeakByHand has the same steps up to Gemm2's backward (s6: 844 live, grads of W2 and b2
// made there). Then, with the update in backward:
//  optimizer:W2  x 128 + r 256 + y 32 + loss 4 + grad:r 256 + grad:W2 128 + its sqrt 128 + grad:b2 8 = 940
//  optimizer:b2  x + r + y + loss + grad:r + grad:b2 8 + its sqrt 8 = 692 (grad:W2 freed)
//  Relu backward x + r + y + loss + grad:r + grad:h 256 = 932
//  Gemm1 backward x + y + loss + grad:h + grad:W1 512 + grad:b1 64 = 996
//  optimizer:W1  y 32 + loss 4 + grad:W1 512 + its sqrt 512 + grad:b1 64 = 1124  <- the peak (1460 with the step after)
//  optimizer:b1  y + loss + grad:b1 + its sqrt 64 = 164
// No grad outlives its update; resident: parameters 712 + two Adam states 1424 = 2136, as before.
TEST(OptimizerInBackward, MlpPeakByHand) {
  const TrainingResult r = build_training_program(mlp(), adam_in_backward());
  const Program& p = r.program;
  EXPECT_EQ(resident_bytes(p), 2136u);
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1124u);
  EXPECT_EQ(p.steps[peak.step].name, "optimizer:W1");
  EXPECT_EQ(step_named(p, "optimizer:step"), -1);  // no step after backward
  EXPECT_LT(step_named(p, "optimizer:W2"), step_named(p, "backward:/Relu_1"));
  for (const char* g : {"grad:W1", "grad:b1", "grad:W2", "grad:b2"}) EXPECT_FALSE(p.buffers[buffer_named(p, g)].live_at_end) << g;
}

// The first iteration makes each parameter's states at its own update: W1's two 512-byte states appear at
// optimizer:W1 (after W2's and b2's 272), so that step holds y 32 + loss 4 + grad:W1 512 + grad:b1 64 + states of
// W2, b2 272 + W1's 1024 + sqrt 512 = 2420; the parameters (712, resident) are counted apart.
TEST(OptimizerInBackward, FirstIterationMakesStatesAtEachUpdate) {
  TrainingRun o = adam_in_backward();
  o.steady_state = false;
  const TrainingResult r = build_training_program(mlp(), o);
  const auto peak = peak_live_bytes(r.program);
  EXPECT_EQ(peak.bytes, 2420u);
  EXPECT_EQ(r.program.steps[peak.step].name, "optimizer:W1");
  EXPECT_EQ(r.optimizer_state_bytes, 1424u);
}

}  // namespace
}  // namespace memplan
