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
//   The cache manager then takes blocks_in_primary_pool = int(max_tokens // tokens_per_block)
//   (_torch/pyexecutor/resource_manager.py, KVCacheManager.calculate_max_num_blocks, with kv_cache_config.max_tokens
//   set to the estimate: the smaller of it and the free memory's fraction, which is larger once the activations are
//   freed). Logged: "Peak memory during memory usage profiling (torch + non-torch): X GiB, available KV cache memory
//   when calculating max tokens: Y GiB, fraction is set F, kv size is K" and "Estimated max tokens in KV cache : N".
//
// The TensorRT engine flow (a built engine run by the C++ executor) sizes the cache as the same fraction of the free
// memory after the engine's weights and its activation buffers (KvCacheConfig's free_gpu_memory_fraction in
// cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp); its engine's buffers are the builder's, not sized here.
#pragma once

#include <cstdint>

namespace memplan {

// tensorrt_llm/llmapi/llm_args.py KvCacheConfig: free_gpu_memory_fraction None means 0.9 (_util.py
// get_fraction_from_executor_config: "if fraction is None: fraction = 0.9"; later releases default the field to
// 0.9); tokens_per_block 32. BuildConfig / llm_args max_num_tokens 8192: the profiling run's tokens.
inline constexpr double kTrtllmDefaultFreeGpuMemoryFraction = 0.9;
inline constexpr int64_t kTrtllmDefaultTokensPerBlock = 32;
inline constexpr int64_t kTrtllmDefaultMaxNumTokens = 8192;

struct TrtllmKvCache {
  uint64_t peak_memory = 0;     // weights + activation peak + non-torch
  double available_bytes = 0;   // (total - peak) x fraction; <= 0: no cache
  int64_t max_tokens = 0;       // "Estimated max tokens in KV cache"
  int64_t blocks = 0;           // blocks_in_primary_pool
  int64_t tokens = 0;           // blocks x tokens_per_block: what the pool holds
  bool starts = false;
};
// `total`: the GPU's memory (cudaMemGetInfo's total); `weights` and `activation_peak` (the profiling forward's
// allocated peak above the weights) one rank's; `non_torch`: the memory outside PyTorch's allocator;
// `kv_per_token`: one token's KV bytes over every layer, one rank's.
TrtllmKvCache trtllm_kv_cache(uint64_t total, uint64_t weights, uint64_t activation_peak, uint64_t non_torch,
                              double free_gpu_memory_fraction, uint64_t kv_per_token, int64_t tokens_per_block);

}  // namespace memplan
