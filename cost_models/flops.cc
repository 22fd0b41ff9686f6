#include "cost_models/flops.h"

#include "cost_models/graph_facts.h"
#include "onnx_import/checked.h"

namespace memplan {
namespace {

uint64_t elements_of(const Graph& g, int32_t t) { return t < 0 ? 0 : g.tensors[t].elements(); }

}  // namespace

uint64_t node_flops(const Graph& g, int32_t index) {
  const Node& n = g.nodes[index];
  const int32_t out = n.outputs.empty() ? -1 : n.outputs[0];
  const uint64_t out_elems = elements_of(g, out);
  const std::string& op = n.op_type;
  if (op == "Conv" || op == "ConvTranspose") {
    if (n.inputs.size() < 2 || n.inputs[1] < 0) return out_elems;
    const auto& w = g.tensors[n.inputs[1]].shape;  // Conv: [M, C/group, k...]; ConvTranspose: [C, M/group, k...]
    uint64_t per_output = 1;
    for (size_t i = 1; i < w.size(); ++i) per_output = checked_mul(per_output, static_cast<uint64_t>(w[i]), "FLOP count");
    if (op == "ConvTranspose") {
      // Each input element scatters into M/group * kernel outputs.
      const uint64_t in_elems = elements_of(g, n.inputs[0]);
      return checked_mul(2, checked_mul(in_elems, per_output, "FLOP count"), "FLOP count");
    }
    return checked_mul(2, checked_mul(out_elems, per_output, "FLOP count"), "FLOP count");
  }
  if (op == "MatMul" || op == "Gemm" || op == "MatMulInteger" || op == "FusedMatMul") {
    if (n.inputs.empty() || n.inputs[0] < 0) return out_elems;
    const auto& a = g.tensors[n.inputs[0]].shape;
    if (a.empty()) return out_elems;
    uint64_t k = static_cast<uint64_t>(a.back());
    if (op == "Gemm" && n.int_attribute("transA", 0) != 0) k = static_cast<uint64_t>(a.front());
    return checked_mul(2, checked_mul(out_elems, k, "FLOP count"), "FLOP count");
  }
  if (is_aten(n, "_grouped_mm")) {  // [S, K] x the groups' [K, N]: each row meets one group, 2·S·N·K
    if (n.inputs.empty() || n.inputs[0] < 0 || g.tensors[n.inputs[0]].shape.empty()) return out_elems;
    const uint64_t k = static_cast<uint64_t>(g.tensors[n.inputs[0]].shape.back());
    return checked_mul(2, checked_mul(out_elems, k, "FLOP count"), "FLOP count");
  }
  if (op == "Shape" || op == "Size" || op == "Constant" || op == "Reshape" || op == "Flatten" ||
      op == "Squeeze" || op == "Unsqueeze" || op == "Identity")
    return 0;
  return out_elems;
}

uint64_t op_flops(const Graph& g, const std::vector<int32_t>& nodes) {
  uint64_t f = 0;
  for (int32_t n : nodes) f = checked_add(f, node_flops(g, n), "FLOP count");
  return f;
}

}  // namespace memplan
