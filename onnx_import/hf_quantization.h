// Reads a config.json's quantization_config, what memplan sizes for serve --engine vllm. Internal to onnx_import.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "onnx_import/hf_config.h"

namespace memplan::hf {

// quantization_config as vLLM's QuantizationConfig.from_config reads it (vllm/model_executor/layers/quantization:
// fp8.py Fp8Config.from_config at 1436674: quant_method, activation_scheme, ignored_layers / modules_to_not_convert,
// weight_block_size; gptq.py GPTQConfig.from_config at e5dd90b: bits, group_size, desc_act, lm_head; awq.py
// AWQConfig.from_config: w_bit or bits, q_group_size or group_size). Other keys are the quantizer's own
// bookkeeping (damp_percent, sym, true_sequential, ...), which vLLM does not read either. What would change the
// layout memplan sizes is refused: layers left unquantized (a list naming only lm_head, which vLLM never quantizes,
// is read as none), a quantized head. weight_block_size is read as vLLM's block-wise fp8 (cost_models/
// vllm_fp8_block.h).
StoredQuantization parse_quantization(const std::string& path, const nlohmann::json& q);

// How vLLM builds this model_type's MoE router, StoredQuantization::moe_router: "unquantized", "quantized", or ""
// (not read).
std::string vllm_moe_router(const std::string& model_type);

}  // namespace memplan::hf
