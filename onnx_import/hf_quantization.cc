#include "onnx_import/hf_quantization.h"

#include <algorithm>
#include <initializer_list>

#include "onnx_import/hf_config_keys.h"
#include "onnx_import/hf_modelopt.h"

namespace memplan::hf {

using nlohmann::json;

// Whether vLLM gives the MoE router (a ReplicatedLinear, a LinearBase) the model's quant_config:
//  - mixtral: MixtralMoE.__init__ builds self.gate with quant_config=None ("Gate always runs at half / full precision
//    for now"; mixtral.py at f0e2695, lines 118-127);
//  - qwen2_moe: Qwen2MoeSparseMoeBlock.__init__ builds self.gate with quant_config=None (qwen2_moe.py at 8bbabf0,
//    lines 135-141); its shared_expert_gate is a torch.nn.Linear (line 143), never quantized either
//    (report/serve_vllm_fp8.cc leaves it out);
//  - deepseek_v3 and deepseek_v2: DeepSeekV2Gate asserts quant_config None (deepseek_v2.py at b863fe5);
//  - qwen3_moe: Qwen3MoeSparseMoeBlock's gate is given the model's quant_config (qwen3_moe.py at 2e0831b).
std::string vllm_moe_router(const std::string& model_type) {
  for (const char* unquantized : {"mixtral", "qwen2_moe", "deepseek_v3", "deepseek_v2"})
    if (model_type == unquantized) return "unquantized";
  return model_type == "qwen3_moe" ? "quantized" : "";
}

StoredQuantization parse_quantization(const std::string& path, const json& q) {
  if (!q.is_object()) fail(path, "config key \"quantization_config\" must be an object, not " + q.dump());
  if (!q.contains("quant_method")) fail(path, "config key \"quantization_config\" has no \"quant_method\"");
  const json& m = q["quant_method"];
  StoredQuantization s;
  s.method = m.is_string() ? m.get<std::string>() : "";
  auto empty_list = [&](const char* key) {
    const auto it = q.find(key);
    if (it != q.end() && !it->is_null() && !(it->is_array() && it->empty()) && !(it->is_object() && it->empty()))
      fail(path, std::string("quantization_config key \"") + key + "\" is " + it->dump() +
                     ": layers left unquantized (or quantized otherwise) are not modelled");
  };
  auto first_int = [&](std::initializer_list<const char*> keys, int64_t min, int64_t max) -> int64_t {
    for (const char* key : keys) {
      const auto it = q.find(key);
      if (it == q.end() || it->is_null()) continue;
      if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > max || it->get<int64_t>() == 0)
        fail(path, std::string("quantization_config key \"") + key + "\" is " + it->dump() + ": an integer in [" +
                       std::to_string(min) + ", " + std::to_string(max) + "] (not 0) is expected");
      return it->get<int64_t>();
    }
    fail(path, std::string("quantization_config has no \"") + *keys.begin() + "\"");
  };
  if (s.method == "fp8") {
    const json& scheme = require(path, q, "activation_scheme");
    if (scheme != "static" && scheme != "dynamic")
      fail(path, "quantization_config key \"activation_scheme\" is " + scheme.dump() + "; vLLM reads static or dynamic");
    s.static_activations = scheme == "static";
    // Fp8Config.get_quant_method skips the layers is_layer_skipped names; the LM head is never quantized
    // (ParallelLMHead is no LinearBase), so a list naming only it and the experts' routers ("model.layers.N.mlp.gate")
    // is read; other layers left unquantized are refused.
    for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
      const auto it = q.find(key);
      auto router = [](const json& x) {  // mixtral's router is block_sparse_moe.gate, the others' mlp.gate
        if (!x.is_string()) return false;
        const std::string& name = x.get_ref<const std::string&>();
        for (const std::string suffix : {".mlp.gate", ".block_sparse_moe.gate"})
          if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
            return true;
        return false;
      };
      if (it != q.end() && it->is_array() && !it->empty() &&
          std::all_of(it->begin(), it->end(), [&](const json& x) { return x == "lm_head" || router(x); })) {
        if (s.ignored_routers == 0) s.ignored_routers = static_cast<int>(std::count_if(it->begin(), it->end(), router));
        continue;
      }
      empty_list(key);
    }
    const auto block = q.find("weight_block_size");
    if (block != q.end() && !block->is_null()) {
      // Fp8Config.__init__: two dimensions, dynamic activations only.
      if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
          !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0 ||
          (*block)[0].get<int64_t>() > (int64_t{1} << 20) || (*block)[1].get<int64_t>() > (int64_t{1} << 20))
        fail(path, "quantization_config key \"weight_block_size\" is " + block->dump() +
                       ": two positive integers [block_n, block_k] are expected");
      if (s.static_activations)
        fail(path, "quantization_config has weight_block_size with activation_scheme static: vLLM's Fp8Config "
                   "refuses it (block-wise quantization only supports dynamic activations)");
      s.block_n = (*block)[0].get<int64_t>();
      s.block_k = (*block)[1].get<int64_t>();
    }
  } else if (s.method == "gptq" || s.method == "awq") {
    const bool gptq = s.method == "gptq";
    s.bits = static_cast<int>(gptq ? first_int({"bits"}, 2, 8) : first_int({"w_bit", "bits"}, 4, 4));
    if (gptq && s.bits != 2 && s.bits != 3 && s.bits != 4 && s.bits != 8)
      fail(path, "quantization_config key \"bits\" is " + std::to_string(s.bits) + "; vLLM's GPTQ reads 2, 3, 4, 8");
    s.group_size = gptq ? first_int({"group_size"}, -1, int64_t{1} << 24) : first_int({"q_group_size", "group_size"}, 1, int64_t{1} << 24);
    if (gptq) {
      s.desc_act = bool_key(path, q, "desc_act", false);
      if (bool_key(path, q, "lm_head", false))
        fail(path, "quantization_config key \"lm_head\" is true: a quantized LM head is not modelled");
      empty_list("dynamic");
    }
    empty_list("modules_to_not_convert");
  } else if (s.method == "mxfp4") {
    // gpt-oss: vLLM's Mxfp4Config.from_config reads no key and quantizes the FusedMoE experts only
    // (cost_models/mxfp4_experts.h), so modules_to_not_convert (attention, router, embeddings, head) changes nothing it
    // holds; it must be a list of module patterns.
    const auto it = q.find("modules_to_not_convert");
    if (it != q.end() && !it->is_null() && !it->is_array())
      fail(path, "quantization_config key \"modules_to_not_convert\" must be a list of module names");
  } else if (s.method == "modelopt") {  // NVIDIA ModelOpt's config.json form (onnx_import/hf_modelopt.h)
    return parse_modelopt_config(path, q);
  } else {
    fail(path, "quantization_config quant_method " + m.dump() +
                   " is not modelled (memplan sizes fp8, gptq, awq, ModelOpt's FP8 (modelopt) and gpt-oss's mxfp4)");
  }
  return s;
}

}  // namespace memplan::hf
