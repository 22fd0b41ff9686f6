#include "cost_models/trtllm_engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

// Python's float // float (Objects/floatobject.c float_floor_div, via fmod), which floor(a / b) can miss by one.
double python_floor_div(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return 0;
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

}  // namespace

int64_t trtllm_kv_heads_per_rank(int64_t kv_heads, int64_t tp, const std::string& model) {
  if (tp <= 1) return kv_heads;
  if (kv_heads >= tp && kv_heads % tp != 0)
    throw InputError("--tp " + std::to_string(tp) + " does not divide the " + std::to_string(kv_heads) +
                     " KV heads of " + model + ": TensorRT-LLM's weight loading asserts it (_torch/models/"
                     "modeling_utils.py duplicate_kv_weight: num_kv_heads % tensor_parallel_size == 0)");
  if (kv_heads < tp && tp % kv_heads != 0)
    throw InputError("--tp " + std::to_string(tp) + " is not a multiple of the " + std::to_string(kv_heads) +
                     " KV heads of " + model + ": TensorRT-LLM's weight loading asserts it (_torch/models/"
                     "modeling_utils.py duplicate_kv_weight: tensor_parallel_size % num_kv_heads == 0)");
  return (kv_heads + tp - 1) / tp;
}

uint64_t trtllm_estimate_kv_per_token(int64_t layers, int64_t head_dim, int64_t kv_heads, int64_t tp, bool fp8_cache) {
  if (layers <= 0 || head_dim <= 0 || kv_heads <= 0 || tp <= 0)
    throw std::logic_error("trtllm_estimate_kv_per_token: layers, head_dim, KV heads and tp must be positive");
  const uint64_t head = checked_mul(static_cast<uint64_t>(head_dim), static_cast<uint64_t>(kv_heads), "KV bytes") /
                        static_cast<uint64_t>(tp);
  // max(len(pp_layers), 1) layers: one pipeline stage here.
  return checked_mul(checked_mul(fp8_cache ? 1u : 2u, static_cast<uint64_t>(layers), "KV bytes"), head * 2, "KV bytes");
}

void trtllm_quantization_check(const std::string& method, int64_t block_n, int64_t block_k, int capability,
                               int64_t kv_heads, int64_t tp, const std::string& model, bool modelopt,
                               bool modelopt_file) {
  if (method.empty()) return;
  const std::string who = "serve --engine trtllm: " + model;
  if (modelopt && !modelopt_file)
    throw InputError(who + "'s quantization_config is ModelOpt's config.json form (quant_method modelopt) with no "
                     "hf_quant_config.json beside it: TensorRT-LLM 1.0 reads ModelOpt's settings from that file only "
                     "and raises NotImplementedError(\"Unsupported quantization_config\") for this one "
                     "(llmapi/llm_utils.py ModelLoader._update_from_hf_quant_config)");
  if (modelopt && capability < 89)
    throw InputError(who + " (ModelOpt FP8): FP8QDQLinearMethod's fp8 GEMMs need compute capability 8.9, not " +
                     std::to_string(capability / 10) + "." + std::to_string(capability % 10));
  if (modelopt) return;
  if (method == "mxfp4")
    throw InputError(who + " is quantized (mxfp4): TensorRT-LLM's MXFP4 experts are not modelled (serve --engine "
                     "vllm models vLLM's, --engine sglang SGLang's)");
  if (method != "fp8" || block_n <= 0)
    throw InputError(who + " is quantized (" + method + (method == "fp8" ? " per tensor, no weight_block_size" : "") +
                     "): TensorRT-LLM 1.0's PyTorch backend raises NotImplementedError(\"Unsupported "
                     "quantization_config\") for it (llmapi/llm_utils.py ModelLoader._update_from_hf_quant_config "
                     "takes fp8 with weight_block_size and mxfp4 from a config.json; a ModelOpt FP8 checkpoint's "
                     "hf_quant_config.json beside the config is read)");
  if (block_n != 128 || block_k != 128)
    throw InputError(who + "'s weight_block_size is [" + std::to_string(block_n) + ", " + std::to_string(block_k) +
                     "]: TensorRT-LLM's FP8BlockScalesLinearMethod holds 128 x 128 blocks only (create_weights: "
                     "weight_scale [ceil(out / 128), ceil(in / 128)])");
  if (tp > 1 && kv_heads > 0 && kv_heads < tp)
    throw InputError(who + ": --tp " + std::to_string(tp) + " exceeds its " + std::to_string(kv_heads) +
                     " KV heads, and TensorRT-LLM 1.0 repeats k_proj's and v_proj's weight but not their block "
                     "scales (_torch/models/modeling_utils.py _load_weights_impl: duplicate_kv_weight on \"weight\" "
                     "and \"bias\" only)");
  if (capability != 90)
    throw InputError(who + " (block-wise fp8): TensorRT-LLM's block-fp8 GEMM on compute capability " +
                     std::to_string(capability / 10) + "." + std::to_string(capability % 10) +
                     " is not modelled (memplan follows 9.0's fp8_quantize_1x128 and fp8_block_scaling_gemm)");
}

uint64_t trtllm_fp8_block_scalar_bytes(int64_t modules) {
  return checked_mul(static_cast<uint64_t>(std::max<int64_t>(modules, 0)), 2 * sizeof(float), "scale bytes");
}

// weight_scale, input_scale, inv_input_scale (4 B each) and kv_scales, inv_kv_scales (3 x 4 B each).
uint64_t trtllm_fp8_qdq_scalar_bytes(int64_t modules) {
  return checked_mul(static_cast<uint64_t>(std::max<int64_t>(modules, 0)), 9 * sizeof(float), "scale bytes");
}

TrtllmKvCache trtllm_kv_cache(uint64_t total, uint64_t weights, uint64_t activation_peak, uint64_t non_torch,
                              double free_gpu_memory_fraction, bool fraction_given, uint64_t estimate_kv_per_token,
                              uint64_t kv_per_token, int64_t tokens_per_block) {
  if (estimate_kv_per_token == 0 || kv_per_token == 0 || tokens_per_block <= 0)
    throw std::logic_error("trtllm_kv_cache: a token's bytes and the block's tokens must be positive");
  TrtllmKvCache c;
  c.peak_memory = checked_add(checked_add(weights, activation_peak, "peak bytes"), non_torch, "peak bytes");
  // (total_gpu_memory - peak_memory + tmp kv) x fraction: the temporary cache is in the peak and added back, so it
  // cancels; Python computes it in floats (ints times a float), as here.
  c.available_bytes =
      (static_cast<double>(total) - static_cast<double>(c.peak_memory)) * free_gpu_memory_fraction;
  c.estimate_kv_per_token = estimate_kv_per_token;
  // int(available_kv_mem // kv_size_per_token), then max(max_tokens, 0).
  const double tokens = python_floor_div(c.available_bytes, static_cast<double>(estimate_kv_per_token));
  c.max_tokens = tokens > 0 ? static_cast<int64_t>(tokens) : 0;
  const uint64_t held = checked_add(weights, non_torch, "held bytes");
  c.free_after = total > held ? total - held : 0;
  // free_mem_fraction x free_mem / cache_size_bytes_per_token, taken with the estimate only when the fraction is set.
  double final_tokens = static_cast<double>(c.max_tokens);
  if (fraction_given) {
    c.cap_tokens = free_gpu_memory_fraction * static_cast<double>(c.free_after) / static_cast<double>(kv_per_token);
    final_tokens = std::min(final_tokens, c.cap_tokens);
  }
  // math.ceil(max_tokens / tokens_per_block) (calculate_max_num_blocks at d2a5560): a part block is a whole one.
  c.blocks = static_cast<int64_t>(std::ceil(final_tokens / static_cast<double>(tokens_per_block)));
  c.tokens = c.blocks * tokens_per_block;
  c.pool_bytes = checked_mul(static_cast<uint64_t>(c.tokens), kv_per_token, "KV pool bytes");
  c.pool_fits = c.pool_bytes <= c.free_after;
  c.starts = c.blocks > 0 && c.pool_fits;
  return c;
}

}  // namespace memplan
