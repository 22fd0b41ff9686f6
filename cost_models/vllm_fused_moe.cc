#include "cost_models/vllm_fused_moe.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

uint64_t VllmFusedMoeBytes::total() const {
  return checked_add(checked_add(checked_add(topk_bytes, align_bytes, "fused MoE bytes"),
                                 checked_add(cache13_bytes, cache2_bytes, "fused MoE bytes"), "fused MoE bytes"),
                     checked_add(checked_add(output_bytes, padded_input_bytes, "fused MoE bytes"),
                                 checked_add(reduce_bytes, lock_bytes, "fused MoE bytes"), "fused MoE bytes"),
                     "fused MoE bytes");
}

int64_t vllm_triton_moe_block_size(int64_t tokens, int64_t rank_experts, bool fp8_blocks, bool by_batch) {
  // get_default_config (fused_moe.py at 13cb3e4 and v0.16.0; v0.17.1rc0 for by_batch): E is w2.size(0), the rank's
  // experts (try_get_optimal_moe_config's E, _, N = w2_shape).
  if (fp8_blocks) return by_batch && tokens <= 64 ? 16 : 64;
  if (!by_batch) return tokens <= rank_experts ? 16 : 64;
  return tokens <= 32 ? 16 : tokens <= 96 ? 32 : tokens <= 512 ? 64 : 128;
}

uint64_t vllm_moe_align_sorted_ids(int64_t tokens, int64_t top_k, int64_t experts, int64_t block) {
  return checked_add(checked_mul(static_cast<uint64_t>(tokens), static_cast<uint64_t>(top_k), "fused MoE bytes"),
                     checked_mul(static_cast<uint64_t>(experts), static_cast<uint64_t>(block) - 1, "fused MoE bytes"),
                     "fused MoE bytes");
}

VllmFusedMoeBytes vllm_fused_moe_bytes(const VllmFusedMoeShape& s, DType dtype) {
  VllmFusedMoeBytes b;
  const uint64_t d = static_cast<uint64_t>(dtype_bits(dtype)) / 8;
  const uint64_t t = static_cast<uint64_t>(s.tokens), k = static_cast<uint64_t>(s.top_k);
  const uint64_t h = static_cast<uint64_t>(s.hidden);
  const uint64_t pairs = checked_mul(t, k, "fused MoE bytes");
  // fused_topk: float32 weights, int32 ids, int32 token_expert_indices.
  b.topk_bytes = checked_mul(pairs, 4 + 4 + 4, "fused MoE bytes");
  b.chunk_tokens = s.chunked && !s.modular ? std::min(s.tokens, s.chunk_size) : s.tokens;
  // get_default_config's (vllm_triton_moe_block_size) unless the caller set it.
  const int64_t rank_experts = s.local_experts > 0 ? s.local_experts : s.experts;
  b.block_size_m = s.block_size_m > 0 ? s.block_size_m
                                      : vllm_triton_moe_block_size(b.chunk_tokens, rank_experts, s.fp8_blocks,
                                                                   s.block_by_batch);
  const uint64_t block = static_cast<uint64_t>(b.block_size_m);
  const uint64_t padded = vllm_moe_align_sorted_ids(s.tokens, s.top_k, s.experts, b.block_size_m);
  const uint64_t m_blocks = (padded + block - 1) / block;
  // sorted_ids, expert_ids (and its expert_map gather), num_tokens_post_pad.
  const uint64_t ids = checked_add(padded, m_blocks * (s.remaps_expert_ids ? 2 : 1), "fused MoE bytes");
  b.align_bytes = checked_mul(checked_add(ids, 1, "fused MoE bytes"), 4, "fused MoE bytes");
  const uint64_t m = static_cast<uint64_t>(b.chunk_tokens);
  const uint64_t n = 2 * static_cast<uint64_t>(s.intermediate_per_rank);
  const uint64_t mk = checked_mul(m, k, "fused MoE bytes");
  b.output_bytes = checked_mul(checked_mul(t, h, "fused MoE bytes"), d, "fused MoE bytes");
  if (s.modular) {
    b.workspace_bytes = vllm_modular_moe_workspace_bytes(b.chunk_tokens, s.top_k, s.hidden, s.intermediate_per_rank,
                                                         dtype);
    return b;
  }
  b.cache13_bytes = checked_mul(checked_mul(mk, std::max(n, h), "fused MoE bytes"), d, "fused MoE bytes");
  b.cache2_bytes = checked_mul(checked_mul(mk, n / 2, "fused MoE bytes"), d, "fused MoE bytes");
  return b;
}

uint64_t vllm_modular_moe_workspace_bytes(int64_t tokens, int64_t top_k, int64_t hidden, int64_t width, DType d) {
  const uint64_t mk = checked_mul(static_cast<uint64_t>(tokens), static_cast<uint64_t>(top_k), "fused MoE bytes");
  const uint64_t e = static_cast<uint64_t>(dtype_bits(d)) / 8, h = static_cast<uint64_t>(hidden);
  const uint64_t i = static_cast<uint64_t>(width);
  // workspace13 (M·k·max(I, H), the output (M, H) beside it in the same request) and workspace2 (M·k·max(2I, H)).
  const uint64_t ws13 = checked_mul(checked_mul(mk, std::max(i, h), "fused MoE bytes"), e, "fused MoE bytes");
  const uint64_t ws2 = checked_mul(checked_mul(mk, std::max(2 * i, h), "fused MoE bytes"), e, "fused MoE bytes");
  return checked_add(round_up(ws13, 256), round_up(ws2, 256), "fused MoE bytes");  // get_simultaneous's alignment
}

int64_t vllm_marlin_moe_block_size(int64_t tokens, int64_t top_k, int64_t experts) {
  // fused_marlin_moe: `for block_size_m in [8, 16, 32, 48, 64]: if M * topk / E / block_size_m < 0.9: break`.
  for (int64_t block : {8, 16, 32, 48, 64})
    if (static_cast<double>(tokens) * static_cast<double>(top_k) / static_cast<double>(experts) /
            static_cast<double>(block) < 0.9)
      return block;
  return 64;
}

VllmFusedMoeBytes vllm_marlin_moe_bytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t width,
                                        bool reduces, int multiprocessors, DType d, bool modular) {
  VllmFusedMoeShape shape;
  shape.tokens = tokens;
  shape.hidden = hidden;
  shape.experts = experts;
  shape.top_k = top_k;
  shape.intermediate_per_rank = width;
  shape.block_size_m = vllm_marlin_moe_block_size(tokens, top_k, experts);
  shape.chunked = false;
  shape.modular = modular;  // MarlinExperts' workspace_shapes are TritonExperts' (above)
  VllmFusedMoeBytes b = vllm_fused_moe_bytes(shape, d);
  if ((reduces || modular) && multiprocessors <= 0)
    throw std::logic_error("vllm_marlin_moe_bytes: c_tmp's cap and the lock workspace need the multiprocessors");
  if (modular) b.lock_bytes = checked_mul(static_cast<uint64_t>(multiprocessors), 4 * sizeof(int32_t), "fused MoE bytes");
  if (!reduces) return b;  // atomic add: no c_tmp
  constexpr uint64_t kMaxThreadN = 256;  // marlin.cuh max_thread_n
  const uint64_t block = static_cast<uint64_t>(b.block_size_m);
  const uint64_t sorted = vllm_moe_align_sorted_ids(tokens, top_k, experts, b.block_size_m);
  const uint64_t cap = checked_mul(static_cast<uint64_t>(multiprocessors) * 4, block * kMaxThreadN,
                                   "fused MoE bytes");
  const uint64_t widest = std::max(2 * static_cast<uint64_t>(width), static_cast<uint64_t>(hidden));
  const uint64_t elements = std::min(checked_mul(widest, sorted, "fused MoE bytes"), cap) * (block == 8 ? 2 : 1);
  b.reduce_bytes = checked_mul(elements, sizeof(float), "fused MoE bytes");
  return b;
}

int64_t vllm_moe_intermediate_per_rank(int64_t intermediate, int tp, const std::string& model) {
  if (tp <= 0 || intermediate % tp != 0)
    throw InputError("--tp " + std::to_string(tp) + ": " + model + "'s experts are " + std::to_string(intermediate) +
                     " wide, which vLLM's FusedMoE splits evenly across the tensor-parallel ranks (intermediate_size "
                     "% tp_size == 0) and " + std::to_string(tp) + " does not divide");
  return intermediate / tp;
}

}  // namespace memplan
