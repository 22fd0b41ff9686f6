// Pass 4, the pipeline partition (cost_models/stage_graph.h): each stage of --pp is a graph of its own, its ids
// dense, the activations it receives its inputs and those it sends its outputs, with a map back to the whole
// graph's ids; every per-tensor, per-node and per-op fact of the context is carried to those ids. The expected
// graphs are read off the model below by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cost_models/pipeline.h"
#include "cost_models/stage_graph.h"
#include "cost_models/training_context.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::int_attr;

// ids[4] int64 -> Gather(embed.w[8,8]) -> x0[4,8]; four blocks h_i = MatMul(x_i, layers.i.fc1.w),
// o_i = MatMul(h_i, layers.i.fc2.w), x_{i+1} = Add(x_i, o_i); then, with `reshape`, s = Shape(x1) (host shape
// arithmetic on a stage-0 tensor) and x4 = Reshape(x4, s) before the head y = Gemm(x4, head.w, transB).
Graph four_blocks(bool reshape) {
  GraphBuilder b;
  const int32_t ids = b.input("ids", {4}, DType::Int64);
  int32_t x = b.node1("Gather", {b.weight("embed.w", {8, 8}), ids}, "x0", {4, 8});
  int32_t x1 = -1;
  for (int i = 0; i < 4; ++i) {
    const std::string n = std::to_string(i);
    const int32_t h = b.node1("MatMul", {x, b.weight("layers." + n + ".fc1.w", {8, 8})}, "h" + n, {4, 8});
    const int32_t o = b.node1("MatMul", {h, b.weight("layers." + n + ".fc2.w", {8, 8})}, "o" + n, {4, 8});
    x = b.node1("Add", {x, o}, "x" + std::to_string(i + 1), {4, 8});
    if (i == 0) x1 = x;
  }
  if (reshape) {
    const int32_t s = b.node("Shape", {x1}, {{"s", {2}}}, {}, DType::Int64);
    x = b.node1("Reshape", {x, s}, "r", {4, 8});
  }
  b.output(b.node1("Gemm", {x, b.weight("head.w", {8, 8})}, "y", {4, 8}, {{"transB", int_attr(1)}}));
  return b.graph();
}

TrainingRun two_stages(int tp, bool sequence_parallel) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;
  o.loss = LossKind::None;
  o.tp = tp;
  o.sequence_parallel = sequence_parallel;
  o.pp = 2;
  o.micro_batches = 1;
  return o;
}

std::vector<std::string> names(const Graph& g, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t t : ids) out.push_back(g.tensors[t].name);
  return out;
}

std::vector<std::string> all_tensor_names(const Graph& g) {
  std::vector<std::string> out;
  for (const Tensor& t : g.tensors) out.push_back(t.name);
  return out;
}

std::vector<std::string> node_ops(const Graph& g) {
  std::vector<std::string> out;
  for (const Node& n : g.nodes) out.push_back(n.op_type);
  return out;
}

// Stage 0 runs the Gather and blocks 0 and 1 and sends x2; stage 1 receives x2 and runs blocks 2 and 3, the
// Reshape and the head. The Shape of x1 runs on no GPU (its output is a shape value): it stays with x1, in stage
// 0, so that x1 keeps its three readers there (fc1_1, Add1, Shape); stage 1 reads its result s as a host value,
// a tensor with no producer that is not an input.
TEST(PipelineStageGraph, EachStageIsAGraphWithDenseIdsAndItsBoundaryAsInputsAndOutputs) {
  const Graph g = four_blocks(/*reshape=*/true);
  const std::vector<PipelineStage> stages = build_pipeline_stages(make_training_context(g, two_stages(1, false)));
  ASSERT_EQ(stages.size(), 2u);

  const StageGraph& s0 = stages[0].graph;
  const Graph& g0 = s0.graph;
  EXPECT_EQ(all_tensor_names(g0),
            (std::vector<std::string>{"ids", "embed.w", "x0", "layers.0.fc1.w", "h0", "layers.0.fc2.w", "o0", "x1",
                                      "layers.1.fc1.w", "h1", "layers.1.fc2.w", "o1", "x2", "s"}));
  EXPECT_EQ(node_ops(g0), (std::vector<std::string>{"Gather", "MatMul", "MatMul", "Add", "MatMul", "MatMul", "Add",
                                                    "Shape"}));
  EXPECT_EQ(names(g0, g0.inputs), (std::vector<std::string>{"ids"}));
  EXPECT_EQ(names(g0, g0.outputs), (std::vector<std::string>{"x2"}));
  EXPECT_EQ(names(g0, s0.sent), (std::vector<std::string>{"x2"}));
  EXPECT_TRUE(s0.received.empty());
  EXPECT_EQ(g0.tensors[12].kind, TensorKind::Output);
  EXPECT_EQ(names(g0, g0.initializers),
            (std::vector<std::string>{"embed.w", "layers.0.fc1.w", "layers.0.fc2.w", "layers.1.fc1.w",
                                      "layers.1.fc2.w"}));
  // x1 (stage id 7) is read by fc1_1 (node 4), Add1 (node 6) and the Shape (node 7).
  EXPECT_EQ(g0.tensors[7].consumers, (std::vector<int32_t>{4, 6, 7}));
  EXPECT_EQ(g0.tensors[13].producer, 7);

  const StageGraph& s1 = stages[1].graph;
  const Graph& g1 = s1.graph;
  EXPECT_EQ(all_tensor_names(g1),
            (std::vector<std::string>{"x2", "layers.2.fc1.w", "h2", "layers.2.fc2.w", "o2", "x3", "layers.3.fc1.w",
                                      "h3", "layers.3.fc2.w", "o3", "x4", "s", "r", "head.w", "y"}));
  EXPECT_EQ(node_ops(g1), (std::vector<std::string>{"MatMul", "MatMul", "Add", "MatMul", "MatMul", "Add", "Reshape",
                                                    "Gemm"}));
  EXPECT_EQ(names(g1, g1.inputs), (std::vector<std::string>{"x2"}));
  EXPECT_EQ(names(g1, s1.received), (std::vector<std::string>{"x2"}));
  EXPECT_TRUE(s1.sent.empty());
  EXPECT_EQ(g1.tensors[0].kind, TensorKind::Input);
  EXPECT_EQ(g1.tensors[0].producer, -1);
  EXPECT_EQ(g1.tensors[0].consumers, (std::vector<int32_t>{0, 2}));  // fc1_2 and Add2
  EXPECT_EQ(names(g1, g1.outputs), (std::vector<std::string>{"y"}));
  EXPECT_EQ(g1.tensors[11].producer, -1);  // s: a host value, no producer, not an input
  EXPECT_EQ(g1.tensors[11].consumers, (std::vector<int32_t>{6}));
  // The map back: each stage id to the whole graph's tensor and node of the same name.
  for (const StageGraph* s : {&s0, &s1}) {
    for (size_t t = 0; t < s->graph.tensors.size(); ++t) {
      EXPECT_EQ(g.tensors[s->original_tensor[t]].name, s->graph.tensors[t].name);
      EXPECT_EQ(s->stage_tensor[s->original_tensor[t]], static_cast<int32_t>(t));
    }
    for (size_t n = 0; n < s->graph.nodes.size(); ++n) EXPECT_EQ(g.nodes[s->original_node[n]].name, s->graph.nodes[n].name);
  }
  EXPECT_EQ(s1.original_tensor[0], *g.find_tensor("x2"));
  EXPECT_EQ(s1.stage_tensor[*g.find_tensor("x1")], -1);
}

// --tp 2 --sequence-parallel: the facts per op and per node move with the stage's renumbering. Stage 1's ops are
// fc1_2, fc2_2, Add2, fc1_3, fc2_3, Add3, head; the column-parallel fc1s and the head all-gather their
// sequence-split inputs x2, x3, x4 (stage ids 0, 5, 10; tensor_parallel.h), the row-parallel fc2s nothing. Stage
// 0's fc1_0 and fc1_1 gather x0 and x1 (ids 2 and 7). Sizes on rank 0: x2 sequence-split [2,8] = 64 bytes, fc1's
// weight split by output features [8,4] = 128, h2 split on its last axis [4,4] = 64.
TEST(PipelineStageGraph, PerOpAndPerNodeFactsAreRenumberedWithTheStage) {
  const Graph g = four_blocks(/*reshape=*/false);
  const TrainingContext whole = make_training_context(g, two_stages(2, true));
  const std::vector<PipelineStage> stages = build_pipeline_stages(whole);
  ASSERT_EQ(stages.size(), 2u);
  const TrainingContext c0 = stage_context(whole, stages[0].graph);
  EXPECT_EQ(c0.layout.tp.gathered_input, (std::vector<int32_t>{-1, 2, -1, -1, 7, -1, -1}));
  EXPECT_EQ(c0.sent, (std::vector<int32_t>{12}));
  const TrainingContext c1 = stage_context(whole, stages[1].graph);
  const Graph& g1 = stages[1].graph.graph;
  ASSERT_EQ(c1.graph, &g1);
  ASSERT_EQ(c1.ops.size(), 7u);
  EXPECT_EQ(c1.layout.tp.gathered_input, (std::vector<int32_t>{0, -1, -1, 5, -1, -1, 10}));
  EXPECT_EQ(c1.ops[0].inputs, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(c1.ops[0].outputs, (std::vector<int32_t>{2}));
  EXPECT_EQ(c1.ops[6].nodes, (std::vector<int32_t>{6}));
  EXPECT_EQ(c1.received, (std::vector<int32_t>{0}));
  EXPECT_TRUE(c1.sent.empty());
  EXPECT_EQ(c1.layout.dtype.size(), g1.tensors.size());
  EXPECT_EQ(c1.layout.local_bytes(g1, 0), 64u);
  EXPECT_EQ(c1.layout.local_bytes(g1, 1), 128u);
  EXPECT_EQ(c1.layout.local_bytes(g1, 2), 64u);
  EXPECT_EQ(names(g1, c1.params), (std::vector<std::string>{"layers.2.fc1.w", "layers.2.fc2.w", "layers.3.fc1.w",
                                                            "layers.3.fc2.w", "head.w"}));
}

}  // namespace
}  // namespace memplan
