// --checkpoint-impl: torch.utils.checkpoint's reentrant implementation against the non-reentrant one, with and
// without torch >= 2.1's early stop (torch/utils/checkpoint.py: CheckpointFunction; _checkpoint_without_reentrant_
// generator and _recomputation_hook), on two residual blocks whose recomputation is worked out by hand.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::GraphBuilder;
using testing::last_reader;
using testing::live_at_step;
using testing::step_named;

// Two blocks layers.0 and layers.1 (nodes under /layers.<N>/ as torch.onnx names them), float32, each:
//   a = h @ fc1 [4,8]x[8,16] -> [4,16] 256 B   MatMul saves its inputs (h, fc1)
//   r = Relu(a)                 [4,16] 256 B   Relu saves its output
//   e = r @ fc2 [16,8]       -> [4,8]  128 B   saves r and fc2: the block's last op that saves a tensor
//   h' = Add(e, h)              [4,8]  128 B   saves nothing; the block's output
// x [4,8] is the graph input; y = h'1 @ head [8,2] its output (the output seeds backward: no loss).
Graph residual_blocks() {
  GraphBuilder b;
  int32_t h = b.input("x", {4, 8});
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "layers." + std::to_string(layer), s = std::to_string(layer);
    const int32_t a = b.node1("MatMul", {h, b.weight(p + ".fc1.weight", {8, 16})}, "a" + s, {4, 16});
    const int32_t r = b.node1("Relu", {a}, "r" + s, {4, 16});
    const int32_t e = b.node1("MatMul", {r, b.weight(p + ".fc2.weight", {16, 8})}, "e" + s, {4, 8});
    h = b.node1("Add", {e, h}, "h" + s, {4, 8});
  }
  b.output(b.node1("MatMul", {h, b.weight("head.weight", {8, 2})}, "y", {4, 2}));
  Graph g = b.graph();
  const char* scopes[] = {"fc1/MatMul", "act/Relu", "fc2/MatMul", "add/Add"};
  for (size_t i = 0; i < 8; ++i) g.nodes[i].name = "/layers." + std::to_string(i / 4) + "/" + scopes[i % 4];
  g.nodes[8].name = "/head/MatMul";
  return g;
}

TrainingRun layers(bool reentrant, bool early_stop) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.checkpoint.mode = CheckpointMode::Layers;
  o.checkpoint.reentrant = reentrant;
  o.checkpoint.early_stop = early_stop;
  return o;
}

// Reentrant: CheckpointFunction.backward recomputes the whole block, then holds its recomputed output h'1 and the
// incoming grad until the block's backward ends (the checkpoint_end step reads both), and its input h0 (its
// ctx.saved_tensors and their detached copies are locals of that backward).
// Non-reentrant, torch 1.13 (no early stop): the whole block is recomputed, but only what its ops pack is kept; the
// recomputed h'1, packed by nobody, dies at once; the block's input h0 alone is held to its end (the frame's
// recompute_fn closes over the call's arguments).
// Non-reentrant with early stop (torch >= 2.1): the recomputation stops at the last pack, fc2's inputs, which are
// packed before its kernel is called: e1 (128 B) is never made and the Add never runs. fc2's backward still reads
// the recomputed r1. Non-reentrant, with or without early stop, recomputes at the first unpack, fc2's backward: the
// Add, which packs nothing, runs its backward before; reentrant recomputes before the block's last op, the Add.
TEST(CheckpointImpl, ReentrantHoldsNonReentrantStopsAtTheLastPack) {
  const Graph g = residual_blocks();
  const Program reentrant = build_training_program(g, layers(true, false)).program;
  const Program whole = build_training_program(g, layers(false, false)).program;
  const Program early = build_training_program(g, layers(false, true)).program;

  const int32_t end_r = step_named(reentrant, "checkpoint_end:/layers.1/fc1/MatMul");
  const int32_t end_w = step_named(whole, "checkpoint_end:/layers.1/fc1/MatMul");
  ASSERT_GE(end_r, 0);
  ASSERT_GE(end_w, 0);
  EXPECT_EQ(reentrant.steps[end_r].reads.size(), 3u);
  ASSERT_EQ(whole.steps[end_w].reads.size(), 1u);
  EXPECT_EQ(whole.steps[end_w].reads[0], buffer_named(whole, "h0"));
  for (const Program* p : {&reentrant, &whole}) EXPECT_EQ(last_reader(*p, buffer_named(*p, "h0")), p == &whole ? end_w : end_r);

  for (const Program* p : {&reentrant, &whole}) {
    EXPECT_GE(step_named(*p, "recompute:/layers.1/fc2/MatMul"), 0);
    EXPECT_GE(step_named(*p, "recompute:/layers.1/add/Add"), 0);
  }
  EXPECT_LT(step_named(early, "recompute:/layers.1/fc2/MatMul"), 0);
  EXPECT_LT(step_named(early, "recompute:/layers.1/add/Add"), 0);
  const int32_t stop = step_named(early, "recompute:early_stop:/layers.1/fc2/MatMul");
  ASSERT_GE(stop, 0);
  EXPECT_TRUE(early.steps[stop].writes.empty());
  const auto before = [](const Program& p, const std::string& a, const std::string& b) {
    const int32_t i = step_named(p, a), j = step_named(p, b);
    EXPECT_GE(i, 0) << a;
    EXPECT_GE(j, 0) << b;
    return i < j;
  };
  EXPECT_TRUE(before(reentrant, "recompute:/layers.1/fc1/MatMul", "backward:/layers.1/add/Add"));
  EXPECT_TRUE(before(whole, "backward:/layers.1/add/Add", "recompute:/layers.1/fc1/MatMul"));
  EXPECT_TRUE(before(early, "backward:/layers.1/add/Add", "recompute:/layers.1/fc1/MatMul"));
  // Up to the relu the three recompute the same; at fc2 the whole recomputation also makes e1.
  EXPECT_EQ(live_at_step(whole, "recompute:/layers.1/act/Relu"), live_at_step(early, "recompute:/layers.1/act/Relu"));
  EXPECT_EQ(live_at_step(whole, "recompute:/layers.1/fc2/MatMul") -
                live_at_step(early, "recompute:early_stop:/layers.1/fc2/MatMul"),
            128u);
}

}  // namespace
}  // namespace memplan
