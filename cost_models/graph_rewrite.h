// What the graph rewrites of pass 1 (tensor_layout.h: the LoRA adapters, the float32 islands) build with: a new
// activation tensor, a Cast node as torch.onnx writes Tensor.to(dtype), and the producers and consumers relinked
// from the node list once the nodes are in their new order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// F.linear in a graph, as op fusion recognises it (fusion::match_linear: MatMul on Transpose(W) or on a folded
// Wᵀ, then an optional bias Add), a MatMul on a rank-2 float initializer without a bias, or a Gemm on one: its
// input x, its weight initializer, the node whose output is the linear's result (the bias Add when there is one),
// and the feature counts. What the LoRA adapters wrap and what bitsandbytes quantizes.
struct LinearSite {
  int32_t x = -1, weight = -1, last_node = -1;
  int64_t in_features = 0, out_features = 0;
};
// The Linear whose MatMul or Gemm is `node`, or nullopt.
std::optional<LinearSite> linear_site(const Graph& g, int32_t node);

// Appends an activation tensor; returns its id.
int32_t add_activation(Graph& g, const std::string& name, DType dtype, std::vector<int64_t> shape);

// Cast(from) -> out, to `to` (the node is returned, not added: the caller places it).
Node cast_node(const std::string& name, int32_t from, int32_t out, DType to, int opset);

// Producers and consumers from the node list (consumers in schedule order, one entry per use).
void relink(Graph& g);

// Nodes inserted before or after a graph's existing nodes, in one pass at finish(): the node order stays
// topological, producers and consumers are relinked. Per-tensor flags (the float32 pins, and one more vector
// to grow, such as LoRA's adapter flags) grow with each tensor it adds.
class GraphRewriter {
 public:
  GraphRewriter(Graph& g, std::vector<bool>& float32, std::vector<bool>* grown);

  // A Cast of `from` to `to`, named after `node` + `suffix`, run before or after `node`; returns its output
  // (graph type `to`).
  int32_t cast(int32_t from, DType to, int32_t node, const char* suffix, bool run_after);
  // Every reader of `from` among the nodes `readers` reads `to` instead.
  void redirect(int32_t from, int32_t to, const std::vector<int32_t>& readers);
  void pin(int32_t t) { float32_[t] = true; }
  void finish();

 private:
  Graph& g_;
  std::vector<bool>& float32_;
  std::vector<bool>* grown_;
  std::vector<std::vector<Node>> before_, after_;
};

}  // namespace memplan
