// NVIDIA ModelOpt checkpoints (quant_algo FP8: nvidia/Llama-3.1-8B-Instruct-FP8 and the like; NVFP4) as the serving
// engines read them. Internal to onnx_import.
//
// ModelOpt writes its settings in two forms (NVIDIA/Model-Optimizer modelopt/torch/export/convert_hf_config.py at
// a115c88, convert_hf_quant_config_format, whose docstring shows both):
//  - hf_quant_config.json beside config.json: {"producer": {"name": "modelopt", ...}, "quantization": {"quant_algo":
//    "FP8", "kv_cache_quant_algo": "FP8" or null, "exclude_modules": ["lm_head", ...]}}. memplan reads this file from
//    the config's directory when it is there (it never downloads anything);
//  - newer exports also write config.json's quantization_config: {"quant_method": "modelopt", "quant_algo": "FP8",
//    "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"} (the FP8 KV cache), "ignore": [...],
//    "config_groups": ..., "producer": ...}.
// The readers: vLLM's ModelOptFp8Config.from_config (vllm/model_executor/layers/quantization/modelopt.py at c9a5990:
// "quantization" nested, else quant_algo / kv_cache_quant_algo / ignore flat), SGLang's ModelOptFp8Config.from_config
// (python/sglang/srt/layers/quantization/modelopt_quant.py at faeb968: flat quant_algo / kv_cache_scheme / ignore
// first, else nested), TensorRT-LLM 1.0's ModelLoader._update_from_hf_quant_config (llmapi/llm_utils.py, the 1.0-era
// copy, index id 781189894: hf_quant_config.json only; a config.json quantization_config "modelopt" raises
// NotImplementedError there).
//
// Modelled: quant_algo "FP8" (per-tensor weights, static per-tensor activation scales) and "NVFP4" (group_size 16:
// vLLM's ModelOptNvFp4Config reads group_size, default 16; its layouts in cost_models/vllm_nvfp4.h, served by vLLM
// only); kv_cache_quant_algo "FP8" or
// none; exclude_modules entries "lm_head" (no engine quantizes the LM head under ModelOpt FP8 at the versions read:
// vLLM 0.11's and SGLang's get_quant_method give a method to LinearBase only, TensorRT-LLM's head takes no quant
// config) and whole unfused modules "model.layers.N.self_attn.o_proj" / "model.layers.N.mlp.down_proj" (matched the
// same by vLLM's is_layer_skipped, SGLang's substring test and TensorRT-LLM's fnmatch: kept in the model's type), and
// on a mixture of experts a router's "model.layers.N.mlp.gate" (counted as StoredQuantization::ignored_routers: a
// router vLLM builds with the quant_config, qwen3_moe's, stays in the model's type when every one is listed), or
// "model.layers.*.mlp.gate", every router (all_routers_ignored; vLLM's fnmatch).
// Refused, one message naming the file and the key: another quant_algo (W4A8_AWQ, W4A16_AWQ, INT4_AWQ,
// FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, MIXED_PRECISION...), another kv_cache_quant_algo, an exclude_modules entry
// not mapped above (q/k/v and gate/up are fused modules, whose partial exclusion the engines treat differently;
// wildcards match differently in each), a key not read, FP8 on a mixture of experts, latent attention or gpt-oss
// (the engines' ModelOpt FP8 MoE and MLA methods are not sized; NVFP4 experts are vLLM's ModelOptNvFp4FusedMoE,
// cost_models/vllm_nvfp4.h), routers listed on a model without experts, and a config.json quantization_config that
// contradicts hf_quant_config.json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "onnx_import/hf_config.h"

namespace memplan::hf {

// config.json's quantization_config with quant_method "modelopt" (`path`: the config).
StoredQuantization parse_modelopt_config(const std::string& path, const nlohmann::json& q);

// `config_path`'s sibling hf_quant_config.json, when it exists: read and merged into `c.quantization` (refusing a
// config.json quantization_config it contradicts). Then, for any ModelOpt checkpoint, the checks that need the
// whole config: exclude_modules' layers within num_hidden_layers, experts only under NVFP4, no latent attention.
// Throws InputError.
void read_modelopt(const std::string& config_path, DecoderConfig& c);

}  // namespace memplan::hf
