// TensorRT-LLM's PyTorch backend (the default of trtllm-serve and the LLM API from 1.0): how it sizes its paged KV
// cache at start-up, each rule from the TensorRT-LLM source it follows (NVIDIA/TensorRT-LLM, 1.0 series,
// tensorrt_llm/version.py 1.0.0rc4):
//
//   A profiling run (tensorrt_llm/_torch/pyexecutor/_util.py, KvCacheCreator.configure_kv_cache_capacity): dummy
//   context requests of max_num_tokens tokens in all, over a small temporary KV cache, then
//     peak_memory = torch allocated_bytes.all.peak (the weights, the forward's activations, the temporary cache)
//                 + every byte on the GPU outside PyTorch's allocator (extra_cost: CUDA context, NCCL, ...)
//   and (KvCacheCreator._cal_max_tokens; _cal_max_memory later)
//     available_kv_mem = (total_gpu_memory - peak_memory + the temporary cache's bytes) x free_gpu_memory_fraction
//     max_tokens       = int(available_kv_mem // kv_size_per_token)
//   The cache manager then takes blocks_in_primary_pool = math.ceil(max_tokens / tokens_per_block)
//   (_torch/pyexecutor/resource_manager.py, KVCacheManager.calculate_max_num_blocks, with kv_cache_config.max_tokens
//   set to the estimate: trtllm_kv_cache below). Logged: "Peak memory during memory usage profiling (torch + non-torch): X GiB, available KV cache memory
//   when calculating max tokens: Y GiB, fraction is set F, kv size is K" and "Estimated max tokens in KV cache : N".
//
// The TensorRT engine flow (a built engine run by the C++ executor) sizes the cache as the same fraction of the free
// memory after the engine's weights and its activation buffers (KvCacheConfig's free_gpu_memory_fraction in
// cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp); its engine's buffers are the builder's, not sized here.
#pragma once

#include <cstdint>
#include <string>

namespace memplan {

// tensorrt_llm/llmapi/llm_args.py KvCacheConfig: free_gpu_memory_fraction None means 0.9 (_util.py
// get_fraction_from_executor_config: "if fraction is None: fraction = 0.9"; later releases default the field to
// 0.9); tokens_per_block 32. BuildConfig / llm_args max_num_tokens 8192: the profiling run's tokens.
inline constexpr double kTrtllmDefaultFreeGpuMemoryFraction = 0.9;
inline constexpr int64_t kTrtllmDefaultTokensPerBlock = 32;
inline constexpr int64_t kTrtllmDefaultMaxNumTokens = 8192;

// One rank's KV heads (tensorrt_llm/_torch/modules/attention.py Attention.__init__: (num_key_value_heads + tp - 1)
// // tp, as _torch/pyexecutor/resource_manager.py KVCacheManager.__init__ num_kv_heads_per_layer), where the
// checkpoint loads: _torch/models/modeling_utils.py duplicate_kv_weight (called on k_proj and v_proj by
// _load_weights_impl) asserts num_kv_heads % tp == 0 where the heads are at least tp, else tp % num_kv_heads == 0,
// repeating each head tp / num_kv_heads times. Where it asserts, throws InputError naming it. (NVIDIA/TensorRT-LLM,
// the 1.0 series: modeling_utils.py and attention.py as indexed, resource_manager.py at d2a5560.)
int64_t trtllm_kv_heads_per_rank(int64_t kv_heads, int64_t tp, const std::string& model);

// KvCacheCreator._get_cache_size_per_token (_torch/pyexecutor/_util.py at d8ae02c), what the estimate divides by:
// mem_per_token = 1 with an fp8 KV cache (quant_config.quant_mode.has_fp8_kv_cache()), else 2 whatever the model's
// type; head_dim = head_dim x num_key_value_heads // tp (a fraction of a head a rank where tp exceeds the heads:
// 16 x 1 // 2 = 8); x layers x 2 (K and V). `fp8_cache`: the cache's elements are one byte.
uint64_t trtllm_estimate_kv_per_token(int64_t layers, int64_t head_dim, int64_t kv_heads, int64_t tp, bool fp8_cache);

// Quantized checkpoints under TensorRT-LLM 1.0's PyTorch backend (NVIDIA/TensorRT-LLM, 1.0 series as indexed):
//  - llmapi/llm_utils.py ModelLoader._update_from_hf_quant_config (the 1.0-era copy, index id 781189894): ModelOpt's
//    hf_quant_config.json beside the config, when there, is read first: its quantization.quant_algo becomes
//    quant_config.quant_algo (QuantAlgo("FP8"): FP8QDQLinearMethod below), kv_cache_quant_algo FP8 the fp8 KV cache
//    (has_fp8_kv_cache: 1 B an element, in _get_cache_size_per_token and the pool), exclude_modules the modules left
//    unquantized (onnx_import/hf_modelopt.h maps lm_head and whole o_proj / down_proj modules). Without it, a
//    config.json quantization_config is taken only as quant_method "fp8" with weight_block_size
//    (QuantAlgo.FP8_BLOCK_SCALES, exclude_modules ["*eh_proj"]) or "mxfp4"; any other, ModelOpt's config.json form
//    "modelopt" among them, raises NotImplementedError("Unsupported quantization_config: ...").
//  - _torch/modules/linear.py FP8QDQLinearMethod (ModelOpt FP8; the stored copy at ed53795, index id 421325918):
//    create_weights makes weight float8_e4m3fn [out, in], weight_scale, input_scale and inv_input_scale float32
//    scalars, kv_scales and inv_kv_scales float32 [3] ("K, V scales for NVFP4 KV cache"): 36 B a module beside the
//    fp8 weight, every one kept when the checkpoint holds input scales (load_weights_fused_qkv_linear and
//    _fused_gate_up_linear take the shards' max input_scale and weight_scale and requantize the shards to it); the
//    same fused modules as vLLM's (qkv_proj, gate_up_proj, o_proj, down_proj), whose fp8 weights are vLLM's bytes.
//    Its GEMMs (cublas_scaled_mm, cuda_scaled_mm) are fp8 tensor-core kernels: compute capability 8.9 and up.
//  - _torch/modules/linear.py FP8BlockScalesLinearMethod.create_weights: weight float8_e4m3fn [out, in], weight_scale
//    float32 [ceil(out / 128), ceil(in / 128)] (128 fixed, whatever the checkpoint's block), and two float32 scalars,
//    input_scale and inv_input_scale ("only used to quantize output of FP8 attention"): 8 B a module more than vLLM's
//    Fp8LinearMethod grid (cost_models/vllm_fp8_block.h), the same fused modules (qkv_proj, gate_up_proj), the same
//    grid over the fused outputs. The LM head takes no quant config (_torch/models/modeling_utils.py
//    DecoderModelForCausalLM: "lm_head Linear will not accept QuantConfig"), nor do the embedding and the norms.
//  - _load_weights_impl (modeling_utils.py) duplicates k_proj's and v_proj's "weight" and "bias" where tp exceeds
//    the KV heads, not their weight_scale: a replicated head's block scales are not loaded, refused here.
//  - FP8BlockScalesLinearMethod.apply on compute capability 9.0: fp8_quantize_1x128 of the input, then
//    fp8_block_scaling_gemm; other capabilities run other kernels (DeepGEMM's on 10.x), not modelled.
// Throws InputError naming the model where TensorRT-LLM refuses the checkpoint or memplan does not model it.
// `method`, `block_n`, `block_k`: the config's quantization_config ("" none); `kv_heads`, `tp`: the KV heads and ranks.
// `modelopt`: a ModelOpt FP8 checkpoint (onnx_import/hf_modelopt.h), `modelopt_file` read from hf_quant_config.json
// (what TensorRT-LLM reads; the config.json form alone is refused, as TensorRT-LLM 1.0 refuses it).
void trtllm_quantization_check(const std::string& method, int64_t block_n, int64_t block_k, int capability,
                               int64_t kv_heads, int64_t tp, const std::string& model, bool modelopt = false,
                               bool modelopt_file = false);
// The float32 input_scale and inv_input_scale of `modules` FP8BlockScalesLinearMethod modules.
uint64_t trtllm_fp8_block_scalar_bytes(int64_t modules);
// The float32 scalars and vectors of `modules` FP8QDQLinearMethod modules: 36 B each.
uint64_t trtllm_fp8_qdq_scalar_bytes(int64_t modules);

struct TrtllmKvCache {
  uint64_t peak_memory = 0;     // weights + activation peak + non-torch
  double available_bytes = 0;   // (total - peak) x fraction; <= 0: no cache
  uint64_t estimate_kv_per_token = 0;  // _get_cache_size_per_token's bytes
  int64_t max_tokens = 0;       // "Estimated max tokens in KV cache": available // estimate_kv_per_token
  uint64_t free_after = 0;      // total - weights - non-torch: free when the final pool is built
  double cap_tokens = -1;       // fraction x free_after / the real bytes a token (fraction given); -1: not taken
  int64_t blocks = 0;           // blocks_in_primary_pool
  int64_t tokens = 0;           // blocks x tokens_per_block: what the pool holds
  uint64_t pool_bytes = 0;      // tokens x the real bytes a token
  bool pool_fits = true;        // pool_bytes <= free_after
  bool starts = false;
};
// `total`: the GPU's memory (cudaMemGetInfo's total); `weights` and `activation_peak` (the profiling forward's
// allocated peak above the weights) one rank's; `non_torch`: the memory outside PyTorch's allocator;
// `fraction_given`: KvCacheConfig.free_gpu_memory_fraction set (false: None, which the estimate reads as
// `free_gpu_memory_fraction` 0.9); `estimate_kv_per_token`: trtllm_estimate_kv_per_token's; `kv_per_token`: the
// bytes a token the cache manager holds (KVCacheManager.get_cache_bytes_per_token: kv_factor x the KV heads a rank
// over the layers x head_dim x the cache type's bytes).
//
// The final pool (KVCacheManager.calculate_max_num_blocks, resource_manager.py at d2a5560, with
// kv_cache_config.max_tokens set to the estimate): free_gpu_memory_fraction None takes the estimate as it is; set, the
// smaller of it and fraction x the free memory / kv_per_token, the free memory being what the profiling run's
// executor leaves (its activations emptied from PyTorch's cache, its temporary pool torn down: py_executor_creator.py
// teardown_managers, then build_managers): here the weights and the memory outside PyTorch held, the CUDA graphs the
// profiling executor captured (released only after build_managers) not sized. Where the estimate's bytes are the
// real ones, the estimate is the smaller and nothing of this shows; where they are fewer (tp above the KV heads, a
// float32 model) the pool can outgrow what is free, and allocating it fails (KVCacheManager.__init__ allocate_pools).
TrtllmKvCache trtllm_kv_cache(uint64_t total, uint64_t weights, uint64_t activation_peak, uint64_t non_torch,
                              double free_gpu_memory_fraction, bool fraction_given, uint64_t estimate_kv_per_token,
                              uint64_t kv_per_token, int64_t tokens_per_block);

}  // namespace memplan
