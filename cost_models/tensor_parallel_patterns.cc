#include "cost_models/tensor_parallel_patterns.h"

#include <vector>

namespace memplan {

// A mixture of experts' router (its logits read by a Softmax, through a Cast, by a TopK) and a shared expert's
// one-feature gate (read by a Sigmoid) stay whole on every GPU: vLLM builds them as ReplicatedLinear and
// torch.nn.Linear (vllm/model_executor/models/qwen2_moe.py at 002fb90, Qwen2MoeSparseMoeBlock.gate and
// shared_expert_gate; qwen3_moe.py at 002456d and mixtral.py at 005df92, the gate), every rank routing every token.
bool is_replicated_gate(const Graph& g, const Node& n) {
  const int32_t out = n.outputs[0];
  if (out < 0 || g.tensors[out].shape.empty()) return false;
  for (int32_t c : g.tensors[out].consumers) {
    const Node& m = g.nodes[c];
    // GptOssTopKRouter: the biased logits straight into torch.topk (onnx_import/hf_gpt_oss.cc; vLLM's gpt_oss.py
    // MLPBlock.router is a torch.nn.Linear, whole on every rank).
    if (m.op_type == "TopK") return true;
    if (m.op_type == "Sigmoid" && g.tensors[out].shape.back() == 1) return true;
    if (m.op_type != "Softmax" || m.outputs.empty() || m.outputs[0] < 0) continue;
    for (int32_t d : g.tensors[m.outputs[0]].consumers) {
      const Node& k = g.nodes[d];
      if (k.op_type == "TopK") return true;
      if (k.op_type == "Cast" && !k.outputs.empty() && k.outputs[0] >= 0)
        for (int32_t e : g.tensors[k.outputs[0]].consumers)
          if (g.nodes[e].op_type == "TopK") return true;
    }
  }
  // DeepseekV3TopkRouter (onnx_import/hf_deepseek.cc): the logits through Sigmoid, the bias Add and the group
  // Reshape to the TopKs (vLLM's DeepSeekV2Gate, a ReplicatedLinear: deepseek_v2.py at b863fe5).
  std::vector<int32_t> frontier{out};
  for (int depth = 0; depth < 4 && !frontier.empty(); ++depth) {
    std::vector<int32_t> next;
    for (int32_t t : frontier)
      for (int32_t c : g.tensors[t].consumers) {
        const Node& m = g.nodes[c];
        if (m.op_type == "TopK" && depth > 0) return true;
        if ((depth == 0 ? m.op_type == "Sigmoid" : m.op_type == "Add" || m.op_type == "Reshape") &&
            !m.outputs.empty() && m.outputs[0] >= 0)
          next.push_back(m.outputs[0]);
      }
    frontier = std::move(next);
  }
  return false;
}

// Multi-head latent attention's down-projections, q_a_proj and kv_a_proj_with_mqa (DeepseekV3Attention,
// onnx_import/hf_deepseek.cc), on a replicated input: the latent they make is normalized over its features
// (q_a_layernorm, kv_a_layernorm: Pow then ReduceMean over the last axis, after kv_a_proj_with_mqa's Split), which
// a column split would cut; vLLM builds both as ReplicatedLinear (deepseek_v2.py at b863fe5,
// DeepseekV2MLAAttention), the up-projections q_b_proj and kv_b_proj column-parallel.
bool is_replicated_latent(const Graph& g, const Node& n) {
  const int32_t out = n.outputs[0];
  if (out < 0) return false;
  std::vector<int32_t> frontier{out};
  for (int depth = 0; depth < 3 && !frontier.empty(); ++depth) {
    std::vector<int32_t> next;
    for (int32_t t : frontier)
      for (int32_t c : g.tensors[t].consumers) {
        const Node& m = g.nodes[c];
        if (m.op_type == "ReduceMean" && depth > 0) {
          const auto axes = m.attributes.find("axes");
          if (axes != m.attributes.end() && axes->second.ints.size() == 1 &&
              (axes->second.ints[0] == -1 || axes->second.ints[0] == static_cast<int>(g.tensors[t].shape.size()) - 1))
            return true;
        }
        if ((m.op_type == "Split" || m.op_type == "Pow") && !m.outputs.empty())
          for (int32_t o : m.outputs)
            if (o >= 0) next.push_back(o);
      }
    frontier = std::move(next);
  }
  return false;
}

bool chunked_gate_up(const Graph& g, int32_t t) {
  if (t < 0) return false;
  for (int32_t c : g.tensors[t].consumers)
    if (g.nodes[c].op_type == "Split" && g.nodes[c].outputs.size() == 2) return true;
  return false;
}

std::vector<std::pair<int32_t, int32_t>> stacked_biases(const Graph& g, int32_t t) {
  std::vector<std::pair<int32_t, int32_t>> found;
  const Tensor& y = g.tensors[t];
  for (int32_t c : y.consumers) {
    const Node& add = g.nodes[c];
    if (add.op_type != "Add" || add.inputs.size() != 2) continue;
    const int32_t rows = add.inputs[add.inputs[0] == t ? 1 : 0];
    const int32_t gather = rows >= 0 ? g.tensors[rows].producer : -1;
    if (gather < 0 || g.nodes[gather].op_type != "Gather" || g.nodes[gather].inputs.empty()) continue;
    const int32_t bias = g.nodes[gather].inputs[0];
    if (bias < 0) continue;
    const Tensor& b = g.tensors[bias];
    if (b.kind == TensorKind::Weight && b.producer < 0 && b.shape.size() == 2 && b.shape[1] == y.shape.back() &&
        g.tensors[rows].shape.size() == y.shape.size())
      found.emplace_back(bias, rows);
  }
  return found;
}

}  // namespace memplan
