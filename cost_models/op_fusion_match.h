// Internal to op_fusion*.cc: a candidate match, the graph helpers every matcher uses, and the matchers.
// Each matcher looks at one anchor node and returns the nodes of its pattern with the operands by role;
// fuse_ops (op_fusion.cc) decides which matches are kept.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "cost_models/op_fusion.h"

namespace memplan::fusion {

// A candidate match: the nodes it covers plus the role operands.
struct Match {
  OpKind kind = OpKind::Node;
  std::set<int32_t> nodes;
  FusedOp roles;
};

inline int32_t producer_of(const Graph& g, int32_t t) { return t < 0 ? -1 : g.tensors[t].producer; }

inline bool op_is(const Graph& g, int32_t node, const char* op) { return node >= 0 && g.nodes[node].op_type == op; }

inline int32_t in(const Graph& g, int32_t node, size_t i) {
  const auto& ins = g.nodes[node].inputs;
  return i < ins.size() ? ins[i] : -1;
}

inline int32_t out0(const Graph& g, int32_t node) {
  return g.nodes[node].outputs.empty() ? -1 : g.nodes[node].outputs[0];
}

// Tensors read from outside the node set (first-use order) and tensors read after it or by the graph.
void region_interface(const Graph& g, const std::set<int32_t>& nodes, std::vector<int32_t>& inputs,
                      std::vector<int32_t>& outputs);

// A fused op must hand exactly one tensor to the rest of the graph, produced by its last node, so that
// running it at that node's position changes no one else's inputs.
bool single_exit(const Graph& g, const std::set<int32_t>& nodes);

// op_fusion.cc: the elementwise and normalisation decompositions.
std::optional<Match> match_gelu(const Graph& g, int32_t anchor);
std::optional<Match> match_silu(const Graph& g, int32_t sigmoid);
std::optional<Match> match_layer_norm(const Graph& g, int32_t mean_node);
std::optional<Match> match_rsqrt(const Graph& g, int32_t sqrt);
std::optional<Match> match_index_add(const Graph& g, int32_t add);

// op_fusion_matmul.cc: the matrix products.
// The parameter a MatMul's right operand is: a 2-D initializer, or F.linear's Transpose (perm [1, 0]) of one read by
// that MatMul only (-1 if neither). `transpose` is set to the Transpose node when there is one.
int32_t linear_weight(const Graph& g, int32_t mm, int32_t& transpose);
std::optional<Match> match_linear(const Graph& g, int32_t matmul);
std::optional<Match> match_baddbmm(const Graph& g, int32_t add);
// `soft_cap`: the scores may pass cap x tanh(scores / cap) before the mask (FusionOptions::attention_soft_cap).
std::optional<Match> match_attention(const Graph& g, int32_t softmax, bool soft_cap = false);

}  // namespace memplan::fusion
