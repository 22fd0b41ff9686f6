// gpt_oss's config keys and the parts of its graph the other decoders do not have (onnx_import/hf_gpt_oss.h), each
// as torch.onnx.export (torch 1.13, opset 17) writes tests/models/hf_gpt_oss.py's modules.
#include "onnx_import/hf_gpt_oss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "onnx_import/decoder_builder.h"
#include "onnx_import/hf_config_keys.h"

namespace memplan {

using nlohmann::json;
using onnx::TensorProto;
using namespace hf;

// GptOssConfig's keys beyond the shared ones (configuration_gpt_oss.py). experts_per_token and
// initial_context_length are the Hub configs' copies of openai/gpt-oss's own names, read by neither transformers'
// modeling code (num_experts_per_tok, max_position_embeddings) nor memplan beyond the check that they agree;
// router_aux_loss_coef weighs the load-balancing loss, which exists only with output_router_logits (refused).
const std::set<std::string>& gpt_oss_keys(const std::string& model_type) {
  static const std::set<std::string> keys = {"num_local_experts", "num_experts_per_tok", "experts_per_token",
                                             "swiglu_limit", "layer_types", "output_router_logits",
                                             "router_aux_loss_coef", "initial_context_length"};
  static const std::set<std::string> none;
  return model_type == "gpt_oss" ? keys : none;
}

void parse_gpt_oss(const std::string& path, const json& j, DecoderConfig& c) {
  c.gpt_oss = c.hf_arch = true;
  const int64_t layers = c.num_hidden_layers;
  require_value(path, j, "output_router_logits", false, "the load-balancing loss over every layer's router logits");
  if (!bool_key(path, j, "attention_bias", false))
    fail(path, "config key \"attention_bias\" must be true: memplan builds GptOssAttention with its q/k/v/o biases, as "
               "every published gpt-oss config has them");
  if (c.mlp_bias) fail(path, "config key \"mlp_bias\" is not a gpt_oss key: GptOssExperts' biases are fixed");
  if (!j.contains("rope_theta")) fail(path, "config key \"rope_theta\" is missing");
  c.attn_multiplier = std::pow(double(c.head_dim), -0.5);  // GptOssAttention.scaling = head_dim**-0.5
  // rope_scaling: null, or yarn (_compute_yarn_parameters reads factor, beta_fast, beta_slow,
  // original_max_position_embeddings, truncate; attention_factor and mscale are refused).
  const auto scaling = j.find("rope_scaling");
  if (scaling != j.end() && !scaling->is_null()) {
    static const std::set<std::string> yarn_keys = {"rope_type", "type", "factor", "beta_fast", "beta_slow",
                                                    "original_max_position_embeddings", "truncate"};
    const json type = scaling->is_object() ? scaling->value("rope_type", scaling->value("type", json())) : json();
    if (type != "yarn" || !scaling->contains("factor"))
      fail(path, "config key \"rope_scaling\" is " + scaling->dump() + "; memplan reads null or rope_type yarn");
    for (const auto& [key, value] : scaling->items())
      if (!yarn_keys.count(key)) fail(path, "rope_scaling key \"" + key + "\" is not read by memplan's yarn");
    c.yarn_factor = positive_number(path, *scaling, "factor");
    auto number_or = [&](const char* key, double absent) {  // `or 32`, `or 1`: null and absent take the default
      return scaling->contains(key) && !(*scaling)[key].is_null() ? positive_number(path, *scaling, key) : absent;
    };
    c.yarn_beta_fast = number_or("beta_fast", 32), c.yarn_beta_slow = number_or("beta_slow", 1);
    const auto original = scaling->find("original_max_position_embeddings");
    c.yarn_original = original == scaling->end() || original->is_null()
                          ? c.max_position_embeddings
                          : positive_int(path, *original, "original_max_position_embeddings", int64_t{1} << 40);
    c.yarn_truncate = bool_key(path, *scaling, "truncate", true);
    c.rope_attention = c.yarn_factor <= 1 ? 1.0 : 0.1 * std::log(c.yarn_factor) + 1.0;  // get_mscale(factor)
  }
  // layer_types, else GptOssConfig's default: layer i sliding when (i + 1) % 2 (the even layers).
  c.mask_window = positive_int(path, require(path, j, "sliding_window"), "sliding_window", int64_t{1} << 40);
  c.sliding_layers.resize(size_t(layers));
  for (int64_t l = 0; l < layers; ++l) c.sliding_layers[size_t(l)] = (l + 1) % 2 != 0;
  read_layer_types(path, j, c.sliding_layers);
  // GptOssExperts: num_local_experts experts of width intermediate_size on every layer.
  c.num_experts = int_key(path, j, "num_local_experts", kMaxExperts);
  c.experts_per_token = int_key(path, j, "num_experts_per_tok", kMaxExperts);
  if (j.contains("experts_per_token") && !j["experts_per_token"].is_null() &&
      j["experts_per_token"] != j["num_experts_per_tok"])
    fail(path, "config keys \"experts_per_token\" and \"num_experts_per_tok\" differ");
  if (c.experts_per_token > c.num_experts)
    fail(path, "config key \"num_experts_per_tok\" is " + std::to_string(c.experts_per_token) + ", more than the " +
                   std::to_string(c.num_experts) + " experts");
  if (layers * c.num_experts > kMaxExpertBlocks)
    fail(path, std::to_string(c.num_experts) + " experts in " + std::to_string(layers) +
                   " layers are more expert blocks than memplan builds (" + std::to_string(kMaxExpertBlocks) + ")");
  c.expert_intermediate_size = c.intermediate_size;
  c.moe_layers.assign(size_t(layers), true);
  c.swiglu_limit = j.contains("swiglu_limit") && !j["swiglu_limit"].is_null()
                       ? positive_number(path, j, "swiglu_limit") : 7.0;  // GptOssConfig's default
}

// GptOssRotaryEmbedding's inv_freq as a (1, head_dim / 2) constant: the default 1 / theta^(2k / dim), or yarn's
// blend of it and its interpolation (_compute_yarn_parameters), each step in float32 as torch computes it.
std::string LlamaBuilder::gpt_oss_inv_freq() {
  const int64_t dim = c_.head_dim;
  if (c_.yarn_factor == 0) return inverse_frequencies(c_.rope_theta, dim, 1.0);
  const double base = c_.rope_theta;
  auto correction_dim = [&](double rotations) {
    return (double(dim) * std::log(double(c_.yarn_original) / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = correction_dim(c_.yarn_beta_fast), high = correction_dim(c_.yarn_beta_slow);
  if (c_.yarn_truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  std::vector<float> inv;
  for (int64_t k = 0; k < dim / 2; ++k) {
    const float pos = float(std::pow(double(float(base)), double(float(2 * k) / float(dim))));
    const float extrapolation = 1.0f / pos, interpolation = 1.0f / (float(c_.yarn_factor) * pos);
    const float ramp = std::clamp((float(k) - float(low)) / float(high - low), 0.0f, 1.0f);
    const float factor = 1.0f - ramp;
    inv.push_back(interpolation * (1.0f - factor) + extrapolation * factor);
  }
  return e_.const_f32(inv, {1, int64_t(inv.size())});
}

// GptOssRotaryEmbedding.forward's cos and sin of the (…, head_dim / 2) frequencies times attention_scaling.
void LlamaBuilder::gpt_oss_table(const std::string& freqs, std::string& cos, std::string& sin) {
  const float scaling = float(c_.rope_attention);
  cos = e_.op("Mul", {e_.op("Cos", {freqs}), e_.const_f32({scaling}, {})});
  sin = e_.op("Mul", {e_.op("Sin", {freqs}), e_.const_f32({scaling}, {})});
}

// _apply_rotary_emb: torch.chunk(x, 2, dim=-1)'s halves (two last-axis slices), first * cos - second * sin and
// second * cos + first * sin, concatenated.
std::string LlamaBuilder::gpt_oss_rotary(const std::string& x, const std::string& cos, const std::string& sin) {
  const int64_t half = c_.head_dim / 2;
  const std::string first = slice_last(x, 3, 0, half);
  const std::string second = slice_last(x, 3, half, std::numeric_limits<int64_t>::max());
  const std::string a = e_.op("Sub", {e_.op("Mul", {first, cos}), e_.op("Mul", {second, sin})});
  const std::string b = e_.op("Add", {e_.op("Mul", {second, cos}), e_.op("Mul", {first, sin})});
  const std::string out = e_.op("Concat", {a, b});
  e_.i("axis", -1);
  return out;
}

// eager_attention_forward's sinks on the masked scores (batch, heads, new, total): sinks.reshape(1, -1, 1, 1)
// expanded to (batch, heads, new, 1), concatenated, minus the row maximum, softmax, [..., :-1].
std::string LlamaBuilder::sink_softmax(const std::string& sinks, const std::string& masked) {
  const std::string column = reshape(sinks, e_.const_i64({1, -1, 1, 1}, false));
  const std::string expanded = expand_to(column, {b_, e_.pooled(c_.num_attention_heads), s_, e_.pooled(1)});
  const std::string combined = e_.op("Concat", {masked, expanded});
  e_.i("axis", -1);
  const std::string max = e_.op("ReduceMax", {combined});
  e_.ints("axes", {-1}).i("keepdims", 1);
  std::string probs = e_.op("Softmax", {e_.op("Sub", {combined, max})});
  e_.i("axis", -1);
  probs = e_.op("Cast", {probs});  // F.softmax(..., dtype=combined_logits.dtype)
  e_.i("to", TensorProto::FLOAT);
  return slice_last(probs, 3, 0, -1);
}

// GptOssDecoderLayer.forward; its parameters in the module's order: self_attn's, mlp's, then the two norms.
std::string LlamaBuilder::gpt_oss_layer(int64_t l, const std::string& x) {
  const std::string scope = "/layers." + std::to_string(l), p = "layers." + std::to_string(l) + ".";
  const std::string attended =
      arch_attention(l, rms_norm(scope + "/input_layernorm", p + "input_layernorm.weight", x, true));
  e_.scope = scope;
  const std::string h1 = e_.op("Add", {x, attended});
  const std::string y = rms_norm(scope + "/post_attention_layernorm", p + "post_attention_layernorm.weight", h1, true);
  const std::string sparse = moe_block(l, y);
  e_.scope = scope;
  param(p + "input_layernorm.weight", {c_.hidden_size}), param(p + "post_attention_layernorm.weight", {c_.hidden_size});
  return e_.op("Add", {h1, sparse});
}

// GptOssTopKRouter on the (tokens, hidden) states: F.linear with bias on a 2-D input (addmm: a Gemm, symbolic_opset9
// linear), torch.topk(logits, k), softmax over the k values with their dtype (a Cast to float).
std::string LlamaBuilder::gpt_oss_router(const std::string& m, const std::string& p, const std::string& hidden,
                                        std::string* indices) {
  e_.scope = m + "/router";
  const std::string logits = e_.op("Gemm", {hidden, param(p + ".router.weight", {c_.num_experts, c_.hidden_size}),
                                            param(p + ".router.bias", {c_.num_experts})});
  e_.f("alpha", 1.0f).f("beta", 1.0f).i("transB", 1);
  // torch.topk's k: the pooled int reshaped to [1] (symbolic_opset11.py topk), as hf_moe.cc's router.
  const std::string k_list = reshape(e_.pooled(c_.experts_per_token), e_.const_i64({1}, false));
  const std::string top = e_.op("TopK", {logits, k_list}, 2);
  e_.i("axis", -1).i("largest", 1).i("sorted", 1);
  if (indices) *indices = e_.output(1);
  std::string weights = e_.op("Softmax", {top});
  e_.i("axis", 1);
  weights = e_.op("Cast", {weights});  // softmax(..., dtype=router_top_value.dtype)
  e_.i("to", TensorProto::FLOAT);
  return weights;
}

// The pooled Python float `value` of the module's code (the clamp's limit and its negation): one float64 Constant at
// its first use, in that use's scope, read by every later use (the JIT's constant pooling, as GraphEmitter::pooled).
std::string LlamaBuilder::pooled_double(double value) {
  auto [it, fresh] = pooled_doubles_.emplace(value, std::string());
  if (fresh) {
    it->second = e_.op("Constant", {});
    e_.tensor("value", TensorProto::DOUBLE, {}, &value, sizeof value);
  }
  return it->second;
}

// x.clamp(min, max) with Python float bounds (symbolic_opset11.py clamp): each bound cast to the input's type, and
// with only a maximum (clamp_max) cast once more; a Clip with "" for the absent minimum.
std::string LlamaBuilder::clamp(const std::string& x, bool lower, double limit) {
  auto cast = [&](const std::string& v) {
    const std::string y = e_.op("Cast", {v});
    e_.i("to", TensorProto::FLOAT);
    return y;
  };
  if (!lower) {
    const std::string high = cast(cast(pooled_double(limit)));
    e_.unused_value();  // clamp_max's min = unused(g)
    return e_.op("Clip", {x, std::string(), high});
  }
  const std::string low = cast(pooled_double(-limit));
  return e_.op("Clip", {x, low, cast(pooled_double(limit))});
}

// One expert of GptOssExperts.forward on its gathered rows `x`, in the experts' scope `s` (`p`: their parameters'
// prefix): the expert's slices of the stacked parameters (Gather by the pooled index e), the clamped SwiGLU.
std::string LlamaBuilder::gpt_oss_expert(const std::string& s, const std::string& p, int64_t e, const std::string& x) {
  const int64_t h = c_.hidden_size, i = c_.expert_intermediate_size, experts = c_.num_experts;
  e_.scope = s;
  auto slice_of = [&](const std::string& name, std::vector<int64_t> dims) {
    dims.insert(dims.begin(), experts);
    const std::string y = e_.op("Gather", {e == 0 ? param(p + "." + name, dims) : p + "." + name, e_.pooled(e)});
    e_.i("axis", 0);
    return y;
  };
  std::string gate_up = e_.op("MatMul", {x, slice_of("gate_up_proj", {h, 2 * i})});
  gate_up = e_.op("Add", {gate_up, slice_of("gate_up_proj_bias", {2 * i})});
  const std::string gated = gpt_oss_gate(gate_up);
  const std::string down = e_.op("MatMul", {gated, slice_of("down_proj", {i, h})});
  return e_.op("Add", {down, slice_of("down_proj_bias", {h})});
}

// GptOssExperts._apply_gate on the 2-D rows `gate_up` [rows, 2I], in the current scope: gate = [..., ::2] and up =
// [..., 1::2] (strided views), gate clamped above at the limit, up to [-limit, limit], gate * sigmoid(1.702 gate),
// (up + 1) * glu [rows, I]. The eager loop calls it per expert, the grouped_mm block once (hf_moe_grouped.cc).
std::string LlamaBuilder::gpt_oss_gate(const std::string& gate_up) {
  auto strided_last = [&](int64_t start) {  // gate_up[..., start::2] on the 2-D rows
    e_.note(1), e_.note(start), e_.note(std::numeric_limits<int64_t>::max()), e_.note(2);
    const std::string axes = e_.const_i64({1}, false), starts = e_.const_i64({start}, false);
    const std::string ends = e_.const_i64({std::numeric_limits<int64_t>::max()}, false);
    return e_.op("Slice", {gate_up, starts, ends, axes, e_.const_i64({2}, false)});
  };
  const std::string gate_half = strided_last(0), up_half = strided_last(1);
  const std::string gate = clamp(gate_half, false, c_.swiglu_limit);
  const std::string up = clamp(up_half, true, c_.swiglu_limit);
  const std::string scaled = e_.op("Mul", {gate, e_.const_f32({1.702f}, {})});  // GptOssExperts.alpha
  const std::string glu = e_.op("Mul", {gate, e_.op("Sigmoid", {scaled})});
  return e_.op("Mul", {e_.op("Add", {up, e_.const_f32({1.0f}, {})}), glu});
}

}  // namespace memplan
