// The keys of gemma2, gemma3_text and phi3 configs (hf_config_arch.h).
#include "onnx_import/hf_config_arch.h"

#include "onnx_import/hf_config_keys.h"

namespace memplan::hf {
namespace {

using nlohmann::json;

// A number key that may be null (none); absent is an error, as the configs state it.
double optional_number(const std::string& path, const json& j, const std::string& key) {
  if (require_present(path, j, key).is_null()) return 0;
  return positive_number(path, j, key);
}

}  // namespace

// Keys of one architecture only, read by parse_hf_arch (transformers models/gemma2/configuration_gemma2.py,
// gemma3/configuration_gemma3.py Gemma3TextConfig, phi3/configuration_phi3.py). cache_implementation names the
// generation cache class and auto_map the remote code's module: neither is a shape of the graph; Gemma 2's release
// configs repeat sliding_window as sliding_window_size, which Gemma2Config does not read (the window is sliding_window);
// original_max_position_embeddings is read by longrope scaling only, which memplan refuses.
const std::map<std::string, std::set<std::string>>& arch_keys() {
  static const std::map<std::string, std::set<std::string>> keys = {
      {"gemma2", {"hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                  "cache_implementation", "layer_types", "sliding_window_size"}},
      {"gemma3_text", {"hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping",
                       "final_logit_softcapping", "cache_implementation", "layer_types", "sliding_window_pattern",
                       "_sliding_window_pattern", "rope_local_base_freq", "use_bidirectional_attention"}},
      {"phi3", {"embd_pdrop", "resid_pdrop", "partial_rotary_factor", "original_max_position_embeddings", "auto_map"}}};
  return keys;
}

// gemma2, gemma3_text, phi3: what DecoderConfig's hf_arch fields say, from the keys their modeling code reads.
void parse_hf_arch(const std::string& path, const json& j, DecoderConfig& c) {
  c.hf_arch = true;
  const bool attention_bias = bool_key(path, j, "attention_bias", false);
  if (c.mlp_bias) fail(path, "config key \"mlp_bias\" is true: " + c.model_type + "'s MLP has no biases");
  const int64_t layers = c.num_hidden_layers;
  if (c.model_type == "phi3") {
    // Phi3Attention: qkv_proj and o_proj without biases; Phi3MLP: gate_up_proj. Dropouts must be off (a training
    // step would keep their masks).
    if (attention_bias) fail(path, "config key \"attention_bias\" is true: Phi3Attention has no biases");
    for (const char* key : {"embd_pdrop", "resid_pdrop"})
      require_value(path, j, key, 0.0, "dropout in training keeps a mask per layer");
    require_value(path, j, "rope_scaling", nullptr,
                  "Phi-3's longrope/su scaling switches its tables on the sequence length");
    c.fused = true;
    c.attn_multiplier = std::pow(double(c.head_dim), -0.5);  // Phi3Attention.scaling = head_dim**-0.5
    // Phi3RotaryEmbedding.compute_default_rope_parameters: dim = int(head_dim * partial_rotary_factor).
    const auto f = j.find("partial_rotary_factor");
    if (f != j.end() && !f->is_null()) {
      const double factor = positive_number(path, j, "partial_rotary_factor");
      c.rotary_dim = int64_t(double(c.head_dim) * factor);
      if (factor > 1 || c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
        fail(path, "config key \"partial_rotary_factor\" is " + f->dump() + ": head_dim " +
                       std::to_string(c.head_dim) + " times it must be an even number of rotary dims");
    }
    // Phi3Model.forward: every layer's mask is the sliding-window one when sliding_window is set.
    const auto w = j.find("sliding_window");
    if (w != j.end() && !w->is_null()) {
      c.mask_window = positive_int(path, *w, "sliding_window", int64_t{1} << 40);
      c.sliding_layers.assign(size_t(layers), true);
    }
    return;
  }
  c.gemma = c.gelu_tanh = true;
  c.qkv_bias = c.o_bias = attention_bias;  // Gemma2Attention: every projection takes bias=config.attention_bias
  c.attn_multiplier = std::pow(positive_number(path, j, "query_pre_attn_scalar"), -0.5);
  c.attn_softcap = optional_number(path, j, "attn_logit_softcapping");
  c.final_softcap = optional_number(path, j, "final_logit_softcapping");
  c.mask_window = positive_int(path, require(path, j, "sliding_window"), "sliding_window", int64_t{1} << 40);
  c.sliding_layers.resize(size_t(layers));
  for (int64_t l = 0; l < layers; ++l)  // Gemma2DecoderLayer.is_sliding = not bool(layer_idx % 2)
    c.sliding_layers[size_t(l)] = l % 2 == 0;
  if (c.model_type == "gemma3_text") {
    require_value(path, j, "use_bidirectional_attention", false, "bidirectional attention is another mask");
    c.qk_norm_after_transpose = true;
    // Gemma3TextConfig: layer_types, or (older configs) sliding_window_pattern, default 6: layer l is full when
    // (l + 1) % pattern == 0.
    int64_t pattern = 6;
    for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"})
      if (j.contains(key) && !j[key].is_null()) pattern = positive_int(path, j[key], key, kMaxLayers);
    for (int64_t l = 0; l < layers; ++l) c.sliding_layers[size_t(l)] = (l + 1) % pattern != 0;
    // Gemma3RotaryEmbedding: sliding layers rotate with rope_local_base_freq (default 10000.0), full layers with
    // rope_theta and rope_scaling, of which memplan reads the linear kind (Gemma 3 4B and up: factor 8).
    c.rope_local_theta = j.contains("rope_local_base_freq") && !j["rope_local_base_freq"].is_null()
                             ? positive_number(path, j, "rope_local_base_freq")
                             : 10000.0;
    const auto scaling = j.find("rope_scaling");
    if (scaling != j.end() && !scaling->is_null()) {
      const json type = scaling->is_object() ? scaling->value("rope_type", scaling->value("type", json())) : json();
      if (type != "linear" || !scaling->contains("factor"))
        fail(path, "config key \"rope_scaling\" is " + scaling->dump() + "; memplan reads null or rope_type linear");
      c.rope_factor = positive_number(path, *scaling, "factor");
    }
  } else {
    require_value(path, j, "rope_scaling", nullptr, "Gemma2RotaryEmbedding has no scaling");
  }
  read_layer_types(path, j, c.sliding_layers);  // the newer configs' per-layer list wins (Gemma2Config, Gemma3TextConfig)
}

}  // namespace memplan::hf
