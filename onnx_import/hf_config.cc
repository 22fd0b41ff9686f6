#include "onnx_import/hf_config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "onnx_import/errors.h"
#include "onnx_import/hf_config_arch.h"
#include "onnx_import/hf_config_keys.h"
#include "onnx_import/hf_deepseek.h"
#include "onnx_import/hf_gpt_oss.h"
#include "onnx_import/hf_moe.h"
#include "onnx_import/hf_moe_grouped.h"
#include "onnx_import/hf_quantization.h"
#include "onnx_import/hf_modelopt.h"
#include "onnx_import/llama_graph.h"
#include "onnx_import/model_reader.h"

namespace memplan {
namespace {

using nlohmann::json;
using namespace hf;

// Keys that do not change the graph of a training step or its memory, by what the modeling code does with them
// (transformers models/llama/modeling_llama.py, mistral/modeling_mistral.py, qwen2/modeling_qwen2.py,
// qwen3/modeling_qwen3.py):
// bookkeeping, token ids, initialisation, the generation cache switch; rope_theta and rope_scaling change rotary's
// values only (LlamaRotaryEmbedding: inv_freq's values, one table per forward, same shapes); the sliding window
// masks more keys with a mask of the same seq x seq shape in eager attention (MistralAttention / Qwen2Attention), so
// a training step is the same graph; max_position_embeddings is read but is no shape of a training graph.
const std::set<std::string>& harmless_keys() {
  static const std::set<std::string> keys = {
      "architectures", "_name_or_path", "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id",
      "initializer_range", "use_cache", "rope_theta", "rope_scaling", "sliding_window", "use_sliding_window",
      "max_window_layers", "max_position_embeddings", "model_type", "torch_dtype", "dtype", "hidden_size",
      "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
      "vocab_size", "rms_norm_eps", "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act",
      "attention_dropout", "pretraining_tp", "use_mrope", "rope_type"};
  return keys;
}

}  // namespace

std::string config_torch_dtype(const std::string& path) {
  return parse_decoder_config(path, read_small_file(path, "a config.json")).torch_dtype;
}

std::string config_model_type(const std::string& path) {
  try {  // read_small_file's checks (a file, at most 16 MiB) apply here too; the model's reader names what is wrong
    return parse_decoder_config(path, read_small_file(path, "a config.json")).model_type;
  } catch (const InputError&) {
    return "";
  }
}

bool is_config_path(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
}

DecoderConfig parse_decoder_config(const std::string& path, const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past a double (1E99999)
    fail(path, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(path, "a config.json holds one JSON object");
  DecoderConfig c;
  const json& type = require(path, j, "model_type");
  if (!type.is_string()) fail(path, "config key \"model_type\" must be a string, not " + type.dump());
  c.model_type = type.get<std::string>();
  c.hf_arch = arch_keys().count(c.model_type) > 0;
  // A mixture of experts shares its dense analogue's attention and keys (hf_moe.h): mixtral mistral's, qwen2_moe
  // qwen2's, qwen3_moe qwen3's.
  const std::string dense = moe_dense_type(c.model_type);
  const bool deepseek = c.model_type == "deepseek_v3" || c.model_type == "deepseek_v2";
  if (dense != "llama" && dense != "mistral" && dense != "qwen2" && dense != "qwen3" && !c.hf_arch && !deepseek &&
      c.model_type != "gpt_oss")
    fail(path, "model_type \"" + c.model_type +
                   "\" is not supported (memplan builds llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, "
                   "mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3 and gpt_oss)");
  for (const auto& [key, value] : j.items())
    if (key != "quantization_config" && !harmless_keys().count(key) &&
        !(c.hf_arch && arch_keys().at(c.model_type).count(key)) && !moe_keys(c.model_type).count(key) &&
        !deepseek_keys(c.model_type).count(key) && !gpt_oss_keys(c.model_type).count(key))
      fail(path, "config key \"" + key + "\" is not supported for model_type \"" + c.model_type +
                     "\": memplan does not know what it does to memory");
  const bool gemma = c.model_type == "gemma2" || c.model_type == "gemma3_text";
  // Gemma2MLP / Gemma3MLP read hidden_activation; their configs state hidden_act the same.
  for (const char* key : {"hidden_act", "hidden_activation"})
    require_value(path, j, key, gemma ? "gelu_pytorch_tanh" : "silu", "the MLP's activation: another changes the graph");
  require_value(path, j, "attention_dropout", 0.0, "dropout in training keeps a mask per attention");
  require_value(path, j, "pretraining_tp", 1, "LlamaMLP and LlamaAttention split every projection when it is > 1");
  require_value(path, j, "use_mrope", false, "multimodal rotary");
  c.hidden_size = int_key(path, j, "hidden_size", kMaxDimension);
  c.intermediate_size = int_key(path, j, "intermediate_size", kMaxDimension);
  c.num_hidden_layers = int_key(path, j, "num_hidden_layers", kMaxLayers);
  c.num_attention_heads = int_key(path, j, "num_attention_heads", kMaxDimension);
  c.vocab_size = int_key(path, j, "vocab_size", kMaxDimension);
  c.max_position_embeddings = int_key(path, j, "max_position_embeddings", int64_t{1} << 40);
  // LlamaConfig: num_key_value_heads defaults to num_attention_heads, head_dim to hidden_size / heads.
  const auto kv = j.find("num_key_value_heads");
  c.num_key_value_heads = kv == j.end() || kv->is_null() ? c.num_attention_heads
                                                          : positive_int(path, *kv, "num_key_value_heads", kMaxDimension);
  const auto hd = j.find("head_dim");
  // Qwen3Config has a head_dim default of its own, not hidden_size / heads (Qwen3-8B: 4096 / 32 = 128 by chance;
  // Qwen3-0.6B: 1024 / 16 = 64, its head_dim 128): memplan reads it from the config rather than guess.
  if ((dense == "qwen3" || gemma) && (hd == j.end() || hd->is_null()))
    fail(path, "config key \"head_dim\" is missing");
  if (deepseek) {
    if (hd != j.end())
      fail(path, "config key \"head_dim\" is not a " + c.model_type + " key (qk_rope_head_dim is its head_dim)");
  } else if (hd == j.end() || hd->is_null()) {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail(path, "hidden_size " + std::to_string(c.hidden_size) + " is not a multiple of num_attention_heads " +
                     std::to_string(c.num_attention_heads) + " and no head_dim is given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  } else {
    c.head_dim = positive_int(path, *hd, "head_dim", kMaxDimension);
  }
  if (c.head_dim % 2 != 0) fail(path, "head_dim " + std::to_string(c.head_dim) + " is odd: rotary needs an even one");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(path, "num_attention_heads " + std::to_string(c.num_attention_heads) +
                   " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
  if (c.num_attention_heads * c.head_dim > kMaxDimension)
    fail(path, "num_attention_heads x head_dim is over " + std::to_string(kMaxDimension));
  c.rms_norm_eps = positive_number(path, j, "rms_norm_eps");
  // rope_theta: LlamaConfig's default is 10000.0.
  c.rope_theta = j.contains("rope_theta") && !j["rope_theta"].is_null() ? positive_number(path, j, "rope_theta") : 10000.0;
  // Gemma2Config and Gemma3TextConfig default to a tied head, the others to an untied one.
  c.tie_word_embeddings = bool_key(path, j, "tie_word_embeddings", gemma);
  c.rotary_dim = c.head_dim;
  const bool attention_bias = bool_key(path, j, "attention_bias", false);
  c.mlp_bias = bool_key(path, j, "mlp_bias", false);
  if (dense == "qwen2") {
    // Qwen2Attention: q/k/v with bias=True, o_proj without; Qwen2MLP without biases (no config key for either).
    if (j.contains("attention_bias") || j.contains("mlp_bias"))
      fail(path, "config key \"" + std::string(j.contains("attention_bias") ? "attention_bias" : "mlp_bias") +
                     "\" is not a qwen2 key: Qwen2's biases are fixed by its modeling code");
    c.qkv_bias = true;
  } else if (dense == "qwen3") {
    // Qwen3Attention: every projection takes bias=config.attention_bias; Qwen3MLP has no biases (no config key);
    // q_norm and k_norm, RMSNorms over head_dim, on q and k before rotary (transformers
    // models/qwen3/modeling_qwen3.py).
    if (j.contains("mlp_bias")) fail(path, "config key \"mlp_bias\" is not a qwen3 key: Qwen3MLP has no biases");
    c.qkv_bias = c.o_bias = attention_bias;
    c.qk_norm = true;
  } else if (c.hf_arch) {
    parse_hf_arch(path, j, c);
  } else if (dense == "mistral") {
    if (attention_bias || c.mlp_bias) fail(path, "MistralAttention and MistralMLP have no biases");
  } else {
    c.qkv_bias = c.o_bias = attention_bias;  // LlamaAttention: every projection takes bias=config.attention_bias
  }
  // MistralAttention masks keys older than sliding_window; Qwen2 only with use_sliding_window (and then on the layers
  // from max_window_layers on). A window at least the position limit masks nothing.
  const auto window = j.find("sliding_window");
  const bool windowed = dense == "mistral" || bool_key(path, j, "use_sliding_window", false);
  if (windowed && window != j.end() && !window->is_null()) {
    const int64_t w = positive_int(path, *window, "sliding_window", int64_t{1} << 40);
    if (w < c.max_position_embeddings) c.sliding_window = w;
    if (dense == "mistral") c.stated_window = w;
  }
  if (const auto q = j.find("quantization_config"); q != j.end() && !q->is_null())
    c.quantization = parse_quantization(path, *q);
  c.quantization.moe_router = vllm_moe_router(c.model_type);  // also for --quantization fp8 on the bf16 config
  for (const char* key : {"torch_dtype", "dtype"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    const std::string d = it->is_string() ? it->get<std::string>() : "";
    if (d != "float32" && d != "float16" && d != "bfloat16")
      fail(path, std::string("config key \"") + key + "\" is " + it->dump() + "; memplan reads float32, float16, bfloat16");
    c.torch_dtype = d;
  }
  if (dense != c.model_type) parse_moe(path, j, c);
  if (deepseek) parse_deepseek(path, j, c);
  if (c.model_type == "gpt_oss") parse_gpt_oss(path, j, c);  // hf_gpt_oss.cc
  read_modelopt(path, c);  // hf_quant_config.json beside the config, and ModelOpt's checks (hf_modelopt.h)
  return c;
}

std::vector<std::string> config_graph_names() { return {"train", "decode", "prefill"}; }

ConfigGraph config_graph_from_name(const std::string& path, const std::string& name) {
  const std::vector<std::string> names = config_graph_names();
  for (size_t k = 0; k < names.size(); ++k)
    if (name == names[k]) return ConfigGraph(k);
  if (name.empty()) fail(path, "a config.json is several graphs: say which with --graph train|decode|prefill");
  fail(path, "--graph " + name + " is not train, decode or prefill");
}

std::vector<std::string> moe_routing_names() { return {"balanced", "worst"}; }

ReadModel read_config_model(const std::string& path, const std::string& graph, const std::string& moe_routing,
                            bool vllm_serve, const std::string& experts, int expert_parallel) {
  const std::string text = read_small_file(path, "a config.json");
  DecoderConfig config = parse_decoder_config(path, text);
  // A dense decoder's 128 x 128 block fp8 is trtllm's too (cost_models/trtllm_engine.h trtllm_quantization_check).
  const auto& q = config.quantization;
  // A ModelOpt hf_quant_config.json's FP8 too (cost_models/trtllm_engine.h).
  const bool nvfp4 = q.method == "nvfp4";  // vLLM's only (report/serve_engines.cc)
  const bool trtllm = (q.method == "fp8" && q.block_n == 128 && q.block_k == 128 && config.num_experts == 0 &&
                       !config.mla) || (q.modelopt_file && !nvfp4);
  if (!q.method.empty() && !vllm_serve)
    fail(q.modelopt_file ? q.modelopt_path : path,
         (q.modelopt_file ? "ModelOpt " + std::string(q.modelopt_algo()) + " quantization"
                          : "config key \"quantization_config\" (" + q.method + ")") +
             " is modelled by serve --engine vllm" +
                   (nvfp4 ? "" : trtllm ? ", sglang and trtllm" : " and sglang") +
                   " only: this command's graph would hold the unquantized weights" +
                   (config.quantization.method == "mxfp4"
                        ? " (transformers dequantizes MXFP4 experts to bfloat16 without triton kernels, "
                          "Mxfp4Config(dequantize=True): remove quantization_config to estimate that bfloat16 model)"
                        : ""));
  if (!moe_routing.empty()) {
    if (moe_routing != "balanced" && moe_routing != "worst")
      fail(path, "--moe-routing " + moe_routing + " is not balanced or worst");
    if (config.num_experts == 0)
      fail(path, "--moe-routing routes a mixture of experts' tokens; model_type \"" + config.model_type +
                     "\" has no experts");
    config.worst_routing = moe_routing == "worst";
  }
  // Its routing rule (hf_deepseek.h), which grouped_mm's tensors do not depend on (S rows) but under --ep.
  if (experts != "grouped_mm" || expert_parallel > 1) check_deepseek_read(path, config);
  const ConfigGraph kind = config_graph_from_name(path, graph);
  if (!experts.empty()) check_grouped_experts(path, experts, config);  // hf_moe_grouped.h
  // serve --engine vllm, sglang and trtllm (which refuse --experts-implementation) replace each sparse block's experts
  // by their fused MoE kernel (hf_moe.h), where find_moe_blocks reads the block's router: not DeepseekV2MoEGate's
  // group_limited_greedy (a Where over the softmax before the top-k), whose experts that analysis keeps in the step as
  // the eager loop writes them. An explicit `experts` (eager: transformers' loop, as tests/import/tools/hf_config_dump
  // asks for it to compare with torch.onnx.export) keeps the loop.
  config.engine_experts =
      vllm_serve && experts.empty() && config.num_experts > 0 && !(config.deepseek_v2 && config.group_limited);
  if (expert_parallel > 1) check_expert_parallel(path, expert_parallel, kind, config);  // hf_moe_grouped.h
  // The window in force: mistral's (and qwen2's with use_sliding_window) below the position limit; gemma2's,
  // gemma3_text's and phi3's on their windowed layers (parse_hf_arch), below the limit too.
  const bool arch_window = config.hf_arch && config.mask_window < config.max_position_embeddings &&
                           std::count(config.sliding_layers.begin(), config.sliding_layers.end(), true) > 0;
  const int64_t in_force = arch_window ? config.mask_window : config.sliding_window;
  // A window below the position limit: transformers' DynamicCache keeps the last sliding_window - 1 tokens of each
  // windowed layer (cache_utils.py DynamicSlidingWindowLayer.update: the concatenation is sliced to
  // [..., -sliding_window + 1:, :]), a cache memplan's decoder, which holds every past token, does not build;
  // serve --engine vllm sizes mistral's, gemma2's, gemma3_text's and phi3's by vLLM's rule (vllm_serve above).
  const bool vllm_window = vllm_serve && (config.model_type == "mistral" || config.hf_arch);
  if (kind != ConfigGraph::Train && in_force > 0 && !vllm_window)
    fail(path, "config key \"sliding_window\" is " + std::to_string(in_force) + ": --graph " + graph +
                   " with a sliding window is not built (transformers' cache keeps the last sliding_window - 1 "
                   "tokens of each windowed layer; memplan's decoder holds every past token)" +
                   (config.model_type == "mistral" || config.hf_arch ? "; serve --engine vllm sizes it as vLLM does"
                                                                     : "") +
                   "; --graph train is the same graph with or without the window");
  ReadModel model;
  if (kind != ConfigGraph::Train && vllm_window) {
    if (config.model_type == "mistral" && config.stated_window > 0) {  // every layer (vLLM's llama.py)
      model.sliding_window = config.stated_window;
      model.sliding_layers.assign(size_t(config.num_hidden_layers), true);
    } else if (config.hf_arch && config.mask_window > 0) {
      // vLLM windows the layers transformers windows: gemma2.py and gemma3.py per layer (layer_types, else Gemma 2's
      // even layers and Gemma 3's pattern); Phi3ForCausalLM is its llama.py's, the model's window on every layer
      // (parse_hf_arch marks them all).
      model.sliding_window = config.mask_window;
      model.sliding_layers = config.sliding_layers;
    }
  }
  build_llama_graph(config, kind, model.proto);
  if (kind == ConfigGraph::Decode) model.kv_cache = config_kv_cache(config);
  model.dim_sums = config_dim_sums(kind);
  model.file_bytes = text.size();
  model.max_positions = config.max_position_embeddings;
  model.rotary_dim = config.rotary_dim;
  const bool local = config.rope_local_theta > 0 &&
                     std::count(config.sliding_layers.begin(), config.sliding_layers.end(), true) > 0 &&
                     (config.rope_local_theta != config.rope_theta || config.rope_factor != 1.0);
  model.rotary_tables = local ? 2 : 1;
  model.rotary_scaled = config.rope_factor != 1.0;
  model.stored_dtype = config.torch_dtype;
  model.model_type = config.model_type;
  model.quantization = config.quantization;
  if (config.mla) {
    MlaDims& m = model.mla;
    m.kv_lora_rank = config.kv_lora_rank;
    m.qk_rope_head_dim = config.qk_rope_head_dim;
    m.qk_nope_head_dim = config.qk_nope_head_dim;
    m.v_head_dim = config.v_head_dim;
    m.heads = config.num_attention_heads;
    m.layers = config.num_hidden_layers;
    // vLLM's DeepseekV2MoE (deepseek_v2.py, serving both) gives the gate e_score_correction_bias only under
    // topk_method noaux_tc: deepseek_v3's, not deepseek_v2's.
    m.router_bias_elements = config.deepseek_v2 ? 0 : config.num_experts * std::count(config.moe_layers.begin(),
                                                                                      config.moe_layers.end(), true);
    // vLLM's DeepseekScalingRotaryEmbedding._compute_cos_sin_cache: arange(original x factor) rows under yarn
    // (rotary_embedding/deepseek_scaling_rope.py); get_rope's plain RotaryEmbedding: max_position rows.
    m.rotary_rows = config.yarn_factor > 0
                        ? int64_t(std::ceil(double(config.yarn_original) * config.yarn_factor))
                        : config.max_position_embeddings;
  }
  return model;
}

ReadModel read_model_source(const std::string& path, const std::string& graph, const std::string& moe_routing,
                            bool vllm_serve, const std::string& experts, int expert_parallel) {
  if (is_config_path(path)) return read_config_model(path, graph, moe_routing, vllm_serve, experts, expert_parallel);
  if (!experts.empty() || expert_parallel > 1)
    fail(path, "--experts-implementation and --ep choose how a config.json's experts run; an ONNX file's are its graph's");
  if (!graph.empty()) fail(path, "--graph chooses a config.json's graph; an ONNX file is one graph already");
  if (!moe_routing.empty())
    fail(path, "--moe-routing chooses how a config.json's experts are routed; an ONNX file's routing is its graph's");
  return read_model_file(path);
}

}  // namespace memplan
