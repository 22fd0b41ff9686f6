// find_mla_decompression (cost_models/engine_kernels.h): multi-head latent attention's decompressed keys and values.
#include <set>

#include "cost_models/engine_kernels.h"

namespace memplan {

MlaDecompression find_mla_decompression(const Graph& g, const std::vector<std::string>& present_outputs) {
  MlaDecompression m;
  std::set<int32_t> held;
  for (const std::string& name : present_outputs) {
    const std::optional<int32_t> present = g.find_tensor(name);
    if (!present) continue;
    bool reached = false;
    std::vector<int32_t> chain, stack{*present};
    while (!stack.empty()) {
      const int32_t t = stack.back();
      stack.pop_back();
      const int32_t p = g.tensors[t].producer;
      if (p < 0) continue;  // the past input (a graph input) stays the cache's
      chain.push_back(t);
      const Node& n = g.nodes[p];
      if (n.op_type == "MatMul") {
        reached = true;
        continue;
      }
      if (n.op_type == "Expand") continue;
      if (n.op_type == "Concat") {
        for (int32_t in : n.inputs)
          if (in >= 0) stack.push_back(in);
      } else if ((n.op_type == "Split" || n.op_type == "Transpose" || n.op_type == "Reshape" ||
                  n.op_type == "Unsqueeze") && !n.inputs.empty() && n.inputs[0] >= 0) {
        stack.push_back(n.inputs[0]);  // the data operand (Reshape's shape, Split's sizes are operand 1)
      } else {
        reached = false;  // another op: not the decompression this finder knows
        break;
      }
    }
    if (!reached) continue;
    ++m.layers;
    // Forward: the views the attention's MatMuls read (keys.transpose(2, 3)).
    std::vector<int32_t> forward = chain;
    while (!forward.empty()) {
      const int32_t t = forward.back();
      forward.pop_back();
      if (!held.insert(t).second) continue;
      for (int32_t c : g.tensors[t].consumers) {
        const Node& n = g.nodes[c];
        if (n.inputs.empty() || n.inputs[0] != t || n.outputs.empty() || n.outputs[0] < 0) continue;
        if (n.op_type == "Transpose" || n.op_type == "Reshape" || n.op_type == "Unsqueeze") forward.push_back(n.outputs[0]);
      }
    }
  }
  for (int32_t t : held) m.tensors.push_back(g.tensors[t].name);
  return m;
}

}  // namespace memplan
