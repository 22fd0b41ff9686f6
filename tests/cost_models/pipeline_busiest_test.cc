// --pp: the busiest stage is the one that needs the most of its GPU on the runtime's allocator (as fit and check
// judge a budget), not the one with the most exact bytes. A two-stage case where the two disagree, every figure
// traced by hand through PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp, planner/alloc_pytorch.h).
#include <gtest/gtest.h>

#include <string>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::int_attr;

constexpr uint64_t MiB = 1048576;
constexpr uint64_t S = MiB + 512;  // 262,272 float32

// Blocks 0 and 1 work on 1 MiB tensors (262,144 float32): Mul(h, layers.i.mul.w) then five Relus. Block 2
// concatenates a 128-element parameter to the received 1 MiB tensor (S bytes, 512 more) and multiplies by its
// weight; block 3 multiplies once more: y.
Graph two_sizes() {
  GraphBuilder b;
  int32_t h = b.input("x", {262144});
  for (int i = 0; i < 2; ++i) {
    const std::string n = std::to_string(i);
    h = b.node1("Mul", {h, b.weight("layers." + n + ".mul.w", {262144})}, "a" + n, {262144});
    for (int j = 1; j <= 5; ++j) h = b.node1("Relu", {h}, "r" + n + "_" + std::to_string(j), {262144});
  }
  h = b.node1("Concat", {h, b.weight("layers.2.pad.w", {128})}, "c2", {262272}, {{"axis", int_attr(0)}});
  h = b.node1("Mul", {h, b.weight("layers.2.mul.w", {262272})}, "a2", {262272});
  b.output(b.node1("Mul", {h, b.weight("layers.3.mul.w", {262272})}, "y", {262272}));
  return b.graph();
}

// --pp 2 --micro-batches 1, PyTorch, SGD (no states, in place), no loss (backward from grad:y).
// Stage 0 (blocks 0, 1; every tensor 1 MiB): Mul saves x (its weight's grad; x needs none), each Relu its
// output; the Mul outputs die at the first Relu. Live besides the weights, the most at r1_5's backward: x, ten
// Relu outputs, the received grad of r1_5 and grad:r1_4, 13 MiB; with the two weights 15 MiB exact. Each 1 MiB
// request is small (<= kSmallSize) and served from 2 MiB segments (kSmallBuffer), two per segment, any free half
// taking the next: 15 blocks at once need 8 segments, 16 MiB.
// Stage 1 (blocks 2, 3): the received r1_5 (1 MiB) dies at the Concat (which saves nothing); c2, a2 and y are S
// each, saved by the Muls (y kept to the end). Live, the most at either Mul's backward: c2, a2, y, grad:y,
// grad:a2 and grad:layers.3.mul.w, then c2, y, grad:a2, grad:c2 and both weight grads: 6 S. Resident: the two
// Mul weights (2 S) and pad.w (512): 8 S + 512 = 8,393,216 exact, about half of stage 0's. But an S request is
// large (> 1 MiB) and under kMinLargeAlloc (10 MiB): it takes a 20 MiB segment (kLargeBuffer), and pad.w a
// 2 MiB small one (the received tensor and pad.w's grad share it); neither can be flushed while pad.w and the
// weights are in use: 22 MiB. Stage 1 needs more of its GPU: it is the busiest.
TEST(PipelineBusiest, TheStageThatNeedsMostOfItsGpuNotTheMostExactBytes) {
  TrainingRun o;
  o.runtime = Runtime::PyTorch;
  o.optimizer = Optimizer::Sgd;
  o.loss = LossKind::None;
  o.pp = 2;
  o.micro_batches = 1;
  const TrainingResult r = build_training_program(two_sizes(), o);
  ASSERT_EQ(r.pipeline_stages.size(), 2u);
  const PipelineStageFacts& s0 = r.pipeline_stages[0];
  const PipelineStageFacts& s1 = r.pipeline_stages[1];
  EXPECT_EQ(s0.peak_bytes, 15 * MiB);
  EXPECT_EQ(s1.peak_bytes, 8 * S + 512);
  EXPECT_EQ(s0.required_bytes, 16 * MiB);
  EXPECT_EQ(s1.required_bytes, 22 * MiB);
  EXPECT_EQ(r.pipeline_busiest_stage, 1);
  EXPECT_EQ(r.program.buffers.front().name, "layers.2.pad.w");  // the estimate is stage 1's program
}

}  // namespace
}  // namespace memplan
