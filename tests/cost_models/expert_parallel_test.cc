// --ep N (onnx_import/hf_moe_ep.cc, cost_models/training_ep.cc): torchtitan v0.2.2's ExpertParallel around
// transformers' grouped experts, rank 0's graph, on a tiny qwen3_moe (tests/cost_models/grouped_mm_test.cc's: H 16,
// E 4 experts of I 8, top k 2, 2 sparse layers, float32) at batch 1 x seq 128: N_t = 128 tokens, S = N_t·k = 256
// rows per rank. Every figure by hand from the torchtitan source at 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce.
#include <gtest/gtest.h>


#include <filesystem>
#include <fstream>
#include <memory>

#include "cost_models/cost_model.h"
#include "cost_models/graph_facts.h"
#include "onnx_import/errors.h"
#include "onnx_import/model_session.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"
#include "tests/cost_models/tiny_qwen3_moe_test_base.h"

namespace memplan {
namespace {

using testing::bytes_named;

class ExpertParallel : public testing::TinyQwen3MoeTest {
 protected:
  ExpertParallel() : TinyQwen3MoeTest("memplan_ep") {}
  std::shared_ptr<const Graph> graph(int ep, const std::string& routing = "", int64_t seq = 128,
                                     const std::string& experts = "grouped_mm") {
    return moe_graph(experts, routing, seq, ep);
  }
  static std::vector<std::vector<int64_t>> aten_shapes(const Graph& g, const std::string& scope) {
    std::vector<std::vector<int64_t>> shapes;
    for (const Node& n : g.nodes)
      if (n.op_type == "ATen" && n.name.rfind(scope, 0) == 0) shapes.push_back(g.tensors[n.outputs[0]].shape);
    return shapes;
  }
  static std::vector<int64_t> shape_of(const Graph& g, const std::string& name) {
    for (const Tensor& t : g.tensors)
      if (t.name == name) return t.shape;
    return {};
  }
  static uint64_t parameter_bytes(const Graph& g) {
    uint64_t bytes = 0;
    for (int32_t t : g.initializers) bytes += g.tensors[t].bytes();
    return bytes;
  }
};

// ExpertParallel._partition_fn, Shard(0) over 2 ranks: rank 0 holds experts 0 and 1, gate_up_proj [2, 16, 16]
// (512 float32 = 2,048 bytes, of the whole [4, 16, 16] 4,096) and down_proj [2, 16, 8] (256 = 1,024 bytes, of
// 2,048): 3,072 bytes fewer per layer, 6,144 over the 2 layers; the router gate [4, 16] stays whole.
TEST_F(ExpertParallel, RankZeroHoldsHalfTheExperts) {
  const auto whole = graph(1);
  const uint64_t whole_bytes = parameter_bytes(*whole);
  const auto g = graph(2);
  EXPECT_EQ(shape_of(*g, "layers.0.mlp.experts.gate_up_proj"), (std::vector<int64_t>{2, 16, 16}));
  EXPECT_EQ(shape_of(*g, "layers.1.mlp.experts.down_proj"), (std::vector<int64_t>{2, 16, 8}));
  EXPECT_EQ(shape_of(*g, "layers.0.mlp.gate.weight"), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(whole_bytes - parameter_bytes(*g), uint64_t{6144});
}

// balanced: each rank deals its 256 pairs to expert p mod 4, 64 each; rank 0's experts 0 and 1 get 128 rows from
// each rank: R = 2 x 128 = 256. _permute: P = _round_up(256 + 2 x 8, 8) = 272. The ATen ops of the block in order:
// histc [4]; all_to_all_single of the counts [4]; of the rows [256, 16]; generate_permute_indices [272] (int32);
// _grouped_mm gate_up [272, 16] (2I = 16), down [272, 16]; the combine's all_to_all_single back to S [256, 16].
// worst: every token picks experts 0 and 1, both rank 0's: 128 x min(2, 2) = 256 rows from each rank, R = 512,
// P = _round_up(512 + 16, 8) = 528.
TEST_F(ExpertParallel, RowsRankZeroReceivesByHand) {
  const std::string scope = "/layers.0/mlp/experts/";
  const auto balanced = graph(2);
  EXPECT_EQ(aten_shapes(*balanced, scope), (std::vector<std::vector<int64_t>>{
                                               {4}, {4}, {256, 16}, {272}, {272, 16}, {272, 16}, {256, 16}}));
  const auto worst = graph(2, "worst");
  EXPECT_EQ(aten_shapes(*worst, scope), (std::vector<std::vector<int64_t>>{
                                            {4}, {4}, {512, 16}, {528}, {528, 16}, {528, 16}, {256, 16}}));
}

// seq 125: S = 250. balanced: experts 0..3 get ceil((250 - e) / 4) = 63, 63, 62, 62 from each rank; rank 0's two
// 126 = floor(250 / 4) x 2 + min(250 mod 4, 2); R = 252, P = _round_up(252 + 16, 8) = 272. worst: 125 x 2 = 250 from
// each rank, R = 500, P = _round_up(516, 8) = 520.
TEST_F(ExpertParallel, UnevenRowsByHand) {
  const std::string scope = "/layers.1/mlp/experts/";
  EXPECT_EQ(aten_shapes(*graph(2, "", 125), scope), (std::vector<std::vector<int64_t>>{
                                                         {4}, {4}, {252, 16}, {272}, {272, 16}, {272, 16}, {250, 16}}));
  EXPECT_EQ(aten_shapes(*graph(2, "worst", 125), scope), (std::vector<std::vector<int64_t>>{
                                                              {4}, {4}, {500, 16}, {520}, {520, 16}, {520, 16}, {250, 16}}));
}

// --ep 4: one expert per rank. balanced: expert 0 gets 64 of each rank's 256 pairs, R = 4 x 64 = 256, P =
// _round_up(256 + 8, 8) = 264; worst: each rank's 128 tokens x min(2, 1) = 128, R = 512, P = 520.
TEST_F(ExpertParallel, OneExpertPerRank) {
  const std::string scope = "/layers.0/mlp/experts/";
  EXPECT_EQ(aten_shapes(*graph(4), scope), (std::vector<std::vector<int64_t>>{
                                               {4}, {4}, {256, 16}, {264}, {264, 16}, {264, 16}, {256, 16}}));
  EXPECT_EQ(aten_shapes(*graph(4, "worst"), scope), (std::vector<std::vector<int64_t>>{
                                                        {4}, {4}, {512, 16}, {520}, {520, 16}, {520, 16}, {256, 16}}));
}

// The dispatch and combine buffers of layer 0 at --ep 2, balanced (R = 256, P = 272, H = 16, float32), each a
// forward buffer of its own, by hand from expert_parallel.py and utils.py, in order:
//   all_to_all_single(num_tokens_per_expert) [4] float32 16; all_to_all_single_autograd's received rows [256, 16]
//   16,384; x.new_zeros((H)) 64; torch.vstack [257, 16] 16,448; generate_permute_indices' permuted_indices [272]
//   int32 1,088, m_sizes and m_offsets [2] int32 8 each; _unpermute's new_empty [257, 16] 16,448, which
//   index_put_ writes in place (no buffer of its own: runtime_rules.h); the combine's all-to-all back to the rank's
//   S rows [256, 16] 16,384. The split sizes are host lists (.tolist()): no device buffer (their Concat is 0).
//   (x[permuted_indices, :] [272, 16] 17,408 and the grouped GEMMs' [272, ...] rows are hf_moe_grouped.h's.)
// Backward: each all-to-all's grad is the reverse all-to-all of the grad, a fresh [256, 16] 16,384 (received rows)
// and [256, 16] 16,384 (the sorted rows current_g); the scatter's grad for `out` is a fresh [272, 16] 17,408.
TEST_F(ExpertParallel, DispatchBuffersByHand) {
  const auto g = graph(2);
  TrainingRun run;
  run.runtime = Runtime::Ideal;
  run.optimizer = Optimizer::Sgd;
  const Program p = build_training_program(*g, run).program;
  const std::string scope = "/layers.0/mlp/experts/";
  // From the counts' all-to-all to the combine's (hf_moe_ep.cc's order; the combine reads the [:-1] Slice): every
  // all-to-all, zero row, Concat, permutation and scatter, with its forward buffer's bytes.
  std::vector<std::pair<std::string, uint64_t>> forward;
  bool dispatched = false;
  for (const Node& n : g->nodes) {
    if (n.name.rfind(scope, 0) != 0) continue;
    dispatched = dispatched || is_aten(n, "all_to_all_single");
    const bool ep_op = is_aten(n, "all_to_all_single") || is_aten(n, "generate_permute_indices") ||
                       n.op_type == "ConstantOfShape" || n.op_type == "Concat" || n.op_type == "ScatterElements";
    if (!dispatched || !ep_op) continue;
    for (int32_t t : n.outputs)
      if (t >= 0) forward.push_back({n.op_type, bytes_named(p, g->tensors[t].name)});
    if (is_aten(n, "all_to_all_single") && g->tensors[n.inputs[0]].name.find("Slice") != std::string::npos) break;
  }
  const std::vector<std::pair<std::string, uint64_t>> expected = {
      {"ATen", 16},  {"ATen", 16384}, {"ConstantOfShape", 64}, {"Concat", 16448}, {"ATen", 1088}, {"ATen", 8},
      {"ATen", 8},   {"ConstantOfShape", 16448}, {"ScatterElements", 0}, {"ATen", 16384}};
  EXPECT_EQ(forward, expected);
  // Each 2-D all-to-all's input grad: the reverse all-to-all's fresh [256, 16].
  std::vector<uint64_t> grads;
  for (const Node& n : g->nodes)
    if (n.name.rfind(scope, 0) == 0 && is_aten(n, "all_to_all_single") && g->tensors[n.inputs[0]].shape.size() == 2)
      grads.push_back(bytes_named(p, "grad:" + g->tensors[n.inputs[0]].name));
  EXPECT_EQ(grads, (std::vector<uint64_t>{16384, 16384}));
}

// The training step under FSDP2 on 4 GPUs with --ep 2: an expert's [2, ...] slice over 4 / 2 = 2 ranks, one expert
// each; with 8 GPUs the 4 copies exceed the 2 experts (torchtitan's Shard(1)): refused.
TEST_F(ExpertParallel, Fsdp2ShardsTheExpertsOverTheRest) {
  const auto g = graph(2);
  TrainingRun run;
  run.runtime = Runtime::Ideal;
  run.shard = Sharding::Fsdp2;
  run.gpus = 4;
  run.expert_parallel = 2;
  EXPECT_NO_THROW(build_training_program(*g, run));
  run.gpus = 8;
  EXPECT_THROW(build_training_program(*g, run), InputError);
}

// The import's refusals: a dense model, the eager loop, an N that does not divide the 4 experts, the decode graph.
TEST_F(ExpertParallel, Refusals) {
  EXPECT_THROW(graph(3), InputError);
  EXPECT_THROW(graph(2, "", 128, "eager"), InputError);
  EXPECT_THROW(ModelSession(path_, "decode", "", false, "grouped_mm", 2).model(), InputError);
}

}  // namespace
}  // namespace memplan
