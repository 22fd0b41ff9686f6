// find_moe_blocks (cost_models/engine_kernels.h): a mixture of experts' sparse blocks, found by structure.
#include <algorithm>
#include <set>
#include <utility>

#include "cost_models/engine_kernels.h"
#include "cost_models/graph_facts.h"
#include "cost_models/tensor_parallel_patterns.h"

namespace memplan {
namespace {

int32_t producer_of(const Graph& g, int32_t t, const char* op) {
  if (t < 0 || g.tensors[t].producer < 0) return -1;
  const int32_t p = g.tensors[t].producer;
  return g.nodes[p].op_type == op ? p : -1;
}

// index_add_ as the exporter writes it: Add(acc, ScatterElements(zeros, index, source)). The accumulator operand,
// or -1 when `node` is not such an Add.
int32_t accumulator_operand(const Graph& g, const Node& n) {
  if (n.op_type != "Add" || n.inputs.size() != 2) return -1;
  if (producer_of(g, n.inputs[1], "ScatterElements") >= 0) return n.inputs[0];
  if (producer_of(g, n.inputs[0], "ScatterElements") >= 0) return n.inputs[1];
  return -1;
}

// The gate's weight a router's MatMul reads: matmul_weight's, or DeepseekV3TopkRouter's self.weight.type(torch.float32)
// under F.linear's transpose, Transpose(Cast(W)) (onnx_import/hf_deepseek_router.cc).
int32_t router_weight(const Graph& g, int32_t operand) {
  if (const int32_t w = matmul_weight(g, operand); w >= 0) return w;
  const int32_t t = producer_of(g, operand, "Transpose");
  if (t < 0 || g.nodes[t].inputs.empty()) return -1;
  const int32_t cast = producer_of(g, g.nodes[t].inputs[0], "Cast");
  return cast < 0 || g.nodes[cast].inputs.empty() ? -1 : matmul_weight(g, g.nodes[cast].inputs[0]);
}

// torch.argsort as torch.onnx writes it, a TopK with largest=0 (hf_moe_grouped.cc's expert order): no router's
// top-k (a router picks its largest scores).
bool argsort(const Node& n) {
  const auto it = n.attributes.find("largest");
  return n.op_type == "TopK" && it != n.attributes.end() && it->second.i == 0;
}

// An accumulator no further index_add_ reads: the block's result.
bool last_accumulator(const Graph& g, int32_t t) {
  for (int32_t c : g.tensors[t].consumers)
    if (accumulator_operand(g, g.nodes[c]) == t) return false;
  return true;
}

}  // namespace

std::vector<MoeBlock> find_moe_blocks(const Graph& g) {
  std::vector<MoeBlock> blocks;
  for (const Node& topk : g.nodes) {
    if (topk.op_type != "TopK" || topk.inputs.empty() || topk.outputs.empty() || topk.outputs[0] < 0) continue;
    // The router: TopK(Cast(Softmax(MatMul(x, W_gate)))), the Cast optional; or gpt_oss's GptOssTopKRouter,
    // TopK(Gemm(x, W, b)) with the softmax after the top-k (inside the block).
    int32_t probs = topk.inputs[0];
    const int32_t cast = producer_of(g, probs, "Cast");
    if (cast >= 0) probs = g.nodes[cast].inputs[0];
    const int32_t softmax = producer_of(g, probs, "Softmax");
    const int32_t biased = producer_of(g, topk.inputs[0], "Gemm");
    // DeepseekV3TopkRouter (onnx_import/hf_deepseek.cc deepseek_router): TopK(Where(mask, 0, Add(Sigmoid(MatMul(x,
    // W_gate)), bias))), the group-limited choice before the top-k; its ops stay the graph's.
    int32_t sigmoid = -1;
    if (const int32_t where = producer_of(g, topk.inputs[0], "Where");
        softmax < 0 && where >= 0 && g.nodes[where].inputs.size() == 3)
      if (const int32_t add = producer_of(g, g.nodes[where].inputs[2], "Add"); add >= 0)
        for (int32_t in : g.nodes[add].inputs)
          if (producer_of(g, in, "Sigmoid") >= 0) sigmoid = producer_of(g, in, "Sigmoid");
    if (softmax < 0 && biased < 0 && sigmoid < 0) continue;
    const int32_t logits = softmax >= 0   ? g.nodes[softmax].inputs[0]
                           : sigmoid >= 0 ? g.nodes[sigmoid].inputs[0]
                                          : topk.inputs[0];
    const int32_t gate = softmax >= 0 || sigmoid >= 0 ? producer_of(g, logits, "MatMul") : biased;
    if (gate < 0 || g.nodes[gate].inputs.size() < 2) continue;
    const int32_t w = g.nodes[gate].inputs[1];
    if (softmax >= 0 || sigmoid >= 0 ? router_weight(g, w) < 0 : w < 0 || g.tensors[w].kind != TensorKind::Weight)
      continue;
    const Tensor& l = g.tensors[logits];
    const Tensor& x = g.tensors[g.nodes[gate].inputs[0]];
    if (l.shape.size() != 2 || x.shape.empty() || g.tensors[topk.outputs[0]].shape.empty()) continue;
    MoeBlock b;
    b.topk = topk.name;
    b.tokens = l.shape[0];
    b.experts = l.shape[1];
    b.hidden = x.shape.back();
    b.top_k = g.tensors[topk.outputs[0]].shape.back();
    std::set<int32_t> held;
    if (softmax >= 0) held.insert(probs);
    if (softmax >= 0 && cast >= 0) held.insert(g.nodes[cast].outputs[0]);
    std::set<int32_t> seen_nodes;
    std::vector<std::pair<int32_t, int32_t>> reads, stacked;  // (node, weight): MatMuls, stacked projections
    std::vector<int32_t> stack;
    for (int32_t o : topk.outputs)
      if (o >= 0) stack.push_back(o);
    int32_t result = -1;
    bool escaped = false;
    while (!stack.empty() && !escaped) {
      const int32_t t = stack.back();
      stack.pop_back();
      if (!held.insert(t).second) continue;
      if (is_graph_output(g, t)) escaped = true;
      for (int32_t c : g.tensors[t].consumers) {
        if (!seen_nodes.insert(c).second) continue;
        const Node& n = g.nodes[c];
        if (n.op_type == "TopK" && !argsort(n)) escaped = true;  // another block's router: no result in between
        if (n.op_type == "MatMul" && n.inputs.size() == 2 && matmul_weight(g, n.inputs[1]) >= 0) {
          reads.emplace_back(c, matmul_weight(g, n.inputs[1]));
          if (b.expert_linears++ == 0 && !n.outputs.empty() && n.outputs[0] >= 0 &&
              !g.tensors[n.outputs[0]].shape.empty())
            b.expert_intermediate = g.tensors[n.outputs[0]].shape.back();
        }
        // The stacked experts' projections (counted below).
        const int32_t experts = grouped_mm_experts(g, n);
        if (experts >= 0 && !n.outputs.empty() && n.outputs[0] >= 0 && !g.tensors[n.outputs[0]].shape.empty())
          stacked.emplace_back(c, experts);
        const int32_t acc = accumulator_operand(g, n);
        if (acc >= 0 && g.tensors[acc].producer >= 0 &&
            g.nodes[g.tensors[acc].producer].op_type == "ConstantOfShape")
          held.insert(acc);  // the first accumulator: zeros of the tokens' shape (torch.zeros_like)
        for (int32_t o : n.outputs) {
          if (o < 0) continue;
          if (acc >= 0 && last_accumulator(g, o)) {
            if (result >= 0 && result != o) escaped = true;
            result = o;
            continue;
          }
          stack.push_back(o);
        }
      }
    }
    // A stacked projection (aten::_grouped_mm on [E, in, out]) stands for one linear an expert, two where its output
    // is chunked into gate and up (a Split into two: MixtralExperts' gate_up_proj, vLLM's w13), so that both forms
    // give the per-expert loop's count; the width from the first in the graph's order (gate and up).
    std::sort(reads.begin(), reads.end());
    std::sort(stacked.begin(), stacked.end());
    for (const auto& [node, w] : stacked) {
      const int32_t out = g.nodes[node].outputs[0];
      const bool chunked = chunked_gate_up(g, out);
      if (b.expert_linears == 0) b.expert_intermediate = g.tensors[out].shape.back() / (chunked ? 2 : 1);
      b.expert_linears += static_cast<int>(g.tensors[w].shape[0]) * (chunked ? 2 : 1);
    }
    for (const auto& [node, w] : reads.empty() ? stacked : reads) b.weights.push_back(g.tensors[w].name);
    if (escaped || result < 0 || b.expert_linears == 0) continue;
    // Two projections an expert (GptOssExperts' gate_up_proj [E, H, 2I] and down_proj): the first one's output
    // features are gate and up together, 2I.
    if (b.expert_linears == 2 * b.experts) b.expert_intermediate /= 2;
    b.result = g.tensors[result].name;
    held.erase(result);
    for (int32_t t : held) b.tensors.push_back(g.tensors[t].name);
    blocks.push_back(std::move(b));
  }
  return blocks;
}

}  // namespace memplan
