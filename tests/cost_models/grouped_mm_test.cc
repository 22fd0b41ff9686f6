// --experts-implementation grouped_mm (onnx_import/hf_moe_grouped.h): aten::_grouped_mm's autograd rule on a graph
// built in code, and one sparse block of a tiny qwen3_moe config.json, every tensor by hand.
#include <gtest/gtest.h>


#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/model_reader.h"
#include "onnx_import/model_session.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"
#include "tests/cost_models/tiny_qwen3_moe_test_base.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::GraphBuilder;
using testing::ints_attr;
using testing::step_named;

Attribute string_attr(const std::string& s) {
  Attribute a;
  a.type = Attribute::Type::String;
  a.s = s;
  return a;
}

bool reads(const Step& s, int32_t b) { return std::find(s.reads.begin(), s.reads.end(), b) != s.reads.end(); }

// a = x * wa [6, 4] (96 bytes), w [3, 5, 4] transposed to [3, 4, 5] (a view), offs [3] int32 (12):
// y = _grouped_mm(a, w^T, offs) [6, 5] = 120 bytes. derivatives.yaml _grouped_mm (pytorch/pytorch at d327a78):
// self's formula reads mat2 and offs, mat2's reads self and offs, so autograd keeps a (96), the parameter's
// transposed view (resident) and offs (12); the grads are fresh: grad a [6, 4] = 96, grad w^T [3, 4, 5] = 240.
TEST(GroupedMm, SavesTheOperandsAndOffsetsAndAllocatesBothGrads) {
  GraphBuilder b;
  const int32_t x = b.input("x", {6, 4});
  const int32_t offs = b.input("offs", {3}, DType::Int32);
  const int32_t a = b.node1("Mul", {x, b.weight("wa", {4})}, "a", {6, 4});
  const int32_t wt = b.node1("Transpose", {b.weight("w", {3, 5, 4})}, "wt", {3, 4, 5}, {{"perm", ints_attr({0, 2, 1})}});
  const int32_t y = b.node1("ATen", {a, wt, offs}, "y", {6, 5}, {{"operator", string_attr("_grouped_mm")}});
  b.mutable_graph().nodes.back().domain = "org.pytorch.aten";
  b.output(y);
  const Program p = build_training_program(b.graph(), sgd_ideal()).program;
  EXPECT_EQ(p.buffers[buffer_named(p, "y")].bytes, 120u);
  const int32_t backward = step_named(p, "backward:" + b.graph().nodes.back().name);
  ASSERT_GE(backward, 0);
  EXPECT_TRUE(reads(p.steps[backward], buffer_named(p, "a")));
  EXPECT_TRUE(reads(p.steps[backward], buffer_named(p, "offs")));
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:a")].bytes, 96u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:wt")].bytes, 240u);
}

// A tiny qwen3_moe: 2 layers, hidden H = 16, 4 heads of 4, 2 KV heads, E = 4 experts of I = 8, top k = 2,
// norm_topk_prob; float32 (the graph's type, --precision fp32). Batch 1 x seq 128: N = 128 tokens, S = N·k = 256
// rows (N is above memplan's 64-element shape-arithmetic bound, so the token indices are data, as on a GPU).
// grouped_mm_experts_forward (src/transformers/integrations/moe.py at 0261a46), layer 0's experts, forward:
//   zeros_like(hidden)            [128, 16] f32    8,192
//   arange(N)                     [128] i64        1,024
//   token_idx (reshape of expand) [256] i64        2,048   (a copy: the expanded view is strided)
//   argsort(expert_ids), argsort(perm): at::sort's values and indices, [256] i64 each: 4 x 2,048 = 8,192
//   hidden[token_idx]             [256, 16] f32   16,384
//   expert_ids[perm]              [256] i64        2,048
//   sample_weights[perm]          [256] f32        1,024
//   current[perm]                 [256, 16] f32   16,384
//   expert_ids_g.float()          [256] f32        1,024
//   histc                         [4] f32             16
//   cumsum(dtype=int32): integer_upcast's cast [4] i32 16, the sum [4] i32 16 = 32
//   _grouped_mm gate_up           [256, 16] f32   16,384  (2I = 16 columns)
//   silu(gate)                    [256, 8] f32     8,192  (gate, up: chunk's views)
//   silu * up                     [256, 8] f32     8,192
//   _grouped_mm down              [256, 16] f32   16,384
//   * sample_weights_g[:, None]   [256, 16] f32   16,384
//   [inv_perm]                    [256, 16] f32   16,384
//   .to(float32): self; index_add_ in place into the zeros.
//   total                                        138,288
// Kept for backward (derivatives.yaml: index/gather keep the index, mul both operands, silu its input, _grouped_mm
// as above, index_add_ its source and index): token_idx 2,048, perm 2,048, inv_perm 2,048, current[perm] 16,384,
// the offsets 16, gate_up 16,384 (silu's input and mul's `up` are its views), silu 8,192, silu * up 8,192, down's
// output 16,384, sample_weights[perm] 1,024 (its unsqueeze a view), the un-sorted rows 16,384: 89,104.
// Backward's grads of the grouped GEMMs: current[perm] 16,384 and gate_up_proj^T [4, 16, 16] 4,096; silu * up 8,192
// and down_proj^T [4, 8, 16] 2,048.
class GroupedQwen3Moe : public testing::TinyQwen3MoeTest {
 protected:
  GroupedQwen3Moe() : TinyQwen3MoeTest("memplan_grouped") {}
  std::shared_ptr<const Graph> graph(const std::string& experts, const std::string& routing = "") {
    return moe_graph(experts, routing);
  }
};

constexpr const char* kScope = "/layers.0/mlp/experts/";

bool in_scope(const std::string& name) { return name.rfind(kScope, 0) == 0; }

TEST_F(GroupedQwen3Moe, TheBlocksTensorsByHand) {
  const auto g = graph("grouped_mm");
  // Shapes: the ATen nodes of layer 0, in order histc [4], gate_up [256, 16], down [256, 16].
  std::vector<std::vector<int64_t>> aten;
  for (const Node& n : g->nodes)
    if (n.op_type == "ATen" && in_scope(n.name)) aten.push_back(g->tensors[n.outputs[0]].shape);
  EXPECT_EQ(aten, (std::vector<std::vector<int64_t>>{{4}, {256, 16}, {256, 16}}));
  const Program p = build_training_program(*g, sgd_ideal()).program;
  uint64_t forward = 0, saved = 0;
  std::set<int32_t> kept;
  for (const Step& s : p.steps)
    if (s.name.rfind("backward:", 0) == 0)
      for (int32_t b : s.reads) kept.insert(b);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    if (buf.resident || !in_scope(buf.name)) continue;
    forward += buf.bytes;
    if (kept.count(int32_t(b))) saved += buf.bytes;
  }
  EXPECT_EQ(forward, 138288u);
  EXPECT_EQ(saved, 89104u);
  std::vector<uint64_t> grads;
  for (const Node& n : g->nodes)
    if (n.op_type == "ATen" && in_scope(n.name) && n.inputs.size() == 3)
      for (int k : {0, 1}) grads.push_back(p.buffers[buffer_named(p, "grad:" + g->tensors[n.inputs[k]].name)].bytes);
  EXPECT_EQ(grads, (std::vector<uint64_t>{16384, 4096, 8192, 2048}));
}

// The same layer's whole block (router included, "/layers.0/mlp/"), grouped_mm against the eager loop (balanced
// routing: each expert 64 of the 256 pairs), memplan's graphs by hand.
//   router, both: gate [128, 4] 2,048; softmax 2,048 (its float cast: self); top-k values [128, 2] 1,024 and
//     indices (i64) 2,048; the sum [128, 1] 512; the division 1,024 (its cast: self): 8,704.
//   eager loop: arange(S) [256] i64 2,048; pair // k as the export writes it, Div and two int64 Casts, 3 x 2,048;
//     the zeros 8,192; per expert: hidden[None, top_x] [1, 64, 16] 4,096 (top_x a strided slice: a view),
//     gate and up [64, 8] 2,048 each, silu 2,048, silu * up 2,048, down [64, 16] 4,096, times the weights 4,096:
//     20,480, x 4 = 81,920. Total 2,048 + 6,144 + 8,192 + 81,920 = 98,304; with the router 107,008.
//   grouped_mm: 138,288 (above) + 8,704 = 146,992: +39,984 bytes of forward tensors in this block.
// Kept for backward (as above; softmax its result, top-k's division both operands, top-k its indices: TopkBackward0's
// _saved_indices, derivatives.yaml topk):
//   router, both: softmax 2,048, the top-k values 1,024 and indices 2,048, the sum 512 = 5,632.
//   eager: the pair tokens 2,048 (every expert's top_x is a view of them), the routing weights 1,024 (each
//     expert's slice a view), per expert the gathered rows 4,096, gate 2,048, up 2,048, silu 2,048, silu * up
//     2,048, down 4,096, the weighted rows 4,096 (index_add_'s source): 20,480, x 4 = 81,920: 84,992 + 5,632 =
//     90,624.
//   grouped_mm: 89,104 + 5,632 = 94,736 (the routing weights are kept as their sorted copy, counted above).
TEST_F(GroupedQwen3Moe, AgainstTheEagerLoopByHand) {
  auto sums = [&](const std::string& experts) {
    const auto g = graph(experts);
    return testing::forward_and_kept_bytes(build_training_program(*g, sgd_ideal()).program, "/layers.0/mlp/");
  };
  EXPECT_EQ(sums("eager"), std::make_pair(uint64_t{107008}, uint64_t{90624}));
  EXPECT_EQ(sums("grouped_mm"), std::make_pair(uint64_t{146992}, uint64_t{94736}));
}

// Every size is S rows whatever the routing: --moe-routing worst builds the same block.
TEST_F(GroupedQwen3Moe, RoutingChangesNothing) {
  const auto balanced = graph("grouped_mm", "balanced");
  const size_t nodes = balanced->nodes.size();
  const auto worst = graph("grouped_mm", "worst");
  ASSERT_EQ(worst->nodes.size(), nodes);
  for (size_t i = 0; i < nodes; ++i)
    for (size_t k = 0; k < worst->nodes[i].outputs.size(); ++k)
      EXPECT_EQ(worst->tensors[worst->nodes[i].outputs[k]].shape, balanced->tensors[balanced->nodes[i].outputs[k]].shape);
}

// The decoder with a KV cache (eval, constant folding): batch 2 x 1 new token, N = 2, S = 4: the grouped GEMMs
// [4, 16] and [4, 16], histc [4]; the folded experts' transposes are initializers of the parameters' bytes, so the
// initializers hold 2 layers x (gate_up [4, 16, 16] + down [4, 8, 16]) x 4 B = 2 x 6,144 = 12,288 B of experts, as
// the eager loop's 2 x 4 experts x 3 x [8, 16] x 4 B do (no other initializer is 3-D).
TEST_F(GroupedQwen3Moe, BuildsTheDecoderGraphs) {
  ModelSession session(path_, "decode", "", false, "grouped_mm");
  Bindings b;
  b.dims = {{"batch_size", 2}, {"sequence_length", 1}, {"past_sequence_length", 8}, {"total_sequence_length", 9}};
  b.graph = "decode", b.experts = "grouped_mm";
  const auto g = session.shape(b);
  std::vector<std::vector<int64_t>> aten;
  uint64_t stacked = 0;
  for (const Node& n : g->nodes)
    if (n.op_type == "ATen" && in_scope(n.name)) aten.push_back(g->tensors[n.outputs[0]].shape);
  for (int32_t t : g->initializers)
    if (g->tensors[t].shape.size() == 3) stacked += g->tensors[t].bytes();
  EXPECT_EQ(aten, (std::vector<std::vector<int64_t>>{{4}, {4, 16}, {4, 16}}));
  EXPECT_EQ(stacked, 12288u);
}

}  // namespace
}  // namespace memplan
