#include "cost_models/engine_kernels.h"

#include <algorithm>

#include "cost_models/graph_facts.h"
#include "cost_models/op_fusion.h"
#include "cost_models/runtime_rules.h"

namespace memplan {

std::optional<LmHead> find_lm_head(const Graph& g, const std::vector<std::string>& cache_outputs) {
  for (int32_t out : g.outputs) {
    const Tensor& y = g.tensors[out];
    if (std::find(cache_outputs.begin(), cache_outputs.end(), y.name) != cache_outputs.end()) continue;
    if (y.shape.size() < 2) continue;
    // Back from the output through the dtype casts and copies the exporter writes after the head, and a final
    // soft-cap, cap x tanh(logits / cap) (Gemma 2's final_logit_softcapping), which vLLM's LogitsProcessor applies
    // to the sampled rows only (vllm/model_executor/layers/logits_processor.py, soft_cap).
    std::vector<std::string> chain{y.name};
    int32_t t = out;
    while (g.tensors[t].producer >= 0) {
      const Node& n = g.nodes[g.tensors[t].producer];
      const bool scaled = (n.op_type == "Div" || n.op_type == "Mul") && n.inputs.size() == 2 &&
                          is_scalar_constant(g, n.inputs[1]);
      const bool scaled_left = n.op_type == "Mul" && n.inputs.size() == 2 && is_scalar_constant(g, n.inputs[0]);
      if (n.op_type != "Cast" && n.op_type != "Identity" && n.op_type != "Tanh" && !scaled && !scaled_left) break;
      t = n.inputs[scaled_left ? 1 : 0];
      chain.push_back(g.tensors[t].name);
    }
    if (g.tensors[t].producer < 0) continue;
    const Node& head = g.nodes[g.tensors[t].producer];
    if (head.op_type != "MatMul" && head.op_type != "Gemm") continue;
    if (head.inputs.size() < 2 || matmul_weight(g, head.inputs[1]) < 0) continue;
    const Tensor& x = g.tensors[head.inputs[0]];
    if (x.shape.empty() || g.tensors[t].shape.back() != y.shape.back()) continue;
    LmHead h;
    h.node = head.name;
    h.hidden = head.inputs[0];
    h.hidden_size = x.shape.back();
    h.vocab = y.shape.back();
    std::reverse(chain.begin(), chain.end());
    h.logits = std::move(chain);
    return h;
  }
  return std::nullopt;
}

RepeatKv find_repeat_kv(const Graph& g, const std::vector<std::string>& present_outputs) {
  RepeatKv r;
  for (const std::string& name : present_outputs) {
    const std::optional<int32_t> present = g.find_tensor(name);
    if (!present) continue;
    // Depth first along data inputs only (operand 0: Reshape's shape and Expand's shape are operand 1).
    std::vector<std::string> chain, expands;
    std::vector<int32_t> stack{*present};
    while (!stack.empty()) {
      const int32_t t = stack.back();
      stack.pop_back();
      for (int32_t c : g.tensors[t].consumers) {
        const Node& n = g.nodes[c];
        const bool data = !n.inputs.empty() && n.inputs[0] == t;
        if (!data || n.outputs.empty() || n.outputs[0] < 0) continue;
        if (n.op_type != "Unsqueeze" && n.op_type != "Expand" && n.op_type != "Reshape" && n.op_type != "Transpose")
          continue;
        if (n.op_type == "Expand") expands.push_back(n.name);
        chain.push_back(g.tensors[n.outputs[0]].name);
        stack.push_back(n.outputs[0]);
      }
    }
    if (expands.empty()) continue;
    r.expands.insert(r.expands.end(), expands.begin(), expands.end());
    r.tensors.insert(r.tensors.end(), chain.begin(), chain.end());
  }
  return r;
}

EngineKernelSites find_engine_kernel_sites(const Graph& g, const std::vector<std::string>& present_outputs) {
  EngineKernelSites s;
  s.head = find_lm_head(g, present_outputs);
  s.repeat = find_repeat_kv(g, present_outputs);
  s.moe = find_moe_blocks(g);
  for (const FusedOp& op : fuse_ops(g, fusion_for(Semantics::PyTorchEager, AttentionImpl::EngineKernel)))
    if (op.kind == OpKind::Attention) s.attention_steps.push_back(op.name);
  return s;
}

}  // namespace memplan
