#include "onnx_import/hf_modelopt.h"

#include <filesystem>
#include <regex>
#include <set>

#include "onnx_import/hf_config_keys.h"

namespace memplan::hf {
namespace {

using nlohmann::json;

constexpr const char* kFile = "hf_quant_config.json";

// The settings both forms carry, read into `s` (`where`: how the message names the key's place).
void read_settings(const std::string& path, const std::string& where, const json& algo, const json& group_size,
                   bool kv_fp8, const char* exclude_key, const json* exclude, StoredQuantization& s) {
  if (!algo.is_string())
    fail(path, where + "key \"quant_algo\" is " + algo.dump() + ": a ModelOpt checkpoint names its algorithm");
  if (algo != "FP8" && algo != "NVFP4")
    fail(path, where + "key \"quant_algo\" is " + algo.dump() + ": memplan sizes ModelOpt's FP8 (per-tensor) and "
               "NVFP4 only; W4A16_NVFP4, W4A8_AWQ, W4A16_AWQ (INT4_AWQ), FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, MXFP8 "
               "and MIXED_PRECISION hold other layouts, which are not sized");
  s.method = algo == "NVFP4" ? "nvfp4" : "fp8";
  // NVFP4: 16 FP4 values share an fp8 scale (ModelOptNvFp4Config._from_config's group_size, default 16; the kernels
  // are built for 16 only).
  if (s.method == "nvfp4") {
    if (!group_size.is_null() && group_size != 16)
      fail(path, where + "key \"group_size\" is " + group_size.dump() + ": NVFP4 scales blocks of 16 values");
    s.group_size = 16;
  } else if (!group_size.is_null()) {
    fail(path, where + "key \"group_size\" is " + group_size.dump() + " with quant_algo FP8, whose scales are "
               "per tensor: not modelled");
  }
  s.static_activations = true;  // ModelOptFp8LinearMethod: a float32 input_scale a module, kept (its max)
  s.modelopt = true;
  s.modelopt_kv_fp8 = kv_fp8;
  s.modelopt_path = path;
  if (exclude == nullptr || exclude->is_null()) return;
  const std::string key = where + "key \"" + exclude_key + "\" ";
  if (!exclude->is_array()) fail(path, key + "must be a list of module names, not " + exclude->dump());
  static const std::regex unfused(R"(model\.layers\.(0|[1-9][0-9]{0,5})\.(self_attn\.o_proj|mlp\.down_proj))");
  // A mixture of experts' router (mixtral's block_sparse_moe.gate, the others' mlp.gate): counted, as fp8's
  // ignored_layers are (StoredQuantization::ignored_routers), and checked against the model in read_modelopt; the
  // wildcard over every layer's, which vLLM matches with fnmatch, is every router.
  static const std::regex router(R"(model\.layers\.(0|[1-9][0-9]{0,5})\.(mlp|block_sparse_moe)\.gate)");
  for (const json& e : *exclude) {
    if (e == "lm_head") continue;
    if (e == "model.layers.*.mlp.gate" || e == "model.layers.*.block_sparse_moe.gate") {  // fnmatch: every router
      s.all_routers_ignored = true;
      continue;
    }
    if (e.is_string() && std::regex_match(e.get_ref<const std::string&>(), router)) {
      ++s.ignored_routers;
      continue;
    }
    if (!e.is_string() || !std::regex_match(e.get_ref<const std::string&>(), unfused))
      fail(path, key + "entry " + e.dump() + ": which of the graph's layers it leaves unquantized is not mapped "
                 "(memplan maps lm_head, a layer's model.layers.N.self_attn.o_proj or model.layers.N.mlp.down_proj, "
                 "and a router's model.layers.N.mlp.gate; q/k/v and gate/up are fused modules, and the engines match "
                 "wildcards differently)");
    s.excluded_modules.push_back(e.get<std::string>());
  }
}

void only_keys(const std::string& path, const std::string& where, const json& j, const std::set<std::string>& keys) {
  for (const auto& [key, value] : j.items())
    if (!keys.count(key) && !value.is_null())
      fail(path, where + "key \"" + key + "\" is not read: memplan does not know what it does to a ModelOpt "
                 "checkpoint's memory");
}

void check_producer(const std::string& path, const std::string& where, const json& j) {
  const auto it = j.find("producer");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object() || it->value("name", json()) != "modelopt")
    fail(path, where + "producer is " + it->dump() + ": memplan reads ModelOpt's (name \"modelopt\")");
}

// hf_quant_config.json as an object.
StoredQuantization parse_modelopt_file(const std::string& path, const json& j) {
  if (!j.is_object() || !j.contains("quantization") || !j["quantization"].is_object())
    fail(path, "a ModelOpt hf_quant_config.json holds an object with a \"quantization\" object");
  only_keys(path, "", j, {"producer", "quantization"});
  check_producer(path, "", j);
  const json& q = j["quantization"];
  only_keys(path, "quantization ", q, {"quant_algo", "kv_cache_quant_algo", "exclude_modules", "group_size"});
  const json kv = q.value("kv_cache_quant_algo", json());
  if (!kv.is_null() && kv != "FP8")
    fail(path, "quantization key \"kv_cache_quant_algo\" is " + kv.dump() + ": memplan sizes an FP8 KV cache or none");
  const auto ex = q.find("exclude_modules");
  StoredQuantization s;
  read_settings(path, "quantization ", q.value("quant_algo", json()), q.value("group_size", json()), kv == "FP8",
                "exclude_modules", ex == q.end() ? nullptr : &*ex, s);
  s.modelopt_file = true;
  return s;
}


}  // namespace

StoredQuantization parse_modelopt_config(const std::string& path, const json& q) {
  const std::string where = "quantization_config (quant_method modelopt) ";
  only_keys(path, where, q, {"quant_method", "quant_algo", "kv_cache_scheme", "kv_cache_quant_algo", "ignore",
                             "producer", "config_groups", "group_size"});
  check_producer(path, where, q);
  // kv_cache_scheme {"type": "float", "num_bits": 8, ...} is the FP8 cache (SGLang's and vLLM's reading); vLLM 0.11's
  // flat form also took kv_cache_quant_algo.
  bool kv = false;
  if (const json scheme = q.value("kv_cache_scheme", json()); !scheme.is_null()) {
    if (!scheme.is_object() || scheme.value("type", json()) != "float" || scheme.value("num_bits", json()) != 8)
      fail(path, where + "key \"kv_cache_scheme\" is " + scheme.dump() + ": memplan sizes an FP8 KV cache (type float, "
                 "8 bits) or none");
    kv = true;
  }
  if (const json algo = q.value("kv_cache_quant_algo", json()); !algo.is_null()) {
    if (algo != "FP8")
      fail(path, where + "key \"kv_cache_quant_algo\" is " + algo.dump() + ": memplan sizes an FP8 KV cache or none");
    kv = true;
  }
  const auto ignore = q.find("ignore");
  StoredQuantization s;
  read_settings(path, where, q.value("quant_algo", json()), q.value("group_size", json()), kv, "ignore",
                ignore == q.end() ? nullptr : &*ignore, s);
  return s;
}

void read_modelopt(const std::string& config_path, DecoderConfig& c) {
  const std::filesystem::path dir = std::filesystem::path(config_path).parent_path();
  const std::string file = (dir.empty() ? std::filesystem::path(kFile) : dir / kFile).string();
  std::error_code ec;
  if (std::filesystem::is_regular_file(file, ec)) {
    json j;
    try {
      j = json::parse(read_small_file(file, "a ModelOpt hf_quant_config.json"));
    } catch (const json::exception& e) {
      fail(file, std::string("not valid JSON: ") + e.what());
    }
    StoredQuantization s = parse_modelopt_file(file, j);
    const StoredQuantization& stated = c.quantization;
    if (!stated.method.empty()) {
      // Both forms: what config.json states must be what the file states (the engines read one or the other).
      if (!stated.modelopt || stated.method != s.method)
        fail(file, "states ModelOpt " + std::string(s.modelopt_algo()) + " while " + config_path +
                       "'s quantization_config is " +
                       (stated.modelopt ? "ModelOpt " + std::string(stated.modelopt_algo()) : stated.method) +
                       ": contradictory quantization settings are not modelled");
      if (stated.modelopt_kv_fp8 != s.modelopt_kv_fp8 || stated.excluded_modules != s.excluded_modules ||
          stated.ignored_routers != s.ignored_routers || stated.all_routers_ignored != s.all_routers_ignored)
        fail(file, std::string("quantization key \"") +
                       (stated.modelopt_kv_fp8 != s.modelopt_kv_fp8 ? "kv_cache_quant_algo" : "exclude_modules") +
                       "\" contradicts " + config_path + "'s quantization_config (" +
                       (stated.modelopt_kv_fp8 != s.modelopt_kv_fp8 ? "kv_cache_scheme" : "ignore") +
                       "): contradictory quantization settings are not modelled");
    }
    s.moe_router = c.quantization.moe_router;
    c.quantization = s;
  }
  const StoredQuantization& q = c.quantization;
  if (!q.modelopt) return;
  const std::string what = q.modelopt_file ? "hf_quant_config.json" : "quantization_config";
  // NVFP4 experts: vLLM's ModelOptNvFp4FusedMoE (cost_models/vllm_nvfp4.h); FP8 ones (ModelOptFp8MoEMethod) and
  // latent attention are not sized.
  if ((c.num_experts > 0 && q.method != "nvfp4") || c.mla || c.model_type == "gpt_oss")
    fail(q.modelopt_path, what + " (ModelOpt " + q.modelopt_algo() + ") on model_type \"" +
                              c.model_type + "\": the engines' " +
                              (c.num_experts > 0 && !c.mla && c.model_type != "gpt_oss"
                                   ? "ModelOpt FP8 MoE path (ModelOptFp8MoEMethod) is not sized; memplan sizes "
                                     "ModelOpt FP8 on dense decoders and NVFP4 on dense decoders and mixtures of "
                                     "experts"
                                   : "ModelOpt latent-attention and gpt-oss paths are not sized; memplan sizes "
                                     "ModelOpt on dense decoders and NVFP4 on mixtures of experts"));
  if ((q.ignored_routers > 0 || q.all_routers_ignored) && c.num_experts == 0)
    fail(q.modelopt_path, what + " excludes " +
                              (q.all_routers_ignored ? std::string("every router (model.layers.*.mlp.gate)")
                                                     : std::to_string(q.ignored_routers) + " routers (mlp.gate)") +
                              ", and " + config_path + " has no experts");
  for (const std::string& m : q.excluded_modules)
    if (std::stoll(m.substr(13, m.find('.', 13) - 13)) >= c.num_hidden_layers)
      fail(q.modelopt_path, what + " excludes " + m + ", a layer the model (num_hidden_layers " +
                                std::to_string(c.num_hidden_layers) + ") does not have");
}

}  // namespace memplan::hf
