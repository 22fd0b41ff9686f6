// Serving's memory model: the KV cache paged in blocks, and the budget rule the engine sizes it by. vLLM's
// (vllm/worker/worker.py determine_num_available_blocks; vllm/v1/worker/gpu_worker.py determine_available_memory;
// vllm/v1/core/kv_cache_utils.py): the weights and the activation peak of the largest step come first; what is
// left of the budget holds the KV cache in blocks of `block_size` tokens, each sequence taking
// ceil(tokens / block size) blocks of
//   block_bytes = block_size x kv_bytes_per_token
// (CacheEngine.get_cache_block_size: block_size x num_kv_heads x head_size x 2 x num_layers x dtype size).
// The step is the larger of the profiled prefill (one batch of max_num_batched_tokens new tokens) and the decode
// step of the sequences served; a budget serves them when
//   sequences x blocks_per_sequence x block_bytes + step_required <= budget.
// report/serve.cc searches the largest such count and context; the steps are memplan's own estimates with the
// cache's tensors held outside the step (InferenceOptions::held_outside: they live in the blocks).
#pragma once

#include <algorithm>
#include <cstdint>

#include "onnx_import/checked.h"

namespace memplan {

// vLLM's default --block-size (vllm/config.py CacheConfig: block_size 16 on CUDA).
inline constexpr int64_t kDefaultBlockSize = 16;

struct PagedKvCache {
  int64_t block_size = kDefaultBlockSize;  // tokens per block
  uint64_t bytes_per_token = 0;            // of every layer's keys and values, in the cache's storage type

  uint64_t block_bytes() const {
    return checked_mul(static_cast<uint64_t>(block_size), bytes_per_token, "KV block bytes");
  }
  // A sequence of `tokens` takes whole blocks.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size - 1) / block_size; }
  // The cache of `sequences` sequences of `tokens` tokens each.
  uint64_t bytes_for(int64_t sequences, int64_t tokens) const {
    const uint64_t per_sequence = checked_mul(static_cast<uint64_t>(blocks_for(tokens)), block_bytes(), "KV bytes");
    return checked_mul(static_cast<uint64_t>(sequences), per_sequence, "KV bytes");
  }
};

// What serving `sequences` sequences of `tokens` tokens needs: their blocks plus the larger of the profiled prefill
// step and their decode step (each step's required bytes, weights included).
inline uint64_t serving_required_bytes(const PagedKvCache& cache, int64_t sequences, int64_t tokens,
                                       uint64_t prefill_required, uint64_t decode_required) {
  return checked_add(cache.bytes_for(sequences, tokens), std::max(prefill_required, decode_required), "KV bytes");
}

}  // namespace memplan
