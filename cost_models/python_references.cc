#include "cost_models/python_references.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "cost_models/graph_facts.h"
#include "cost_models/op_fusion.h"

namespace memplan {
namespace {

constexpr const char* kAttentionScope = "/self_attn/";
// The decoder layer's feed-forward module: LlamaDecoderLayer's (and Qwen's, Mistral's) `mlp`, Mixtral's
// `block_sparse_moe`.
constexpr const char* kMlpScopes[] = {"mlp/", "block_sparse_moe/"};

int32_t producer_op(const Graph& g, int32_t t, const char* op) {
  const int32_t p = t < 0 ? -1 : g.tensors[t].producer;
  return p >= 0 && g.nodes[p].op_type == op ? p : -1;
}

int32_t first_input(const Graph& g, int32_t node) {
  return g.nodes[node].inputs.empty() ? -1 : g.nodes[node].inputs[0];
}

// repeat_kv (modeling_llama.py): x[:, :, None, :, :].expand(...).reshape(...), exported as Unsqueeze, Expand,
// Reshape. For `t` that Reshape's output (the copy), the Expand's input (a view of the unrepeated x); else -1.
int32_t unrepeated(const Graph& g, int32_t t) {
  const int32_t reshape = producer_op(g, t, "Reshape");
  const int32_t expand = reshape < 0 ? -1 : producer_op(g, first_input(g, reshape), "Expand");
  return expand < 0 ? -1 : first_input(g, expand);
}

// The last node reading the context `attn_output` once past its transposes (views in PyTorch): the copy that
// `.contiguous()` (or the reshape) makes, before eager_attention_forward returns. The MatMul itself if none.
int32_t context_copy(const Graph& g, int32_t matmul) {
  int32_t t = g.nodes[matmul].outputs.empty() ? -1 : g.nodes[matmul].outputs[0];
  int32_t last = matmul;
  while (t >= 0) {
    const std::vector<int32_t>& readers = g.tensors[t].consumers;
    if (readers.size() == 1 && g.nodes[readers[0]].op_type == "Transpose") {
      last = std::max(last, readers[0]);
      t = g.nodes[readers[0]].outputs.empty() ? -1 : g.nodes[readers[0]].outputs[0];
      continue;
    }
    for (int32_t r : readers) last = std::max(last, r);
    break;
  }
  return last;
}

}  // namespace

std::vector<PythonHold> transformers_attention_holds(const Graph& g, bool eager_attention) {
  std::vector<PythonHold> holds;
  if (!eager_attention) return holds;
  // Each block whose every node is under one `<layer>/self_attn/` scope, by its layer.
  struct Block {
    FusedOp op;
    std::string scope, layer;  // "<layer>/self_attn/", "<layer>/"
  };
  std::vector<Block> blocks;
  std::unordered_map<std::string, int32_t> scope_last;  // the held scopes' last nodes
  for (FusedOp& block : attention_blocks(g)) {
    const std::string& name = g.nodes[block.nodes.back()].name;
    const size_t at = name.find(kAttentionScope);
    if (at == std::string::npos || at == 0) continue;
    const std::string scope = name.substr(0, at) + kAttentionScope;
    bool inside = true;
    for (int32_t n : block.nodes) inside = inside && g.nodes[n].name.compare(0, scope.size(), scope) == 0;
    if (!inside) continue;
    const std::string layer = name.substr(0, at + 1);  // "<layer>/"
    // (1), (5) and (6): the attention's, the layer's and the feed-forward module's inputs from outside them.
    for (const std::string& held : {scope, layer, layer + kMlpScopes[0], layer + kMlpScopes[1]}) scope_last[held] = -1;
    blocks.push_back({std::move(block), scope, layer});
  }
  if (blocks.empty()) return holds;
  // One pass: each held scope's last node and its inputs from outside it.
  std::unordered_map<std::string, std::vector<int32_t>> outside_inputs;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const std::string& name = g.nodes[i].name;
    for (size_t slash = name.find('/', 1); slash != std::string::npos; slash = name.find('/', slash + 1)) {
      const std::string prefix = name.substr(0, slash + 1);
      auto scope = scope_last.find(prefix);
      if (scope == scope_last.end()) continue;
      scope->second = i;
      for (int32_t t : g.nodes[i].inputs) {
        if (t < 0 || is_constant(g, t)) continue;
        const int32_t p = g.tensors[t].producer;
        if (p >= 0 && g.nodes[p].name.compare(0, prefix.size(), prefix) == 0) continue;
        outside_inputs[prefix].push_back(t);
      }
    }
  }
  for (const auto& [scope, inputs] : outside_inputs)
    for (int32_t t : inputs) holds.push_back({t, scope_last.at(scope)});  // a scope without nodes has no inputs
  for (const auto& [block, scope, layer] : blocks) {
    const int32_t end = scope_last.at(scope), matmul = block.nodes.back();
    // (2) and (3): k as the scores' MatMul reads it is the transpose of the keys, repeat_kv's copy under GQA.
    const int32_t transpose = producer_op(g, block.k, "Transpose");
    const int32_t keys = transpose >= 0 ? first_input(g, transpose) : block.k;
    for (int32_t repeated : {keys, block.v}) {
      const int32_t unrepeated_kv = unrepeated(g, repeated);
      if (unrepeated_kv < 0) {
        holds.push_back({repeated, end});
        continue;
      }
      holds.push_back({unrepeated_kv, end});
      holds.push_back({repeated, context_copy(g, matmul)});
    }
    holds.push_back({block.q, end});
    // (4) the probabilities as the MatMul with v reads them, until the decoder layer's last node.
    holds.push_back({first_input(g, matmul), scope_last.at(layer)});
  }
  return holds;
}

}  // namespace memplan
