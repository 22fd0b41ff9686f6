// Mixture-of-experts configs and sparse blocks (onnx_import/hf_moe.h): the keys of transformers' MixtralConfig,
// Qwen2MoeConfig and Qwen3MoeConfig, and the sparse block as torch.onnx.export (torch 1.13, opset 17, training
// export) writes tests/models/hf_moe.py's SparseMoeBlock. tests/import/hf_moe_test.py checks it node for node.
#include "onnx_import/hf_moe.h"

#include <limits>
#include <map>

#include "onnx_import/decoder_builder.h"
#include "onnx_import/hf_config_keys.h"

namespace memplan {

using nlohmann::json;
using onnx::TensorProto;
using namespace hf;

namespace {

bool mixtral(const DecoderConfig& c) { return c.model_type == "mixtral"; }

}  // namespace

std::string moe_dense_type(const std::string& model_type) {
  if (model_type == "mixtral") return "mistral";
  if (model_type == "qwen2_moe") return "qwen2";
  if (model_type == "qwen3_moe") return "qwen3";
  return model_type;
}

// MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig. router_aux_loss_coef weighs the load-balancing loss, which exists
// only with output_router_logits (refused below): it changes no graph.
const std::set<std::string>& moe_keys(const std::string& model_type) {
  static const std::map<std::string, std::set<std::string>> keys = {
      {"mixtral", {"num_local_experts", "num_experts_per_tok", "output_router_logits", "router_aux_loss_coef",
                   "router_jitter_noise"}},
      {"qwen2_moe", {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                     "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "output_router_logits",
                     "router_aux_loss_coef"}},
      {"qwen3_moe", {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                     "decoder_sparse_step", "mlp_only_layers", "output_router_logits", "router_aux_loss_coef"}}};
  static const std::set<std::string> none;
  const auto it = keys.find(model_type);
  return it == keys.end() ? none : it->second;
}

void parse_moe(const std::string& path, const json& j, DecoderConfig& c) {
  // MixtralForCausalLM / Qwen2MoeForCausalLM add the load-balancing loss over every layer's router logits when
  // output_router_logits is set (load_balancing_loss_func): a loss memplan's graph does not hold.
  require_value(path, j, "output_router_logits", false, "the load-balancing loss over every layer's router logits");
  const int64_t layers = c.num_hidden_layers;
  if (mixtral(c)) {
    // MixtralSparseMoeBlock.forward: in training, hidden_states *= uniform noise when router_jitter_noise > 0.
    require_value(path, j, "router_jitter_noise", 0.0, "the router's jitter multiplies the tokens by a noise tensor");
    c.num_experts = int_key(path, j, "num_local_experts", kMaxExperts);
    c.expert_intermediate_size = c.intermediate_size;  // MixtralBlockSparseTop2MLP: ffn_dim = intermediate_size
    c.norm_topk_prob = true;                            // routing_weights /= routing_weights.sum(...), always
    c.moe_layers.assign(size_t(layers), true);
  } else {
    c.num_experts = int_key(path, j, "num_experts", kMaxExperts);
    c.expert_intermediate_size = int_key(path, j, "moe_intermediate_size", kMaxDimension);
    if (c.model_type == "qwen2_moe")
      c.shared_expert_intermediate_size = int_key(path, j, "shared_expert_intermediate_size", kMaxDimension);
    c.norm_topk_prob = bool_key(path, j, "norm_topk_prob", false);  // Qwen2MoeConfig / Qwen3MoeConfig: False
    // Qwen2MoeDecoderLayer: sparse when layer_idx not in mlp_only_layers and (layer_idx + 1) % decoder_sparse_step
    // == 0 (defaults 1 and []).
    const auto step_it = j.find("decoder_sparse_step");
    const int64_t step = step_it == j.end() || step_it->is_null()
                             ? 1 : positive_int(path, *step_it, "decoder_sparse_step", layers);
    c.moe_layers.resize(size_t(layers));
    for (int64_t l = 0; l < layers; ++l) c.moe_layers[size_t(l)] = (l + 1) % step == 0;
    const auto only = j.find("mlp_only_layers");
    if (only != j.end() && !only->is_null()) {
      if (!only->is_array()) fail(path, "config key \"mlp_only_layers\" must be a list of layer indices");
      for (const json& v : *only) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= layers)
          fail(path, "config key \"mlp_only_layers\" holds " + v.dump() + "; layers are 0 to " +
                         std::to_string(layers - 1));
        c.moe_layers[size_t(v.get<int64_t>())] = false;
      }
    }
  }
  c.experts_per_token = int_key(path, j, "num_experts_per_tok", kMaxExperts);
  if (c.experts_per_token > c.num_experts)
    fail(path, "config key \"num_experts_per_tok\" is " + std::to_string(c.experts_per_token) + ", more than the " +
                   std::to_string(c.num_experts) + " experts");
  int64_t sparse = 0;
  for (bool s : c.moe_layers) sparse += s;
  if (sparse * c.num_experts > kMaxExpertBlocks)
    fail(path, std::to_string(c.num_experts) + " experts in " + std::to_string(sparse) +
                   " layers are more expert blocks than memplan builds (" + std::to_string(kMaxExpertBlocks) + ")");
}

// nn.Linear without bias on a 2-D input, its weight declared already: Transpose, MatMul
// (torch/onnx/symbolic_opset9.py linear).
std::string LlamaBuilder::weight_matmul(const std::string& scope, const std::string& weight, const std::string& x) {
  const std::string saved = e_.scope;
  e_.scope = scope;
  const std::string y = e_.op("MatMul", {x, transpose_weight(weight)});
  e_.scope = saved;
  return y;
}

// x[start:end:step] on axis 0: the Slice symbolic's axes, starts, ends, steps Constants (symbolic_opset10.py slice).
std::string LlamaBuilder::strided(const std::string& x, int64_t start, int64_t step, int64_t end) {
  const std::string axes = e_.const_i64({0}, false), starts = e_.const_i64({start}, false);
  const std::string ends = e_.const_i64({end}, false);
  const std::string steps = e_.const_i64({step}, false);
  return e_.op("Slice", {x, starts, ends, axes, steps});
}

// acc.index_add_(0, index, source) on (N, h): symbolic_opset9.py index_add (source expanded to acc[0:1]'s shape,
// index unsqueezed and expanded to the source's) as the exporter's in-place pass writes it, acc + a scatter into
// zeros of acc's shape.
std::string LlamaBuilder::index_add(const std::string& acc, const std::string& index, const std::string& source) {
  const std::string axes = e_.const_i64({0, 1}, false), starts = e_.const_i64({0, 0}, false);
  const std::string ends = e_.const_i64({1, std::numeric_limits<int64_t>::max()}, false);
  const std::string row = e_.op("Slice", {acc, starts, ends, axes});
  const std::string src = e_.op("Expand", {source, e_.op("Shape", {row})});
  const std::string column = e_.op("Unsqueeze", {index, e_.const_i64({1}, false)});
  const std::string idx = e_.op("Expand", {column, e_.op("Shape", {src})});
  const std::string zeros = e_.op("ConstantOfShape", {e_.op("Shape", {acc})});
  const float zero = 0.0f;
  e_.tensor("value", TensorProto::FLOAT, {1}, &zero, 4);
  const std::string scattered = e_.op("ScatterElements", {zeros, idx, src});
  e_.i("axis", 0);
  return e_.op("Add", {acc, scattered});
}

// MixtralBlockSparseTop2MLP: w2(silu(w1(x)) * w3(x)), its parameters registered w1, w2, w3; Qwen2MoeMLP:
// down_proj(silu(gate_proj(x)) * up_proj(x)).
std::string LlamaBuilder::moe_expert(const std::string& s, const std::string& p, const std::string& x, int64_t f,
                                     bool mixtral_names) {
  const int64_t h = c_.hidden_size;
  const char* names[3] = {"gate_proj", "up_proj", "down_proj"};
  if (mixtral_names) {
    names[0] = "w1", names[1] = "w3", names[2] = "w2";
    param(p + ".w1.weight", {f, h}), param(p + ".w2.weight", {h, f}), param(p + ".w3.weight", {f, h});
  } else {
    param(p + ".gate_proj.weight", {f, h}), param(p + ".up_proj.weight", {f, h});
    param(p + ".down_proj.weight", {h, f});
  }
  auto weight = [&](int k) { return p + "." + names[k] + ".weight"; };
  const std::string gate = weight_matmul(s + "/" + names[0], weight(0), x);
  e_.scope = s;
  const std::string silu = e_.op("Mul", {gate, e_.op("Sigmoid", {gate})});
  const std::string up = weight_matmul(s + "/" + names[1], weight(1), x);
  const std::string product = e_.op("Mul", {silu, up});
  return weight_matmul(s + "/" + names[2], weight(2), product);
}

// The router of mixtral, qwen2_moe and qwen3_moe (the gate Linear, softmax in float32, top-k, divided by their sum
// when the config normalizes, cast) on the (N, h) tokens: the top-k weights; `indices`, when given, gets top-k's
// expert indices (its second output).
std::string LlamaBuilder::moe_router(const std::string& m, const std::string& p, const std::string& hidden,
                                     std::string* indices) {
  const std::string logits = linear(m + "/gate", p + ".gate", hidden, c_.hidden_size, c_.num_experts, false);
  // F.softmax(router_logits, dim=1, dtype=torch.float): Softmax, then the cast to float.
  std::string probs = e_.op("Softmax", {logits});
  e_.i("axis", 1);
  probs = e_.op("Cast", {probs});
  e_.i("to", TensorProto::FLOAT);
  // torch.topk(routing_weights, k, dim=-1): k the pooled Python int, reshaped to [1] (symbolic_opset11.py topk).
  const std::string pooled_k = e_.pooled(c_.experts_per_token);
  const std::string k_list = reshape(pooled_k, e_.const_i64({1}, false));
  std::string weights = e_.op("TopK", {probs, k_list}, 2);
  e_.i("axis", -1).i("largest", 1).i("sorted", 1);
  if (indices) *indices = e_.output(1);
  if (c_.norm_topk_prob) {  // routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    const std::string sum = e_.op("ReduceSum", {weights, e_.pooled_list(-1, "ReduceSum")});
    e_.i("keepdims", 1);
    weights = e_.op("Div", {weights, sum});
  }
  weights = e_.op("Cast", {weights});  // .to(hidden_states.dtype)
  e_.i("to", TensorProto::FLOAT);
  return weights;
}

// SparseMoeBlock.forward of tests/models/hf_moe.py (hf_moe.h), on the post-attention norm's (b, s, h) output.
std::string LlamaBuilder::moe_block(int64_t l, const std::string& x) {
  // hf_moe_grouped.cc: transformers 5's grouped experts, and serve's engines' stacked ones (hf_moe.h)
  if (c_.grouped_experts || c_.engine_experts) return grouped_moe_block(l, x);
  const std::string m = "/layers." + std::to_string(l) + (mixtral(c_) ? "/block_sparse_moe" : "/mlp");
  const std::string p = "layers." + std::to_string(l) + (mixtral(c_) ? ".block_sparse_moe" : ".mlp");
  const int64_t h = c_.hidden_size, experts = c_.num_experts, k = c_.experts_per_token;
  // DeepSeek's gates view the (b, s, h) states themselves (the view the block's own shares, written in the gate's
  // scope); DeepseekV3MoE.moe also accumulates in the top-k weights' float32.
  const bool float32_accumulator = c_.mla && !c_.deepseek_v2;
  e_.scope = c_.mla ? m + "/gate" : m;
  const std::string hidden = reshape(x, e_.const_i64({-1, h}, false));  // x.view(-1, hidden_dim)
  e_.scope = m;
  // gpt_oss: GptOssTopKRouter, then GptOssExperts' loop in the experts' scope (hf_gpt_oss.cc).
  const std::string loop = c_.gpt_oss ? m + "/experts" : m;
  const std::string weights = route(m, p, hidden, nullptr);
  e_.scope = loop;
  // Balanced routing (hf_moe.h): pair_weights = weights.reshape(-1); the pairs' tokens arange(N·k) // k.
  const std::string pair_weights = reshape(weights, e_.const_i64({-1}, false));
  const std::string shape = e_.op("Shape", {pair_weights});
  std::string pairs = e_.op("Gather", {shape, e_.const_i64({0}, true)});
  e_.i("axis", 0);
  pairs = e_.op("Cast", {pairs});
  e_.i("to", TensorProto::INT64);
  const std::string start = e_.const_i64({0}, true), step = e_.const_i64({1}, true);
  const std::string range = e_.op("Range", {start, pairs, step});
  // torch.div(pairs, k, rounding_mode="trunc"): Div, then two casts to int64 (symbolic_opset9.py _trunc_divide).
  std::string tokens = e_.op("Div", {range, e_.const_i64({k}, true)});
  tokens = e_.op("Cast", {tokens});
  e_.i("to", TensorProto::INT64);
  tokens = e_.op("Cast", {tokens});
  e_.i("to", TensorProto::INT64);
  // The pairs expert e receives: balanced, pair_token[e::E]; worst, pair_token[e::k] for the first k experts (every
  // token's slot e) and pair_token[0:0] for the rest.
  constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
  auto pairs_of = [&](const std::string& x, int64_t e) {
    const int64_t start = c_.worst_routing && e >= k ? 0 : e, step = !c_.worst_routing ? experts : e < k ? k : 1;
    const int64_t end = c_.worst_routing && e >= k ? 0 : kEnd;
    // x[0::1] is traced and then dropped by the exporter as a no-op slice (k = 1, or one expert).
    return start == 0 && step == 1 && end == kEnd ? x : strided(x, start, step, end);
  };
  std::string expanded, acc, last_index, last_source, empty_index, empty_state, empty_weights;
  for (int64_t e = 0; e < experts; ++e) {
    // The JIT's common-subexpression pass merges equal pure ops: the worst rule's empty experts share the first
    // one's top_x and gathered state, and their weights' slice unless it reads the top-k weights divided in place
    // (norm_topk_prob), which the pass leaves apart.
    // deepseek_v3's prefill export leaves each empty expert its own top_x and gathered state (observed in
    // torch.onnx.export's graph of hf_deepseek.py, its weights' slice still shared; its train and decode share all).
    const bool empty = c_.worst_routing && e >= k;
    const bool apart = c_.mla && kind_ == ConfigGraph::Prefill;
    std::string index = empty_index, state = empty_state;
    if (!empty || empty_state.empty() || apart) {
      index = pairs_of(tokens, e);  // top_x
      if (c_.gpt_oss) {  // hidden_states[token_idx]
        state = e_.op("Gather", {hidden, index});
        e_.i("axis", 0);
      } else {
        if (e == 0) expanded = e_.op("Unsqueeze", {hidden, e_.const_i64({0}, false)});  // hidden_states[None]
        const std::string picked = e_.op("Gather", {expanded, index});
        e_.i("axis", 1);
        state = reshape(picked, e_.const_i64({-1, h}, false));
      }
      if (empty) empty_index = index, empty_state = state;
    }
    const std::string name = "experts." + std::to_string(e);
    const std::string out = c_.gpt_oss ? gpt_oss_expert(loop, p + ".experts", e, state)
                                       : moe_expert(m + "/" + name, p + "." + name, state, c_.expert_intermediate_size,
                                                    mixtral(c_));
    e_.scope = loop;
    std::string w = empty_weights;
    if (!empty || empty_weights.empty()) {
      w = e_.op("Unsqueeze", {pairs_of(pair_weights, e), e_.const_i64({1}, false)});
      if (empty && (!c_.norm_topk_prob || c_.mla)) empty_weights = w;  // deepseek's: a Mul's output
    }
    std::string source = e_.op("Mul", {out, w});
    // .to(hidden_states.dtype); DeepseekV3MoE.moe adds expert_output * expert_weights.unsqueeze(-1) as it is, into
    // torch.zeros_like(hidden_states, dtype=topk_weights.dtype) (modeling_deepseek_v3.py at f5a9ec5).
    if (!float32_accumulator) {
      source = e_.op("Cast", {source});
      e_.i("to", TensorProto::FLOAT);
    }
    // The exporter writes each index_add_ after the next expert's work, and the zeros accumulator
    // (torch.zeros_like) after the first expert's.
    if (e == 0) {
      acc = e_.op("ConstantOfShape", {e_.op("Shape", {hidden})});
      const float zero = 0.0f;
      e_.tensor("value", TensorProto::FLOAT, {1}, &zero, 4);
    } else {
      acc = index_add(acc, last_index, last_source);
    }
    last_index = index, last_source = source;
  }
  acc = index_add(acc, last_index, last_source);
  if (float32_accumulator) {  // final_hidden_states.type(hidden_states.dtype)
    acc = e_.op("Cast", {acc});
    e_.i("to", TensorProto::FLOAT);
  }
  if (c_.mla) return add_deepseek_shared(m, p, x, acc);
  if (c_.shared_expert_intermediate_size > 0) acc = add_shared_expert(m, p, hidden, h, acc);
  e_.scope = m;
  return reshape(acc, e_.op("Shape", {x}));  // .view_as(x)
}

std::string LlamaBuilder::route(const std::string& m, const std::string& p, const std::string& hidden,
                                std::string* indices) {
  if (c_.gpt_oss) return gpt_oss_router(m, p, hidden, indices);  // GptOssTopKRouter (hf_gpt_oss.cc)
  // DeepseekV3MoE: DeepseekV3TopkRouter's weights (hf_deepseek_router.cc), float32, no cast
  if (c_.mla) return deepseek_router(m + "/gate", p + ".gate", hidden, indices);
  return moe_router(m, p, hidden, indices);
}

// DeepseekV3MoE.forward (and DeepseekV2MoE's): the routed output viewed back, plus shared_experts on the block's
// input, in the current scope (the reshape) and the block's (the add).
std::string LlamaBuilder::add_deepseek_shared(const std::string& m, const std::string& p, const std::string& x,
                                              const std::string& acc) {
  const std::string routed = reshape(acc, e_.op("Shape", {x}));
  const std::string shared = moe_expert(m + "/shared_experts", p + ".shared_experts", x,
                                        c_.expert_intermediate_size * c_.n_shared_experts, false);
  e_.scope = m;
  return e_.op("Add", {routed, shared});
}

std::string LlamaBuilder::add_shared_expert(const std::string& m, const std::string& p, const std::string& hidden,
                                            int64_t h, const std::string& acc) {
  const std::string shared = moe_expert(m + "/shared_expert", p + ".shared_expert", hidden,
                                        c_.shared_expert_intermediate_size, false);
  const std::string gate = linear(m + "/shared_expert_gate", p + ".shared_expert_gate", hidden, h, 1, false);
  e_.scope = m;
  return e_.op("Add", {acc, e_.op("Mul", {e_.op("Sigmoid", {gate}), shared})});
}

}  // namespace memplan
