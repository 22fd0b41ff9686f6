#include "cost_models/vllm_fused_moe.h"

#include <algorithm>
#include <string>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

uint64_t VllmFusedMoeBytes::total() const {
  return checked_add(checked_add(checked_add(topk_bytes, align_bytes, "fused MoE bytes"),
                                 checked_add(cache13_bytes, cache2_bytes, "fused MoE bytes"), "fused MoE bytes"),
                     checked_add(output_bytes, padded_input_bytes, "fused MoE bytes"), "fused MoE bytes");
}

VllmFusedMoeBytes vllm_fused_moe_bytes(const VllmFusedMoeShape& s, DType dtype) {
  VllmFusedMoeBytes b;
  const uint64_t d = static_cast<uint64_t>(dtype_bits(dtype)) / 8;
  const uint64_t t = static_cast<uint64_t>(s.tokens), k = static_cast<uint64_t>(s.top_k);
  const uint64_t h = static_cast<uint64_t>(s.hidden), e = static_cast<uint64_t>(s.experts);
  const uint64_t pairs = checked_mul(t, k, "fused MoE bytes");
  // fused_topk: float32 weights, int32 ids, int32 token_expert_indices.
  b.topk_bytes = checked_mul(pairs, 4 + 4 + 4, "fused MoE bytes");
  b.chunk_tokens = std::min(s.tokens, kVllmFusedMoeChunkSize);
  // get_default_config (fused_moe.py at 13cb3e4): BLOCK_SIZE_M 16 when M <= E, else 64, with E = w2.size(0) (the
  // rank's experts: try_get_optimal_moe_config's E, _, N = w2_shape); fp8_w8a8 with a block shape sets it.
  const int64_t rank_experts = s.local_experts > 0 ? s.local_experts : s.experts;
  b.block_size_m = s.block_size_m > 0 ? s.block_size_m : b.chunk_tokens <= rank_experts ? 16 : 64;
  const uint64_t block = static_cast<uint64_t>(b.block_size_m);
  const uint64_t padded = checked_add(pairs, checked_mul(e, block - 1, "fused MoE bytes"), "fused MoE bytes");
  const uint64_t m_blocks = (padded + block - 1) / block;
  b.align_bytes = checked_mul(checked_add(checked_add(padded, m_blocks, "fused MoE bytes"), 1, "fused MoE bytes"), 4,
                              "fused MoE bytes");
  const uint64_t m = static_cast<uint64_t>(b.chunk_tokens);
  const uint64_t n = 2 * static_cast<uint64_t>(s.intermediate_per_rank);
  const uint64_t mk = checked_mul(m, k, "fused MoE bytes");
  b.cache13_bytes = checked_mul(checked_mul(mk, std::max(n, h), "fused MoE bytes"), d, "fused MoE bytes");
  b.cache2_bytes = checked_mul(checked_mul(mk, n / 2, "fused MoE bytes"), d, "fused MoE bytes");
  b.output_bytes = checked_mul(checked_mul(t, h, "fused MoE bytes"), d, "fused MoE bytes");
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
