// --tp with --pp, with and without --sequence-parallel: each stage's all-gathers and peak on a four-block graph,
// worked out by hand (cost_models/pipeline.cc, tensor_parallel.h). The regression: the sequence-parallel gathers
// were recorded per op position of the whole graph and not renumbered with a stage's ops, so the last stage
// gathered the embedding's output at its first row-parallel layer and nothing at its own column-parallel ones.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "cost_models/pipeline.h"
#include "cost_models/training_context.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::int_attr;

// ids[4] int64 -> Gather(embed.w[8,8]) -> e[4,8]; four blocks, Megatron's MLP without its activation:
//   h_i = MatMul(x_i, layers.i.fc1.w[8,8]), o_i = MatMul(h_i, layers.i.fc2.w[8,8]), x_{i+1} = Add(x_i, o_i)
// (x_0 = e); then y = Gemm(x_4, head.w[8,8], transB) [4,8]. The sequence is axis 0 (the axis before the last).
// Every float tensor whole is [4,8] float32 = 128 bytes, every weight 256 bytes.
Graph four_mlp_blocks() {
  GraphBuilder b;
  const int32_t ids = b.input("ids", {4}, DType::Int64);
  int32_t x = b.node1("Gather", {b.weight("embed.w", {8, 8}), ids}, "x0", {4, 8});
  for (int i = 0; i < 4; ++i) {
    const std::string n = std::to_string(i);
    const int32_t h = b.node1("MatMul", {x, b.weight("layers." + n + ".fc1.w", {8, 8})}, "h" + n, {4, 8});
    const int32_t o = b.node1("MatMul", {h, b.weight("layers." + n + ".fc2.w", {8, 8})}, "o" + n, {4, 8});
    x = b.node1("Add", {x, o}, "x" + std::to_string(i + 1), {4, 8});
  }
  b.output(b.node1("Gemm", {x, b.weight("head.w", {8, 8})}, "y", {4, 8}, {{"transB", int_attr(1)}}));
  return b.graph();
}

TrainingRun tp2(bool sequence_parallel, int pp) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;  // no cuBLAS workspaces
  o.optimizer = Optimizer::Sgd;  // no states, updates in place
  o.loss = LossKind::None;       // backward seeded with grad:y
  o.tp = 2;
  o.sequence_parallel = sequence_parallel;
  o.pp = pp;
  if (pp > 1) o.micro_batches = 1;  // nothing else in flight
  return o;
}

// The all-gathered buffers of a program, in the order they are made.
std::vector<std::string> gathers(const Program& p) {
  std::vector<std::string> out;
  for (const Buffer& b : p.buffers) {
    const std::string& n = b.name;
    const bool gather = n.size() > 11 && n.compare(n.size() - 11, 11, ":all_gather") == 0;
    const bool full_grad = n.size() > 5 && n.compare(n.size() - 5, 5, ":full") == 0;
    if (gather || full_grad) out.push_back(n);
  }
  return out;
}

// The split, --tp 2 (tensor_parallel.h): fc1 column-parallel (the weight split on its output features: 128
// bytes; h_i split on its last axis: [4,4] = 64 bytes), fc2 row-parallel (128 bytes; o_i all-reduced, 128, or
// with sequence parallelism reduce-scattered along the sequence, [2,8] = 64), the embedding vocab-parallel (4
// rows, 128; its output like o_i), the head column-parallel (128; y [4,4] = 64). The residual x_i is as o_i.
// Stages (--pp 2): stage 0 = Gather and blocks 0, 1 (sends x2); stage 1 = blocks 2, 3 and the head (receives x2).
// Resident: stage 0 holds embed.w and four block weights, 5 x 128 = 640; stage 1 four block weights and the
// head's, 640.
//
// With sequence parallelism each fc1 and the head all-gather their sequence-split input into a whole [4,8]
// (128, a transient of the op's step) in forward, and in backward again with the whole input grad (2 x 128).
// Stage 1, live bytes per step (x2 is the received p2p_recv:x2, 64; every x, o, h 64; y and grad:y 64):
//   forward: Ma2 x2+h2+gather = 256, Mb2 192, Add2 256, Ma3 x2+h2+x3+h3+gather = 384, Mb3 320, Add3 384,
//   Gemm x2+h2+x3+h3+x4+y+gather = 512, then the seed grad:y: 448.
//   backward: Gemm x2+h2+x3+h3+x4 320 + y + grad:y + grad:x4 64 + grad:head.w 128 + 2 x 128 = 896;
//   Add3 passes grad:x4 on to x3 and o3; fc2_3 reads h3, makes grad:h3 64 and grad:fc2_3.w 128;
//   fc1_3: x2+h2+x3 192 + y 64 + grad:head.w 128 + grad:fc2_3.w 128 + grad:x4 64 + grad:h3 64 + its input grad
//   64 (added in place into grad:x4 after) + grad:fc1_3.w 128 + 2 x 128 = 1088;
//   Add2 passes grad:x4 on to x2 and o2; fc2_2 + grad:h2 64 + grad:fc2_2.w 128;
//   fc1_2 (h2 freed after fc2_2's backward): x2 64 + y 64 + 3 weight grads 384 + grad:head.w 128 + grad:x4 64
//   + grad:h2 64 + grad:x2 64 + grad:fc1_2.w 128 + 2 x 128 = 1216, the peak: 1216 + 640 = 1856.
// Stage 0 (ids 32, live from the start; e = x0 64):
//   forward: Gather 96, Ma0 ids+x0+h0+gather = 288, Mb0 224, Add0 288, Ma1 ids+x0+h0+x1+h1+gather = 416, Mb1
//   352, Add1 416; the send frees x2.
//   backward from p2p_recv_grad:x2 (64): Add1 passes it on to x1 and o1; fc2_1 544; fc1_1 ids+x0+h0+x1 224 +
//   recv_grad 64 + grad:h1 64 + grad:fc2_1.w 128 + grad:x1 64 + grad:fc1_1.w 128 + 2 x 128 = 928; Add0 480;
//   fc2_0 672; fc1_0 (h0 freed) ids+x0 96 + recv_grad 64 + 3 weight grads 384 + grad:h0 64 + grad:x0 64 +
//   2 x 128 = 928 + its weight grad 128 = 1056, the peak: 1056 + 640 = 1696; Gather's backward 736.
// Stage 1 is the busiest.
TEST(PipelineTensorParallel, SequenceParallelGathersMoveWithTheirStage) {
  const Graph g = four_mlp_blocks();
  const TrainingContext c = make_training_context(g, tp2(true, 2));
  const std::vector<PipelineStage> stages = build_pipeline_stages(c);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(gathers(stages[0].result.program),
            (std::vector<std::string>{"x0:all_gather", "x1:all_gather", "x1:all_gather", "grad:x1:full",
                                      "x0:all_gather", "grad:x0:full"}));
  const std::vector<std::string> last = {"x2:all_gather", "x3:all_gather", "x4:all_gather", "x4:all_gather",
                                         "grad:x4:full",  "x3:all_gather", "grad:x3:full",  "x2:all_gather",
                                         "grad:x2:full"};
  EXPECT_EQ(gathers(stages[1].result.program), last);
  EXPECT_EQ(stages[0].facts.peak_bytes, 1696u);
  EXPECT_EQ(stages[1].facts.peak_bytes, 1856u);
  const TrainingResult r = build_training_program(g, tp2(true, 2));
  EXPECT_EQ(r.pipeline_busiest_stage, 1);

  // Without --pp the same blocks gather the same tensors, around stage 0's.
  const std::vector<std::string> whole = gathers(build_training_program(g, tp2(true, 1)).program);
  EXPECT_EQ(whole, (std::vector<std::string>{"x0:all_gather", "x1:all_gather", "x2:all_gather", "x3:all_gather",
                                             "x4:all_gather", "x4:all_gather", "grad:x4:full", "x3:all_gather",
                                             "grad:x3:full", "x2:all_gather", "grad:x2:full", "x1:all_gather",
                                             "grad:x1:full", "x0:all_gather", "grad:x0:full"}));
}

// Without sequence parallelism nothing is gathered; o_i, x_i and the received x2 are whole (128).
// Stage 0: forward Gather ids+x0 160, Ma0 224, Mb0 352, Add0 480, Ma1 (o0 freed) 416, Mb1 544, Add1 672;
// backward from p2p_recv_grad:x2 (128): fc2_1 544 + grad:h1 64 + grad:fc2_1.w 128 = 736; fc1_1 ids+x0+h0+x1 352
// + recv_grad 128 + grad:h1 64 + grad:fc2_1.w 128 + grad:x1 128 + grad:fc1_1.w 128 = 928; fc1_0 ids+x0 160 +
// recv_grad 128 + 3 weight grads 384 + grad:h0 64 + grad:x0 128 + grad:fc1_0.w 128 = 992, the peak: 1632.
// Stage 1: forward up to Add3 x2+h2+x3+h3+o3+x4 = 640; backward: Gemm 640 + grad:x4 128 + grad:head.w 128 =
// 896; fc1_3 x2+h2+x3 320 + y 64 + grad:head.w 128 + grad:fc2_3.w 128 + grad:x4 128 + grad:h3 64 + grad:x3
// 128 + grad:fc1_3.w 128 = 1088; fc1_2 x2 128 + y 64 + 3 weight grads 384 + grad:head.w 128 + grad:x4 128 +
// grad:h2 64 + grad:x2 128 + grad:fc1_2.w 128 = 1152, the peak: 1152 + 640 = 1792.
TEST(PipelineTensorParallel, StagesWithoutSequenceParallelism) {
  const Graph g = four_mlp_blocks();
  const std::vector<PipelineStage> stages = build_pipeline_stages(make_training_context(g, tp2(false, 2)));
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_TRUE(gathers(stages[0].result.program).empty());
  EXPECT_TRUE(gathers(stages[1].result.program).empty());
  EXPECT_EQ(stages[0].facts.peak_bytes, 1632u);
  EXPECT_EQ(stages[1].facts.peak_bytes, 1792u);
}

}  // namespace
}  // namespace memplan
