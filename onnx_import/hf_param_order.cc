#include "onnx_import/hf_param_order.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

// Each name a parameter path holds, in the order its module's __init__ registers it among its siblings. Siblings
// never come from two modules that order them differently, but for deepseek_v3's gate (below), so one list serves
// every model_type. Read in transformers (the commit each file was read at):
//  - LlamaForCausalLM / LlamaModel.__init__ (models/llama/modeling_llama.py, 0022728): model (embed_tokens, layers,
//    norm), then lm_head; a tied head is embed_tokens' tensor, which named_parameters() yields once, as embed_tokens.
//    Every model_type here has that top level (Gemma3TextScaledWordEmbedding's embed_scale is a non-persistent
//    buffer).
//  - The decoder layer: self_attn, then the MLP, then input_layernorm, post_attention_layernorm (LlamaDecoderLayer
//    (mistral's, qwen2's, qwen3's alike), Qwen2MoeDecoderLayer (qwen2_moe/modeling_qwen2_moe.py, 00a3f93),
//    Qwen3MoeDecoderLayer (qwen3_moe, 00d4b3d), MixtralDecoderLayer (mixtral, 00d4b3d: block_sparse_moe),
//    DeepseekV3DecoderLayer (deepseek_v3, 00b676f), Phi3DecoderLayer (phi3, 00d4b3d), GptOss (gpt_oss, 00d4b3d));
//    Gemma2DecoderLayer (gemma2, 006e869) and Gemma3DecoderLayer (gemma3, 0018aa6) then add pre_feedforward_layernorm
//    and post_feedforward_layernorm.
//  - Attention: q_proj, k_proj, v_proj, o_proj (LlamaAttention; each Linear's weight, then its bias); Qwen3's and
//    Gemma 3's q_norm, k_norm after o_proj (Qwen3MoeAttention, Gemma3Attention); Phi3Attention registers o_proj
//    before qkv_proj; DeepseekV3Attention q_proj (q_lora_rank null) or q_a_proj, q_a_layernorm, q_b_proj, then
//    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; GptOssAttention's sinks is its own parameter, so it
//    comes before its children's, whatever the line that registers it.
//  - MLP: gate_proj, up_proj, down_proj (LlamaMLP, Qwen2MoeMLP, DeepseekV3MLP); Phi3MLP gate_up_proj, down_proj.
//  - Sparse blocks: MixtralSparseMoeBlock gate, experts (each MixtralBlockSparseTop2MLP w1, w2, w3);
//    Qwen2MoeSparseMoeBlock gate, experts, shared_expert, shared_expert_gate; Qwen3MoeSparseMoeBlock gate, experts;
//    DeepseekV3MoE (and DeepseekV2MoE, whose DeepseekV2MoEGate has its weight only) experts, gate, shared_experts
//    (DeepseekV3TopkRouter: weight, then the buffer
//    e_score_correction_bias, which the state dict holds after the parameters); GptOssMLP router (GptOssTopKRouter
//    weight, bias), experts (GptOssExperts gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias).
const std::vector<std::string>& registration_order() {
  static const std::vector<std::string> order = {
      "embed_tokens", "layers", "norm", "lm_head",
      "self_attn", "mlp", "block_sparse_moe", "input_layernorm", "post_attention_layernorm",
      "pre_feedforward_layernorm", "post_feedforward_layernorm",
      "sinks", "q_proj", "q_a_proj", "q_a_layernorm", "q_b_proj", "k_proj", "v_proj", "kv_a_proj_with_mqa",
      "kv_a_layernorm", "kv_b_proj", "o_proj", "qkv_proj", "q_norm", "k_norm",
      "router", "gate", "experts", "shared_expert", "shared_expert_gate", "shared_experts",
      "gate_proj", "up_proj", "gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias", "w1", "w2", "w3",
      "w13_weight", "w2_weight",
      "weight", "bias", "e_score_correction_bias"};
  return order;
}

// A parameter path's sort key: per component its place among its siblings (a ModuleList index as itself).
std::vector<int64_t> key(const std::string& name, const std::unordered_map<std::string, int64_t>& rank) {
  std::vector<int64_t> k;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t dot = std::min(name.find('.', start), name.size());
    const std::string part = name.substr(start, dot - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      k.push_back(std::stoll(part));
    } else {
      const auto it = rank.find(part);
      if (it == rank.end())
        throw InternalError("config.json graph: no registration order for \"" + part + "\" in parameter " + name);
      k.push_back(it->second);
    }
    start = dot + 1;
  }
  return k;
}

}  // namespace

void order_as_registered(const DecoderConfig& c, onnx::GraphProto& g) {
  std::unordered_map<std::string, int64_t> rank;
  const auto& order = registration_order();
  for (size_t i = 0; i < order.size(); ++i) rank[order[i]] = 2 * int64_t(i);
  // DeepseekV3MoE and DeepseekV2MoE (transformers' modular_deepseek_v2.py, first release): experts, gate,
  // shared_experts.
  // Qwen3MoeSparseMoeBlock of transformers 5 (the experts class of hf_moe_grouped.h): experts, then gate
  // (MixtralSparseMoeBlock keeps gate, experts).
  if (c.mla || (c.grouped_experts && c.model_type == "qwen3_moe")) rank["gate"] = rank.at("experts") + 1;
  const int n = g.initializer_size();
  std::vector<std::vector<int64_t>> keys;
  keys.reserve(size_t(n));
  for (const onnx::TensorProto& t : g.initializer()) keys.push_back(key(t.name(), rank));
  std::vector<int> wanted(static_cast<size_t>(n));
  std::iota(wanted.begin(), wanted.end(), 0);
  std::stable_sort(wanted.begin(), wanted.end(), [&](int a, int b) { return keys[size_t(a)] < keys[size_t(b)]; });
  // Move the tensors into place by swapping (pointer swaps): at[p] is the original index now at position p.
  std::vector<int> at(wanted.size()), pos(wanted.size());
  std::iota(at.begin(), at.end(), 0);
  std::iota(pos.begin(), pos.end(), 0);
  for (int i = 0; i < n; ++i) {
    const int k = wanted[size_t(i)], p = pos[size_t(k)];
    if (p == i) continue;
    g.mutable_initializer()->SwapElements(i, p);
    const int displaced = at[size_t(i)];
    at[size_t(p)] = displaced, pos[size_t(displaced)] = p;
    at[size_t(i)] = k, pos[size_t(k)] = i;
  }
}

}  // namespace memplan
