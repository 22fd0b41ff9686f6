#include "onnx_import/llama_graph.h"

#include "onnx_import/decoder_builder.h"
#include "onnx_import/errors.h"
#include "onnx_import/graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace memplan {
namespace {

using onnx::AttributeProto;
using onnx::TensorProto;

}  // namespace

void LlamaBuilder::build() {
  std::string x;
  if (kind_ == ConfigGraph::Train) {  // Llama.forward
    e_.scope = "";
    e_.note(1);  // input_ids.shape[1]
    const std::string shape = e_.op("Shape", {"input_ids"});
    const std::string seq = e_.op("Gather", {shape, e_.const_i64({1}, true)});
    e_.i("axis", 0);
    e_.scope = "/embed_tokens";
    x = e_.op("Gather", {param("embed_tokens.weight", {c_.vocab_size, c_.hidden_size}), "input_ids"});
    e_.scope = "";
    // Gemma2Model.forward: hidden_states * torch.tensor(hidden_size**0.5, dtype) (modeling_gemma2.py; Gemma 3's
    // Gemma3TextScaledWordEmbedding multiplies by the same embed_scale).
    if (c_.gemma) x = e_.op("Mul", {x, e_.const_f32({float(std::sqrt(double(c_.hidden_size)))}, {})});
    rotary_and_mask(seq);
  } else {  // LlamaWithCache.forward; hf_archs.DecoderWithCache.forward
    e_.scope = "/embed_tokens";
    x = e_.op("Gather", {param("embed_tokens.weight", {c_.vocab_size, c_.hidden_size}), "input_ids"});
    e_.scope = "";
    if (c_.gemma) x = e_.op("Mul", {x, e_.const_f32({float(std::sqrt(double(c_.hidden_size)))}, {})});
    rotary_from_positions();
    cache_mask();
  }
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l)
    x = c_.gpt_oss ? gpt_oss_layer(l, x) : c_.hf_arch ? arch_layer(l, x) : layer(l, x);
  x = rms_norm("/norm", "norm.weight", x);
  // lm_head, an nn.Linear; tied, its weight is embed_tokens' Parameter (transformers' tie_weights), which torch.onnx
  // writes once, under its first name.
  e_.scope = "/lm_head";
  const std::string head = c_.tie_word_embeddings ? std::string("embed_tokens.weight")
                                                  : param("lm_head.weight", {c_.vocab_size, c_.hidden_size});
  const std::string logits = e_.op("MatMul", {x, transpose_weight(head)});
  e_.scope = "";
  logits_ = c_.final_softcap > 0 ? soft_cap(logits, c_.final_softcap) : logits;  // Gemma2ForCausalLM.forward
}

// A float32 parameter: dims and dtype, no bytes (point_at_missing_data below).
std::string LlamaBuilder::param(const std::string& name, const std::vector<int64_t>& dims) {
  TensorProto* t = g_.add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  return name;
}
std::string LlamaBuilder::transpose_weight(const std::string& weight) {
  const std::string t = e_.op("Transpose", {weight});
  e_.ints("perm", {1, 0});
  return t;
}
// nn.Linear on a 3-D input: Transpose, MatMul, and Add(bias, ·) with a bias (torch/onnx/symbolic_opset9.py linear).
std::string LlamaBuilder::linear(const std::string& scope, const std::string& prefix, const std::string& x, int64_t in,
                   int64_t out, bool bias) {
  const std::string saved = e_.scope;
  e_.scope = scope;
  std::string y = e_.op("MatMul", {x, transpose_weight(param(prefix + ".weight", {out, in}))});
  if (bias) y = e_.op("Add", {param(prefix + ".bias", {out}), y});
  e_.scope = saved;
  return y;
}

// inv_freq = 1 / theta^(arange(0, dim, 2) / dim) in float32 (LlamaRotaryEmbedding), folded by the tracer into one
// (1, dim / 2) constant; dim is the rotary part of head_dim (Phi-3's partial_rotary_factor), and a linear
// rope_scaling divides inv_freq by its factor (transformers modeling_rope_utils.py,
// _compute_linear_scaling_rope_parameters: Gemma 3's full-attention layers).
std::string LlamaBuilder::inverse_frequencies(double theta, int64_t dim, double factor) {
  if (!c_.inv_freq.empty()) return e_.const_f32(c_.inv_freq, {1, int64_t(c_.inv_freq.size())});  // deepseek_v3's
  std::vector<float> inv;
  for (int64_t k = 0; k < dim; k += 2) {
    const float exponent = float(k) / float(dim);
    const float f = 1.0f / float(std::pow(double(float(theta)), double(exponent)));
    inv.push_back(factor == 1.0 ? f : f / float(factor));
  }
  return e_.const_f32(inv, {1, int64_t(inv.size())});
}

// Llama.forward's rotary tables (rotary_cos_sin) and causal mask (causal_additive_mask).
// DeepseekV3RotaryEmbedding.forward: emb.cos() * attention_scaling (and sin), traced even at 1.0 (DeepseekV2's
// freqs_cis times attention_scaling likewise).
std::string LlamaBuilder::scaled(const std::string& table) {
  if (!c_.mla) return table;
  return e_.op("Mul", {table, e_.const_f32({float(c_.rope_attention_scaling)}, {})});
}

// emb = torch.cat((freqs, freqs), dim=-1); deepseek_v2's freqs_cis is freqs itself (half width: hf_deepseek_v2.cc).
std::string LlamaBuilder::half_or_full(const std::string& freqs) {
  if (c_.deepseek_v2) return freqs;
  const std::string emb = e_.op("Concat", {freqs, freqs});
  e_.i("axis", -1);
  return emb;
}

void LlamaBuilder::rotary_and_mask(const std::string& seq) {
  const std::string n = e_.op("Cast", {seq});
  e_.i("to", TensorProto::INT64);
  const std::string zero = e_.const_i64({0}, true), one = e_.const_i64({1}, true);
  const std::string range = e_.op("Range", {zero, n, one});
  e_.note(6);  // .to(torch.float32): ScalarType Float is 6 (c10/core/ScalarType.h)
  const std::string positions = e_.op("Cast", {range});
  e_.i("to", TensorProto::FLOAT);
  const std::string column = e_.op("Unsqueeze", {positions, e_.const_i64({1}, false)});
  auto table = [&](double theta, double factor, std::string& cos, std::string& sin) {
    if (c_.gpt_oss) return gpt_oss_table(e_.op("Mul", {column, gpt_oss_inv_freq()}), cos, sin);  // hf_gpt_oss.cc
    const std::string freqs = e_.op("Mul", {column, inverse_frequencies(theta, c_.rotary_dim, factor)});
    const std::string emb = half_or_full(freqs);
    cos = scaled(e_.op("Cos", {emb}));
    sin = scaled(e_.op("Sin", {emb}));
  };
  table(c_.rope_theta, c_.rope_factor, cos_, sin_);
  e_.note(0);  // .unsqueeze(0)
  const std::string rows = e_.op("Unsqueeze", {range, e_.const_i64({0}, false)});
  const std::string cols = e_.op("Unsqueeze", {range, e_.const_i64({1}, false)});
  const std::string future = e_.op("Greater", {rows, cols});
  // torch.zeros(seq, seq).masked_fill(blocked, -inf); the zeros are one tensor for both masks (the JIT's CSE).
  std::string zeros;
  auto additive = [&](const std::string& blocked_bool) {
    if (zeros.empty()) {
      zeros = e_.op("ConstantOfShape", {e_.size_list({seq, seq})});
      const float zero_f = 0.0f;
      e_.tensor("value", TensorProto::FLOAT, {1}, &zero_f, 4);
    }
    const std::string blocked = e_.op("Cast", {blocked_bool});
    e_.i("to", TensorProto::BOOL);
    return e_.op("Where", {blocked, e_.const_f32({-std::numeric_limits<float>::infinity()}, {}), zeros});
  };
  const int64_t sliding = std::count(c_.sliding_layers.begin(), c_.sliding_layers.end(), true);
  if (sliding < c_.num_hidden_layers) mask_ = additive(future);
  if (sliding == 0) return;
  if (c_.rope_local_theta > 0) table(c_.rope_local_theta, 1.0, local_cos_, local_sin_);
  // hf_archs.sliding_additive_mask: key > query or key <= query - window is blocked (transformers
  // masking_utils.py, causal_mask_function and sliding_window_overlay).
  const std::string reach = e_.op("Sub", {cols, e_.const_i64({c_.mask_window}, true)});
  const std::string old = e_.op("LessOrEqual", {rows, reach});
  window_mask_ = additive(e_.op("Or", {future, old}));
}

// rotary_from_positions: (batch, 1, new, rotary_dim) cos and sin at position_ids (hf_archs.rotary_at_positions;
// Phi-3's partial rotary_dim).
void LlamaBuilder::rotary_from_positions() {
  const std::string column = e_.op("Unsqueeze", {"position_ids", e_.const_i64({-1}, false)});
  e_.note(6);  // .to(torch.float32): ScalarType Float is 6 (c10/core/ScalarType.h)
  const std::string positions = e_.op("Cast", {column});
  e_.i("to", TensorProto::FLOAT);
  auto table = [&](double theta, double factor, std::string& cos_out, std::string& sin_out) {
    if (c_.gpt_oss) {  // (cos(freqs) * attention_scaling).unsqueeze(1), sin likewise (hf_gpt_oss.cc)
      const std::string freqs = e_.op("Mul", {positions, gpt_oss_inv_freq()});
      const float scaling = float(c_.rope_attention);
      e_.note(1);
      cos_out = e_.op("Mul", {e_.op("Cos", {freqs}), e_.const_f32({scaling}, {})});
      cos_out = e_.op("Unsqueeze", {cos_out, e_.const_i64({1}, false)});
      sin_out = e_.op("Mul", {e_.op("Sin", {freqs}), e_.const_f32({scaling}, {})});
      sin_out = e_.op("Unsqueeze", {sin_out, e_.const_i64({1}, false)});
      return;
    }
    const std::string freqs = e_.op("Mul", {positions, inverse_frequencies(theta, c_.rotary_dim, factor)});
    const std::string emb = half_or_full(freqs);
    const std::string cos = scaled(e_.op("Cos", {emb}));
    e_.note(1);  // .unsqueeze(1)
    cos_out = e_.op("Unsqueeze", {cos, e_.const_i64({1}, false)});
    const std::string sin = scaled(e_.op("Sin", {emb}));
    sin_out = e_.op("Unsqueeze", {sin, e_.const_i64({1}, false)});
  };
  table(c_.rope_theta, c_.rope_factor, cos_, sin_);
  if (std::count(c_.sliding_layers.begin(), c_.sliding_layers.end(), true) > 0 && c_.rope_local_theta > 0)
    table(c_.rope_local_theta, 1.0, local_cos_, local_sin_);
}

// cache_mask(attention_mask, input_ids.shape[1]): HF's 4-D causal mask offset by the past, padded keys blocked,
// blocked entries float32's lowest value.
void LlamaBuilder::cache_mask() {
  const std::string new_shape = e_.op("Shape", {"input_ids"});
  const std::string fresh = e_.op("Gather", {new_shape, e_.const_i64({1}, true)});
  e_.i("axis", 0);
  const std::string mask_shape = e_.op("Shape", {"attention_mask"});
  const std::string total = e_.op("Gather", {mask_shape, e_.const_i64({1}, true)});
  e_.i("axis", 0);
  auto arange = [&](const std::string& n) {
    const std::string end = e_.op("Cast", {n});
    e_.i("to", TensorProto::INT64);
    return e_.op("Range", {e_.const_i64({0}, true), end, e_.const_i64({1}, true)});
  };
  const std::string fresh_range = arange(fresh);
  const std::string queries = e_.op("Add", {fresh_range, e_.op("Sub", {total, fresh})});
  const std::string keys = arange(total);
  e_.note(0);  // .unsqueeze(0)
  const std::string rows = e_.op("Unsqueeze", {keys, e_.const_i64({0}, false)});
  const std::string columns = e_.op("Unsqueeze", {queries, e_.const_i64({1}, false)});
  const std::string future = e_.op("Greater", {rows, columns});
  // attention_mask[:, None, None, :]: while tracing, torch indexes a full slice too (aten::slice(x, dim, 0,
  // INT64_MAX, 1); torch/csrc/autograd/python_variable_indexing.cpp disables the no-op shortcut), so its ints
  // are traced, then the exporter drops the no-op slices.
  const std::string m1 = e_.op("Unsqueeze", {"attention_mask", e_.const_i64({1}, false)});
  e_.note(2);
  const std::string m2 = e_.op("Unsqueeze", {m1, e_.const_i64({2}, false)});
  e_.note(3);
  const std::string padded = e_.op("Equal", {m2, e_.const_i64({0}, true)});
  // (b[None, None, :, :] | padded).to(torch.float32) * lowest
  auto additive = [&](const std::string& b) {
    const std::string f1 = e_.op("Unsqueeze", {b, e_.const_i64({0}, false)});
    const std::string f2 = e_.op("Unsqueeze", {f1, e_.const_i64({1}, false)});
    e_.note(2), e_.note(3);  // [None, None, :, :]
    const std::string blocked = e_.op("Or", {f2, padded});
    e_.note(6);  // .to(torch.float32)
    const std::string as_float = e_.op("Cast", {blocked});
    e_.i("to", TensorProto::FLOAT);
    return e_.op("Mul", {as_float, e_.const_f32({std::numeric_limits<float>::lowest()}, {})});
  };
  // hf_archs.cache_masks: the causal mask where some layer attends to every past token, and with windowed layers
  // (Phi-3's, every layer) the window's, which also blocks key <= query - window.
  const int64_t sliding = std::count(c_.sliding_layers.begin(), c_.sliding_layers.end(), true);
  if (sliding < c_.num_hidden_layers) mask_ = additive(future);
  if (sliding == 0) return;
  const std::string reach = e_.op("Sub", {columns, e_.const_i64({c_.mask_window}, true)});
  const std::string old = e_.op("LessOrEqual", {rows, reach});
  window_mask_ = additive(e_.op("Or", {future, old}));
}

// RMSNorm.forward: weight * (x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)); rsqrt exports as 1 / Sqrt.
// `declared`: the weight's initializer already exists or is added later (q_norm, k_norm: see attention()).
std::string LlamaBuilder::rms_norm(const std::string& scope, const std::string& weight, const std::string& x,
                     bool declared, int64_t dim, double eps) {
  e_.scope = scope;
  e_.note(2);  // x.pow(2)
  const std::string sq = e_.op("Pow", {x, e_.const_f32({2.0f}, {})});
  e_.note_list(-1);  // mean(-1)'s dim list: read by a ReduceSum of the same list (hf_moe.cc)
  const std::string mean = e_.op("ReduceMean", {sq});
  e_.ints("axes", {-1}).i("keepdims", 1);
  const std::string var = e_.op("Add", {mean, e_.const_f32({float(eps > 0 ? eps : c_.rms_norm_eps)}, {})});
  const std::string root = e_.op("Sqrt", {var});
  const std::string inv = e_.op("Div", {e_.const_f32({1.0f}, {}), root});
  const std::string y = e_.op("Mul", {x, inv});
  const std::string w = declared ? weight : param(weight, {dim > 0 ? dim : c_.hidden_size});
  // Gemma2RMSNorm.forward: output * (1.0 + weight) (modeling_gemma2.py; Gemma3RMSNorm the same).
  if (c_.gemma) return e_.op("Mul", {y, e_.op("Add", {w, e_.const_f32({1.0f}, {})})});
  return e_.op("Mul", {w, y});
}

std::string LlamaBuilder::attention(const std::string& layer, const std::string& x) {
  const std::string a = layer + "/self_attn", p = "layers." + layer.substr(8) + ".self_attn.";
  e_.scope = a;
  const int64_t h = c_.hidden_size, hd = c_.head_dim, heads = c_.num_attention_heads, kv = c_.num_key_value_heads;
  b_ = e_.op("Gather", {e_.op("Shape", {x}), e_.const_i64({0}, true)});
  e_.i("axis", 0);
  s_ = e_.op("Gather", {e_.op("Shape", {x}), e_.const_i64({1}, true)});
  e_.i("axis", 0);
  // view(b, s, heads, hd) and view(b, s, kv, hd): the JIT merges equal size lists, so a list equal to an
  // earlier one is built there, one copy per view, in the views' order.
  const std::string q = linear(a + "/q_proj", p + "q_proj", x, h, heads * hd, c_.qkv_bias);
  e_.note(heads), e_.note(hd);
  std::vector<std::string> views;
  auto view_list = [&](int64_t n) { return e_.size_list({b_, s_, e_.pooled(n), e_.pooled(hd)}); };
  views.push_back(view_list(heads));
  if (kv == heads) views.push_back(view_list(kv)), views.push_back(view_list(kv));
  // Qwen3Attention: q_norm(q_proj(x).view(...)).transpose(1, 2), k likewise; the norms' weights are
  // parameters after o_proj's in the module (state-dict order, the initializers' order), so they are added there.
  auto head_norm = [&](const std::string& y, const char* name) {
    if (!c_.qk_norm) return y;
    const std::string normed = rms_norm(a + "/" + name, p + name + ".weight", y, true);
    e_.scope = a;
    return normed;
  };
  const std::string q4 = transpose(head_norm(reshape(q, views[0]), "q_norm"), {0, 2, 1, 3});
  const std::string k = linear(a + "/k_proj", p + "k_proj", x, h, kv * hd, c_.qkv_bias);
  e_.note(kv);
  if (kv != heads) views.push_back(view_list(kv)), views.push_back(view_list(kv));
  const std::string k4 = transpose(head_norm(reshape(k, views[1]), "k_norm"), {0, 2, 1, 3});
  const std::string v = linear(a + "/v_proj", p + "v_proj", x, h, kv * hd, c_.qkv_bias);
  const std::string v4 = transpose(reshape(v, views[2]), {0, 2, 1, 3});
  const std::string qr = rotary(q4, cos_, sin_, hd / 2), kr = rotary(k4, cos_, sin_, hd / 2);
  std::string keys = kr, values = v4, total = s_;
  const std::string layer_index = layer.substr(8);
  if (kind_ == ConfigGraph::Decode) {  // torch.cat((past, new), dim=2): HF DynamicCache.update
    e_.note(2);
    keys = e_.op("Concat", {"past_key_values." + layer_index + ".key", kr});
    e_.i("axis", 2);
    values = e_.op("Concat", {"past_key_values." + layer_index + ".value", v4});
    e_.i("axis", 2);
    if (kv != heads) {  // k.shape[2], read only by repeat_kv (the JIT drops it otherwise)
      total = e_.op("Gather", {e_.op("Shape", {keys}), e_.const_i64({2}, true)});
      e_.i("axis", 0);
    }
  }
  if (kind_ != ConfigGraph::Train) {
    outputs_[keys] = "present." + layer_index + ".key";
    outputs_[values] = "present." + layer_index + ".value";
  }
  if (kv != heads) {
    const std::string ke = expand_kv(keys, total);
    e_.note(heads), e_.note(hd);
    const std::string k_list = e_.size_list({b_, e_.pooled(heads), total, e_.pooled(hd)});
    const std::string v_list = e_.size_list({b_, e_.pooled(heads), total, e_.pooled(hd)});
    keys = reshape(ke, k_list);
    values = reshape(expand_kv(values, total), v_list);
  }
  const std::string scores = e_.op("MatMul", {qr, transpose(keys, {0, 1, 3, 2})});
  const float scale = float(std::sqrt(double(hd)));  // / math.sqrt(head_dim)
  const std::string masked = e_.op("Add", {e_.op("Div", {scores, e_.const_f32({scale}, {})}), mask_});
  const std::string probs = e_.op("Softmax", {masked});
  e_.i("axis", -1);
  const std::string context = transpose(e_.op("MatMul", {probs, values}), {0, 2, 1, 3});
  e_.note(heads * hd);
  const std::string merged = reshape(context, e_.size_list({b_, s_, e_.pooled(heads * hd)}));
  const std::string out = linear(a + "/o_proj", p + "o_proj", merged, heads * hd, h, c_.o_bias);
  if (c_.qk_norm) param(p + "q_norm.weight", {hd}), param(p + "k_norm.weight", {hd});
  return out;
}

std::string LlamaBuilder::layer(int64_t l, const std::string& x) {
  const std::string scope = "/layers." + std::to_string(l), p = "layers." + std::to_string(l) + ".";
  const std::string normed = rms_norm(scope + "/input_layernorm", p + "input_layernorm.weight", x);
  const std::string attended = c_.mla ? mla_attention(scope, normed) : attention(scope, normed);
  e_.scope = scope;
  const std::string h1 = e_.op("Add", {x, attended});
  const std::string y = rms_norm(scope + "/post_attention_layernorm", p + "post_attention_layernorm.weight", h1);
  if (!c_.moe_layers.empty() && c_.moe_layers[size_t(l)]) {  // a sparse block (hf_moe.cc)
    const std::string sparse = moe_block(l, y);
    e_.scope = scope;
    return e_.op("Add", {h1, sparse});
  }
  const std::string m = scope + "/mlp";
  const int64_t h = c_.hidden_size, f = c_.intermediate_size;
  const std::string gate = linear(m + "/gate_proj", p + "mlp.gate_proj", y, h, f, c_.mlp_bias);
  e_.scope = m;
  const std::string silu = e_.op("Mul", {gate, e_.op("Sigmoid", {gate})});
  const std::string up = linear(m + "/up_proj", p + "mlp.up_proj", y, h, f, c_.mlp_bias);
  e_.scope = m;
  const std::string product = e_.op("Mul", {silu, up});
  const std::string down = linear(m + "/down_proj", p + "mlp.down_proj", product, f, h, c_.mlp_bias);
  e_.scope = scope;
  return e_.op("Add", {h1, down});
}

}  // namespace memplan
