// PEFT's k-bit preparation as a graph rewrite (kbit_prep.h).
#include "cost_models/kbit_prep.h"

#include <set>

#include "cost_models/graph_facts.h"
#include "cost_models/graph_rewrite.h"
#include "cost_models/op_fusion_match.h"

namespace memplan {

int prepare_kbit_training(Graph& g, std::vector<bool>& float32, std::vector<bool>& adapter) {
  adapter.resize(g.tensors.size(), false);
  GraphRewriter r(g, float32, &adapter);
  std::set<int32_t> compute_type;  // the 4-bit layers' own tensors: in the compute dtype, not float32
  int layers = 0;
  const size_t base_nodes = g.nodes.size();
  for (size_t i = 0; i < base_nodes; ++i) {
    const int32_t node = static_cast<int32_t>(i);
    const std::optional<LinearSite> site = linear_site(g, node);
    // bitsandbytes quantizes the base's Linear layers but the head (transformers' BitsAndBytesConfig
    // llm_int8_skip_modules, the output embedding kept in its type: get_keys_to_not_convert); the adapters
    // are PEFT's float32 nn.Linear.
    if (!site || adapter[site->weight]) continue;
    const int32_t y = fusion::out0(g, site->last_node);
    if (is_graph_output(g, y)) continue;
    compute_type.insert(site->weight);
    compute_type.insert(fusion::in(g, node, 1));  // the weight as the MatMul reads it (its transpose)
    for (int32_t n = node; n <= site->last_node; ++n)  // the GEMM's result, and its bias sum
      for (int32_t t : g.nodes[n].outputs) compute_type.insert(t);
    // x.to(self.compute_dtype): the GEMM's input, and what MatMul4Bit keeps for backward.
    const int32_t x = site->x;
    const int32_t copy = r.cast(x, g.tensors[x].dtype, node, "/to_compute_dtype", /*run_after=*/false);
    r.redirect(x, copy, {node});
    compute_type.insert(copy);
    // out.to(inp_dtype): every reader of the layer's result reads the float32 copy.
    const std::vector<int32_t> readers = g.tensors[y].consumers;
    const int32_t back = r.cast(y, g.tensors[y].dtype, site->last_node, "/to_input_dtype", /*run_after=*/true);
    r.redirect(y, back, readers);
    ++layers;
  }
  // prepare_model_for_kbit_training: param.data = param.data.to(torch.float32) for every fp16/bf16 parameter, so
  // everything computed from them and from the 4-bit layers' float32 results is float32.
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (dtype_is_float(g.tensors[t].dtype) && compute_type.count(static_cast<int32_t>(t)) == 0) r.pin(static_cast<int32_t>(t));
  r.finish();
  return layers;
}

}  // namespace memplan
