// The decoder layers of gemma2, gemma3_text and phi3 as torch.onnx.export (torch 1.13, opset 17, training export)
// traces tests/models/hf_archs.py's modules, which follow transformers' modeling code op for op with eager attention:
// models/gemma2/modeling_gemma2.py (Gemma2Attention, eager_attention_forward, Gemma2MLP, Gemma2DecoderLayer),
// models/gemma3/modeling_gemma3.py (Gemma3Attention with q_norm / k_norm, Gemma3DecoderLayer) and
// models/phi3/modeling_phi3.py (Phi3Attention's qkv_proj, apply_rotary_pos_emb's partial rotary, Phi3MLP's
// gate_up_proj). The graph-wide parts (embedding scale, rotary tables, causal and sliding-window masks, final norm
// and logit soft-cap) are in llama_graph.cc. tests/import/hf_config_test.py checks the result node for node.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "onnx_import/decoder_builder.h"

namespace memplan {

// apply_rotary_pos_emb; Phi-3's partial form rotates q[..., :rotary_dim] and passes the rest (modeling_phi3.py).
std::string LlamaBuilder::arch_rotary(const std::string& x, bool sliding) {
  const bool local = sliding && !local_cos_.empty();
  const std::string& cos = local ? local_cos_ : cos_;
  const std::string& sin = local ? local_sin_ : sin_;
  if (c_.gpt_oss) return gpt_oss_rotary(x, cos, sin);  // hf_gpt_oss.cc
  const int64_t rd = c_.rotary_dim;
  if (rd == c_.head_dim) return rotary(x, cos, sin, rd / 2);
  const std::string rot = slice_last(x, 3, 0, rd);
  const std::string rest = slice_last(x, 3, rd, std::numeric_limits<int64_t>::max());
  const std::string rotated = rotary(rot, cos, sin, rd / 2);
  const std::string out = e_.op("Concat", {rotated, rest});
  e_.i("axis", -1);
  return out;
}

std::string LlamaBuilder::arch_attention(int64_t l, const std::string& x) {
  const std::string layer = "/layers." + std::to_string(l), a = layer + "/self_attn";
  const std::string p = "layers." + std::to_string(l) + ".self_attn.";
  const int64_t h = c_.hidden_size, hd = c_.head_dim, heads = c_.num_attention_heads, kv = c_.num_key_value_heads;
  const int64_t q_size = heads * hd, kv_size = kv * hd;
  const bool sliding = !c_.sliding_layers.empty() && c_.sliding_layers[size_t(l)];
  if (c_.gpt_oss) param(p + "sinks", {heads});  // GptOssAttention's own parameter, before its projections'
  e_.scope = a;
  b_ = e_.op("Gather", {e_.op("Shape", {x}), e_.const_i64({0}, true)});
  e_.i("axis", 0);
  s_ = e_.op("Gather", {e_.op("Shape", {x}), e_.const_i64({1}, true)});
  e_.i("axis", 0);
  std::string q, k, v;
  if (c_.fused) {  // Phi3Attention.forward: qkv[..., :query_pos], [query_pos:query_pos + kv], [query_pos + kv:]
    const std::string qkv = linear(a + "/qkv_proj", p + "qkv_proj", x, h, q_size + 2 * kv_size, false);
    e_.scope = a;
    q = slice_last(qkv, 2, 0, q_size);
    k = slice_last(qkv, 2, q_size, q_size + kv_size);
    v = slice_last(qkv, 2, q_size + kv_size, std::numeric_limits<int64_t>::max());
  } else {  // the three projections, then the views (Gemma2Attention.forward)
    q = linear(a + "/q_proj", p + "q_proj", x, h, q_size, c_.qkv_bias);
    k = linear(a + "/k_proj", p + "k_proj", x, h, kv_size, c_.qkv_bias);
    v = linear(a + "/v_proj", p + "v_proj", x, h, kv_size, c_.qkv_bias);
    e_.scope = a;
  }
  // The views' size lists as llama_graph.cc's attention() builds them (equal lists merged by the JIT).
  e_.note(heads), e_.note(hd);
  std::vector<std::string> views;
  auto view_list = [&](int64_t n) { return e_.size_list({b_, s_, e_.pooled(n), e_.pooled(hd)}); };
  views.push_back(view_list(heads));
  if (kv == heads) views.push_back(view_list(kv)), views.push_back(view_list(kv));
  std::string q4 = transpose(reshape(q, views[0]), {0, 2, 1, 3});
  e_.note(kv);
  if (kv != heads) views.push_back(view_list(kv)), views.push_back(view_list(kv));
  std::string k4 = transpose(reshape(k, views[1]), {0, 2, 1, 3});
  const std::string v4 = transpose(reshape(v, views[2]), {0, 2, 1, 3});
  if (c_.qk_norm_after_transpose) {  // Gemma3Attention: q_norm(q), k_norm(k) on (b, heads, s, head_dim)
    q4 = rms_norm(a + "/q_norm", p + "q_norm.weight", q4, true);
    k4 = rms_norm(a + "/k_norm", p + "k_norm.weight", k4, true);
    e_.scope = a;
  }
  const std::string qr = arch_rotary(q4, sliding), kr = arch_rotary(k4, sliding);
  std::string keys = kr, values = v4, total = s_;
  const std::string index = std::to_string(l);
  if (kind_ == ConfigGraph::Decode) {  // torch.cat((past, new), dim=2), every token kept (hf_archs.Attention)
    e_.note(2);
    keys = e_.op("Concat", {"past_key_values." + index + ".key", kr});
    e_.i("axis", 2);
    values = e_.op("Concat", {"past_key_values." + index + ".value", v4});
    e_.i("axis", 2);
    if (kv != heads) {  // k.shape[2], read only by repeat_kv
      total = e_.op("Gather", {e_.op("Shape", {keys}), e_.const_i64({2}, true)});
      e_.i("axis", 0);
    }
  }
  if (kind_ != ConfigGraph::Train) {
    outputs_[keys] = "present." + index + ".key";
    outputs_[values] = "present." + index + ".value";
  }
  if (kv != heads) {  // repeat_kv
    const std::string ke = expand_kv(keys, total);
    e_.note(heads), e_.note(hd);
    const std::string k_list = e_.size_list({b_, e_.pooled(heads), total, e_.pooled(hd)});
    const std::string v_list = e_.size_list({b_, e_.pooled(heads), total, e_.pooled(hd)});
    keys = reshape(ke, k_list);
    values = reshape(expand_kv(values, total), v_list);
  }
  const std::string scores = e_.op("MatMul", {qr, transpose(keys, {0, 1, 3, 2})});
  // eager_attention_forward: torch.matmul(query, key.transpose(2, 3)) * scaling, then the soft-cap, then the mask.
  std::string scaled = e_.op("Mul", {scores, e_.const_f32({float(c_.attn_multiplier)}, {})});
  if (c_.attn_softcap > 0) scaled = soft_cap(scaled, c_.attn_softcap);
  const std::string masked = e_.op("Add", {scaled, sliding ? window_mask_ : mask_});
  std::string probs;
  if (c_.gpt_oss) {
    probs = sink_softmax(p + "sinks", masked);  // eager_attention_forward's attention sinks (hf_gpt_oss.cc)
  } else {
    probs = e_.op("Softmax", {masked});
    e_.i("axis", -1);
  }
  const std::string context = transpose(e_.op("MatMul", {probs, values}), {0, 2, 1, 3});
  e_.note(q_size);
  const std::string merged = reshape(context, e_.size_list({b_, s_, e_.pooled(q_size)}));
  const std::string out = linear(a + "/o_proj", p + "o_proj", merged, q_size, h, c_.o_bias);
  // Gemma3Attention defines q_norm and k_norm after o_proj: their parameters come after o_proj's.
  if (c_.qk_norm_after_transpose) param(p + "q_norm.weight", {hd}), param(p + "k_norm.weight", {hd});
  return out;
}

std::string LlamaBuilder::arch_mlp(const std::string& m, const std::string& p, const std::string& y) {
  const int64_t h = c_.hidden_size, f = c_.intermediate_size;
  if (c_.fused) {
    // Phi3MLP.forward: gate, up = gate_up_proj(x).chunk(2, dim=-1); down_proj(up * silu(gate)). chunk exports as
    // two Slices whose bounds come from the last dim's size (torch/onnx/symbolic_opset13.py chunk / split).
    const std::string both = linear(m + "/gate_up_proj", p + "mlp.gate_up_proj", y, h, 2 * f, false);
    e_.scope = m;
    const std::string shape = e_.op("Shape", {both});
    const std::string axis = e_.const_i64({-1}, false);
    const std::string dim = e_.op("Gather", {shape, axis});
    e_.i("axis", 0);
    const std::string start = e_.const_i64({0}, false);
    const std::string rounded = e_.op("Add", {dim, e_.const_i64({1}, false)});
    const std::string size = e_.op("Div", {rounded, e_.const_i64({2}, false)});
    const std::string first_end = e_.op("Mul", {size, e_.const_i64({1}, false)});
    const std::string gate = e_.op("Slice", {both, start, first_end, axis});
    const std::string second_end = e_.op("Mul", {size, e_.const_i64({2}, false)});
    const std::string up = e_.op("Slice", {both, first_end, second_end, axis});
    const std::string silu = e_.op("Mul", {gate, e_.op("Sigmoid", {gate})});
    const std::string product = e_.op("Mul", {up, silu});
    return linear(m + "/down_proj", p + "mlp.down_proj", product, f, h, false);
  }
  const std::string gate = linear(m + "/gate_proj", p + "mlp.gate_proj", y, h, f, false);
  e_.scope = m;
  // gelu(x, approximate="tanh") as torch/onnx/symbolic_opset9.py gelu writes it for opset < 20:
  // 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), x^3 as x * (x * x).
  const std::string cube = e_.op("Mul", {gate, e_.op("Mul", {gate, gate})});
  const std::string inner = e_.op("Add", {gate, e_.op("Mul", {e_.const_f32({0.044715f}, {}), cube})});
  const std::string scaled = e_.op("Mul", {e_.const_f32({float(std::sqrt(2.0 / M_PI))}, {}), inner});
  const std::string tanh = e_.op("Tanh", {scaled});
  const std::string t = e_.op("Add", {e_.const_f32({1.0f}, {}), tanh});
  const std::string half = e_.op("Mul", {gate, t});
  const std::string act = e_.op("Mul", {e_.const_f32({0.5f}, {}), half});
  const std::string up = linear(m + "/up_proj", p + "mlp.up_proj", y, h, f, false);
  e_.scope = m;
  const std::string product = e_.op("Mul", {act, up});
  return linear(m + "/down_proj", p + "mlp.down_proj", product, f, h, false);
}

// Phi3DecoderLayer.forward (pre-norm, as Llama's); Gemma2DecoderLayer.forward: the attention's and the MLP's
// outputs normed again (post_attention_layernorm, post_feedforward_layernorm) before their residual adds, the MLP's
// input by pre_feedforward_layernorm.
std::string LlamaBuilder::arch_layer(int64_t l, const std::string& x) {
  const std::string scope = "/layers." + std::to_string(l), p = "layers." + std::to_string(l) + ".";
  std::string attended = arch_attention(l, rms_norm(scope + "/input_layernorm", p + "input_layernorm.weight", x));
  if (c_.gemma)
    attended = rms_norm(scope + "/post_attention_layernorm", p + "post_attention_layernorm.weight", attended);
  e_.scope = scope;
  const std::string h1 = e_.op("Add", {x, attended});
  const std::string norm = c_.gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm";
  std::string y = arch_mlp(scope + "/mlp", p, rms_norm(scope + "/" + norm, p + norm + ".weight", h1));
  if (c_.gemma) y = rms_norm(scope + "/post_feedforward_layernorm", p + "post_feedforward_layernorm.weight", y);
  e_.scope = scope;
  return e_.op("Add", {h1, y});
}

}  // namespace memplan
