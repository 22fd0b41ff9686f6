// deepseek_v3 and deepseek_v2 (onnx_import/hf_deepseek.h): their config keys and DeepseekV3Attention (multi-head
// latent attention, DeepseekV2Attention's too but for its rotary: hf_deepseek_v2.cc) as torch.onnx.export (torch 1.13,
// opset 17) writes tests/models/hf_deepseek.py (the routers: hf_deepseek_router.cc).
#include "onnx_import/hf_deepseek.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "onnx_import/decoder_builder.h"
#include "onnx_import/hf_config_keys.h"

namespace memplan {

using nlohmann::json;
using namespace hf;

namespace {

// modeling_deepseek_v3.py yarn_get_mscale.
double yarn_get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double number(const std::string& path, const json& j, const std::string& key, double absent) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absent;
  if (!it->is_number() || it->get<double>() <= 0 || it->get<double>() > 1e30)
    fail(path, "rope_scaling key \"" + key + "\" is " + it->dump() + ": a positive number is expected");
  return it->get<double>();
}

// rope_scaling: null (the default rope) or yarn. inv_freq and attention_scaling as modeling_rope_utils.py
// _compute_yarn_parameters computes them over qk_rope_head_dim (DeepseekV3Config.head_dim): beta_fast 32 and
// beta_slow 1 by default, the correction range from original_max_position_embeddings (max_position_embeddings
// without it), attention_factor get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are given
// (else get_mscale(factor)); DeepseekV3Attention.scaling times yarn_get_mscale(factor, mscale_all_dim)^2.
void parse_rope(const std::string& path, const json& j, DecoderConfig& c) {
  const int64_t dim = c.qk_rope_head_dim;
  c.attention_scale = std::pow(double(c.qk_nope_head_dim + dim), -0.5);
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return;
  const json& y = *it;
  if (!y.is_object()) fail(path, "config key \"rope_scaling\" must be an object or null");
  const auto type = y.contains("rope_type") ? y["rope_type"] : y.contains("type") ? y["type"] : json();
  if (type != "yarn") fail(path, "rope_scaling type " + type.dump() + " is not modelled for deepseek_v3 (yarn is)");
  for (const auto& [key, value] : y.items())
    if (key != "type" && key != "rope_type" && key != "factor" && key != "beta_fast" && key != "beta_slow" &&
        key != "mscale" && key != "mscale_all_dim" && key != "original_max_position_embeddings")
      fail(path, "rope_scaling key \"" + key + "\" is not supported: memplan does not know what it does");
  const double factor = number(path, y, "factor", 0);
  if (factor == 0) fail(path, "rope_scaling has no \"factor\"");
  const double mscale = number(path, y, "mscale", 0), all_dim = number(path, y, "mscale_all_dim", 0);
  c.rope_attention_scaling = mscale > 0 && all_dim > 0
                                 ? yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, all_dim)
                                 : yarn_get_mscale(factor, 1.0);
  if (all_dim > 0) {
    const double m = yarn_get_mscale(factor, all_dim);
    c.attention_scale = c.attention_scale * m * m;
  }
  const double base = c.rope_theta, fast = number(path, y, "beta_fast", 32), slow = number(path, y, "beta_slow", 1);
  const double original = number(path, y, "original_max_position_embeddings", double(c.max_position_embeddings));
  c.yarn_factor = factor;  // vLLM's rotary table rows (ReadModel::mla)
  c.yarn_original = int64_t(original);
  auto correction = [&](double rotations) {
    return (double(dim) * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(correction(fast)), 0.0);
  double high = std::min(std::ceil(correction(slow)), double(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t k = 0; k < dim / 2; ++k) {
    const double pos = std::pow(base, double(2 * k) / double(dim));
    const double ramp = std::clamp((double(k) - low) / (high - low), 0.0, 1.0), extrapolation = 1 - ramp;
    c.inv_freq.push_back(float((1 / (factor * pos)) * (1 - extrapolation) + (1 / pos) * extrapolation));
  }
}

}  // namespace

// DeepseekV3Config's keys. num_nextn_predict_layers counts the multi-token-prediction layers the checkpoint appends
// after num_hidden_layers, which transformers does not build (DeepseekV3Model._keys_to_ignore_on_load_unexpected
// drops model.layers.61.*); auto_map names the remote code, not used by transformers' own class.
const std::set<std::string>& deepseek_keys(const std::string& model_type) {
  static const std::set<std::string> keys = {
      "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
      "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq",
      "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor", "scoring_func", "topk_method", "ep_size",
      "num_nextn_predict_layers", "rope_interleave", "auto_map"};
  // DeepseekV2Config's: no rope_interleave (its rotary is apply_rotary_emb's, below) and no multi-token prediction;
  // aux_loss_alpha and seq_aux are the training loss's, which DeepseekV2MoEGate stores and its forward never computes.
  static const std::set<std::string> v2 = {
      "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
      "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq",
      "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor", "scoring_func", "topk_method", "ep_size",
      "aux_loss_alpha", "seq_aux", "auto_map"};
  static const std::set<std::string> none;
  return model_type == "deepseek_v3" ? keys : model_type == "deepseek_v2" ? v2 : none;
}

void parse_deepseek(const std::string& path, const json& j, DecoderConfig& c) {
  c.mla = true;
  const bool v2 = c.deepseek_v2 = c.model_type == "deepseek_v2";
  const std::string type = c.model_type, version = v2 ? "V2" : "V3";
  if (!v2) {
    // DeepseekV3TopkRouter is sigmoid scores with e_score_correction_bias and the group-limited top-k, whatever
    // these keys say; the remote code reads them (softmax, greedy): a config stating another routing is not this
    // model.
    require_value(path, j, "scoring_func", "sigmoid", "DeepseekV3TopkRouter scores by sigmoid");
    require_value(path, j, "topk_method", "noaux_tc", "DeepseekV3TopkRouter's group-limited top-k with its bias");
  } else {
    // DeepseekV2MoEGate (transformers' modular_deepseek_v2.py, first release): softmax scores, then topk_method's
    // greedy (DeepSeek-V2-Lite) or group_limited_greedy (DeepSeek-V2), no bias; anything else it leaves undefined.
    require_value(path, j, "scoring_func", "softmax", "DeepseekV2MoEGate scores by softmax");
    const auto method = j.find("topk_method");
    const json m = method == j.end() || method->is_null() ? json("greedy") : *method;  // DeepseekV2Config's default
    if (m != "greedy" && m != "group_limited_greedy")
      fail(path, "config key \"topk_method\" is " + m.dump() +
                     ": DeepseekV2MoEGate routes by greedy or group_limited_greedy (noaux_tc is deepseek_v3's)");
    c.group_limited = m == "group_limited_greedy";
    // DeepseekV2MoEGate stores norm_topk_prob and never reads it: its weights are the softmax scores times
    // routed_scaling_factor. The remote code (deepseek-ai's modeling_deepseek.py) divides them by their sum when
    // it is true, another graph: memplan builds transformers' and refuses the contradiction.
    require_value(path, j, "norm_topk_prob", false, "transformers' DeepseekV2MoEGate never normalises the top-k weights");
  }
  require_value(path, j, "moe_layer_freq", 1, "Deepseek" + version + "DecoderLayer makes every layer from "
                                              "first_k_dense_replace sparse, ignoring the key");
  require_value(path, j, "ep_size", 1, "the remote code's expert parallelism");
  if (c.mlp_bias) fail(path, "config key \"mlp_bias\" is true: Deepseek" + version + "MLP has no biases");
  if (c.num_key_value_heads != c.num_attention_heads)
    fail(path, "num_key_value_heads " + std::to_string(c.num_key_value_heads) + " is not num_attention_heads " +
                   std::to_string(c.num_attention_heads) + ": Deepseek" + version + "Attention builds every head's keys");
  if (c.num_attention_heads < 2) fail(path, "num_attention_heads 1: memplan builds " + type + " with 2 heads or more");
  if (const auto nextn = j.find("num_nextn_predict_layers"); nextn != j.end() && !nextn->is_null() &&
                                                             (!nextn->is_number_integer() || nextn->get<int64_t>() < 0))
    fail(path, "config key \"num_nextn_predict_layers\" is " + nextn->dump() + ": a count is expected");
  const auto q = j.find("q_lora_rank");
  c.q_lora_rank = q == j.end() || q->is_null() ? 0 : positive_int(path, *q, "q_lora_rank", kMaxDimension);
  c.kv_lora_rank = int_key(path, j, "kv_lora_rank", kMaxDimension);
  c.qk_nope_head_dim = int_key(path, j, "qk_nope_head_dim", kMaxDimension);
  c.qk_rope_head_dim = int_key(path, j, "qk_rope_head_dim", kMaxDimension);
  c.v_head_dim = int_key(path, j, "v_head_dim", kMaxDimension);
  if (c.qk_rope_head_dim % 2 != 0)
    fail(path, "qk_rope_head_dim " + std::to_string(c.qk_rope_head_dim) + " is odd: rotary needs an even one");
  if (c.num_attention_heads * (c.qk_nope_head_dim + std::max(c.qk_rope_head_dim, c.v_head_dim)) > kMaxDimension)
    fail(path, "num_attention_heads x the head dims is over " + std::to_string(kMaxDimension));
  c.head_dim = c.rotary_dim = c.qk_rope_head_dim;  // DeepseekV3Config.head_dim
  c.rope_interleave = !v2 && bool_key(path, j, "rope_interleave", true);
  parse_rope(path, j, c);
  // DeepseekV2Attention.scaling is qk_head_dim^-0.5 whatever rope_scaling says (modeling_deepseek_v2.py at
  // 0233e509); V3's multiplies yarn's mscale_all_dim in (parse_rope).
  if (v2) c.attention_scale = std::pow(double(c.qk_nope_head_dim + c.qk_rope_head_dim), -0.5);
  const int64_t layers = c.num_hidden_layers;
  c.num_experts = int_key(path, j, "n_routed_experts", kMaxExperts);
  c.experts_per_token = int_key(path, j, "num_experts_per_tok", kMaxExperts);
  c.expert_intermediate_size = int_key(path, j, "moe_intermediate_size", kMaxDimension);
  c.n_shared_experts = int_key(path, j, "n_shared_experts", 64);
  // DeepseekV2Config: n_group and topk_group default to null, read by group_limited_greedy only (greedy is one
  // group of every expert); norm_topk_prob false (never read, above), routed_scaling_factor 1.0.
  const bool grouped = !v2 || c.group_limited;
  c.n_group = grouped ? int_key(path, j, "n_group", kMaxExperts) : 1;
  c.topk_group = grouped ? int_key(path, j, "topk_group", kMaxExperts) : 1;
  c.norm_topk_prob = !v2 && bool_key(path, j, "norm_topk_prob", true);
  c.routed_scaling_factor = j.contains("routed_scaling_factor") && !j["routed_scaling_factor"].is_null()
                                ? positive_number(path, j, "routed_scaling_factor") : v2 ? 1.0 : 2.5;
  const int64_t experts = c.num_experts, k = c.experts_per_token;
  auto bad = [&](const std::string& what) { fail(path, what); };
  if (experts % c.n_group != 0)
    bad("n_routed_experts " + std::to_string(experts) + " is not a multiple of n_group " + std::to_string(c.n_group));
  const int64_t group = experts / c.n_group;
  if (!v2 && group < 2)
    bad("n_routed_experts / n_group is " + std::to_string(group) + ": DeepseekV3TopkRouter sums each group's two best");
  if (c.topk_group > c.n_group)
    bad("topk_group " + std::to_string(c.topk_group) + " is more than n_group " + std::to_string(c.n_group));
  if (k > experts)
    bad("num_experts_per_tok " + std::to_string(k) + " is more than the " + std::to_string(experts) + " experts");
  if (k > c.topk_group * group)
    bad("num_experts_per_tok " + std::to_string(k) + " is more than the topk_group x " + std::to_string(group) +
        " experts the grouped router keeps");
  const auto dense = j.find("first_k_dense_replace");
  const int64_t absent = v2 ? 0 : 3;  // DeepseekV2Config's default, DeepseekV3Config's
  const int64_t first =
      dense == j.end() || dense->is_null() ? absent : dense->is_number_integer() ? dense->get<int64_t>() : -1;
  if (first < 0 || first > layers)
    bad("config key \"first_k_dense_replace\" is " + (dense == j.end() ? std::string("?") : dense->dump()) +
        ": a layer count from 0 to " + std::to_string(layers) + " is expected");
  c.moe_layers.assign(size_t(layers), false);
  for (int64_t l = first; l < layers; ++l) c.moe_layers[size_t(l)] = true;  // Deepseek{V2,V3}DecoderLayer
  if ((layers - first) * experts > kMaxExpertBlocks)
    bad(std::to_string(experts) + " experts in " + std::to_string(layers - first) +
        " layers are more expert blocks than memplan builds (" + std::to_string(kMaxExpertBlocks) + ")");
}

void check_deepseek_read(const std::string& path, const DecoderConfig& c) {
  if (!c.mla) return;
  if (c.worst_routing) return;  // worst: ceil(k / group) <= topk_group, checked in parse_deepseek
  const int64_t experts = c.num_experts, k = c.experts_per_token, group = experts / c.n_group;
  // Token t's experts are the arc start .. start + k - 1 (mod E), start = t·k mod E (E starts cover every token);
  // the groups an arc meets are contiguous too, all of them when it wraps back into its first group.
  for (int64_t start = 0, t = 0; t < experts; ++t, start = (start + k) % experts) {
    const int64_t last = start + k - 1;
    int64_t spanned = last < experts ? last / group - start / group + 1
                                     : (experts - 1) / group - start / group + 1 + (last - experts) / group + 1;
    spanned = std::min(spanned, c.n_group);
    if (spanned > c.topk_group)
      fail(path, "--moe-routing balanced gives a token the experts " + std::to_string(start) + ".." +
                     std::to_string((start + k - 1) % experts) + ", in " + std::to_string(spanned) +
                     " groups, more than topk_group " + std::to_string(c.topk_group) +
                     ": " + (c.deepseek_v2 ? "DeepseekV2MoEGate" : "DeepseekV3TopkRouter") +
                     " cannot route so; use --moe-routing worst");
  }
}

// apply_rotary_pos_emb_interleave's x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d), then rotary;
// `heads` the tensor's heads (1 for the shared rope key). The reshape's list equals the rope key's earlier view
// (b, 1, s, d) for the key: the JIT merged them, so that copy is built beside it (mla_attention).
std::string LlamaBuilder::mla_rotary(const std::string& x, int64_t heads) {
  const int64_t d = c_.qk_rope_head_dim;
  if (!c_.rope_interleave) return x;
  e_.note(heads), e_.note(d / 2), e_.note(2);
  const std::string five = e_.size_list({b_, e_.pooled(heads), s_, e_.pooled(d / 2), e_.pooled(2)});
  const std::string t = transpose(reshape(x, five), {0, 1, 2, 4, 3});
  return reshape(t, heads == 1 ? rope_key_list_ : e_.size_list({b_, e_.pooled(heads), s_, e_.pooled(d)}));
}

// DeepseekV3Attention.forward as tests/models/hf_deepseek.py's MlaAttention (its docstring).
std::string LlamaBuilder::mla_attention(const std::string& layer, const std::string& x) {
  const std::string a = layer + "/self_attn", p = "layers." + layer.substr(8) + ".self_attn.";
  e_.scope = a;
  const int64_t h = c_.hidden_size, heads = c_.num_attention_heads, nope = c_.qk_nope_head_dim;
  const int64_t rope = c_.qk_rope_head_dim, vd = c_.v_head_dim, qk = nope + rope, r = c_.q_lora_rank;
  b_ = e_.op("Gather", {e_.op("Shape", {x}), e_.const_i64({0}, true)});
  e_.i("axis", 0);
  s_ = e_.op("Gather", {e_.op("Shape", {x}), e_.const_i64({1}, true)});
  e_.i("axis", 0);
  std::string q;
  if (r == 0) {
    q = linear(a + "/q_proj", p + "q_proj", x, h, heads * qk, false);
  } else {
    const std::string qa = linear(a + "/q_a_proj", p + "q_a_proj", x, h, r, c_.o_bias);
    const std::string normed = rms_norm(a + "/q_a_layernorm", p + "q_a_layernorm.weight", qa, false, r, 1e-6);
    e_.scope = a;
    q = linear(a + "/q_b_proj", p + "q_b_proj", normed, r, heads * qk, false);
  }
  // torch.split(t, [first, second], dim=-1): Split on the pooled size list (symbolic_opset13.py split).
  auto split = [&](const std::string& t, int64_t first, int64_t second, std::string& rest) {
    const std::string part = e_.op("Split", {t, e_.pooled_list({first, second}, "Split")}, 2);
    e_.i("axis", -1);
    rest = e_.output(1);
    return part;
  };
  e_.note(heads), e_.note(qk);
  // The JIT merges equal size lists: with qk_rope_head_dim == v_head_dim the kv view's list equals the query's, so
  // its copy is built here (as LlamaBuilder::attention builds k's and v's).
  const std::string q_list = e_.size_list({b_, s_, e_.pooled(heads), e_.pooled(qk)});
  const std::string kv_list = qk == nope + vd ? e_.size_list({b_, s_, e_.pooled(heads), e_.pooled(qk)}) : "";
  const std::string q4 = transpose(reshape(q, q_list), {0, 2, 1, 3});
  std::string q_rot, k_rot, value;
  const std::string q_pass = split(q4, nope, rope, q_rot);
  const std::string compressed = linear(a + "/kv_a_proj_with_mqa", p + "kv_a_proj_with_mqa", x, h,
                                        c_.kv_lora_rank + rope, c_.o_bias);
  const std::string latent = split(compressed, c_.kv_lora_rank, rope, k_rot);
  const std::string normed = rms_norm(a + "/kv_a_layernorm", p + "kv_a_layernorm.weight", latent, false,
                                      c_.kv_lora_rank, 1e-6);
  e_.scope = a;
  const std::string kv = linear(a + "/kv_b_proj", p + "kv_b_proj", normed, c_.kv_lora_rank, heads * (nope + vd), false);
  e_.note(nope + vd);
  const std::string kv4 = transpose(
      reshape(kv, !kv_list.empty() ? kv_list : e_.size_list({b_, s_, e_.pooled(heads), e_.pooled(nope + vd)})),
      {0, 2, 1, 3});
  const std::string k_pass = split(kv4, nope, vd, value);
  // k_rot.view(b, 1, s, rope); with the interleave, its reshape's equal list is built here too.
  e_.note(1), e_.note(rope);
  const std::string view = e_.size_list({b_, e_.pooled(1), s_, e_.pooled(rope)});
  if (c_.rope_interleave || c_.deepseek_v2) rope_key_list_ = e_.size_list({b_, e_.pooled(1), s_, e_.pooled(rope)});
  k_rot = reshape(k_rot, view);
  if (c_.deepseek_v2) {  // apply_rotary_emb (hf_deepseek_v2.cc)
    q_rot = mla_complex_rotary(q_rot, heads);
    k_rot = mla_complex_rotary(k_rot, 1);
  } else {
    q_rot = mla_rotary(q_rot, heads);
    k_rot = mla_rotary(k_rot, 1);
    q_rot = rotary(q_rot, cos_, sin_, rope / 2);
    k_rot = rotary(k_rot, cos_, sin_, rope / 2);
  }
  k_rot = expand_to(k_rot, {b_, e_.pooled(heads), s_, e_.pooled(rope)});  // k_rot.expand(b, heads, s, rope)
  const std::string query = e_.op("Concat", {q_pass, q_rot});
  e_.i("axis", -1);
  std::string keys = e_.op("Concat", {k_pass, k_rot});
  e_.i("axis", -1);
  const std::string layer_index = layer.substr(8);
  if (kind_ == ConfigGraph::Decode) {  // torch.cat((past, new), dim=2): DynamicCache.update
    e_.note(2);
    keys = e_.op("Concat", {"past_key_values." + layer_index + ".key", keys});
    e_.i("axis", 2);
    value = e_.op("Concat", {"past_key_values." + layer_index + ".value", value});
    e_.i("axis", 2);
  }
  if (kind_ != ConfigGraph::Train) {
    outputs_[keys] = "present." + layer_index + ".key";
    outputs_[value] = "present." + layer_index + ".value";
  }
  e_.note(2), e_.note(3);  // key.transpose(2, 3)'s ints (deepseek_v2's rotary reads no 3 before)
  const std::string scores = e_.op("MatMul", {query, transpose(keys, {0, 1, 3, 2})});
  const std::string scaled_scores = e_.op("Mul", {scores, e_.const_f32({float(c_.attention_scale)}, {})});
  const std::string probs = e_.op("Softmax", {e_.op("Add", {scaled_scores, mask_})});
  e_.i("axis", -1);
  const std::string context = transpose(e_.op("MatMul", {probs, value}), {0, 2, 1, 3});
  e_.note(heads * vd);
  const std::string merged = reshape(context, e_.size_list({b_, s_, e_.pooled(heads * vd)}));
  return linear(a + "/o_proj", p + "o_proj", merged, heads * vd, h, c_.o_bias);
}

}  // namespace memplan
