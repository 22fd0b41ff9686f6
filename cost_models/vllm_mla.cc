#include "cost_models/vllm_mla.h"

#include <algorithm>

#include "onnx_import/checked.h"

namespace memplan {

uint64_t vllm_mla_kv_bytes_per_token(const VllmMlaShape& s, uint64_t element_bytes) {
  return checked_mul(checked_mul(static_cast<uint64_t>(s.layers),
                                 static_cast<uint64_t>(s.kv_lora_rank + s.qk_rope_head_dim), "MLA KV bytes"),
                     element_bytes, "MLA KV bytes");
}

std::string vllm_mla_backend(int capability, const VllmRule& rule) {
  if (vllm_sm100(capability, rule)) return "CUTLASS_MLA";
  if (capability / 10 == 9) return "FLASHMLA";
  return "TRITON_MLA";
}

int64_t vllm_mla_block_size(int64_t requested, int capability, const VllmRule& rule) {
  const std::string backend = vllm_mla_backend(capability, rule);
  const int64_t block = backend == "CUTLASS_MLA" ? 128 : backend == "FLASHMLA" ? 64 : 0;
  if (block == 0) return requested;
  const bool kept = rule.mla_block_multiples ? requested % block == 0 : requested == block;
  return kept ? requested : block;
}

int64_t vllm_mla_workspace_tokens(int64_t max_model_len, int64_t max_num_seqs, int64_t block_size) {
  const uint64_t seqs = static_cast<uint64_t>(max_num_seqs), block = static_cast<uint64_t>(block_size);
  const uint64_t per_sequence = checked_mul(checked_mul(4, seqs, "MLA workspace"), block, "MLA workspace");
  const uint64_t full = checked_mul(8, static_cast<uint64_t>(max_model_len), "MLA workspace");
  const uint64_t size = std::min<uint64_t>(std::max(full, per_sequence), uint64_t{64} * 1024);
  return static_cast<int64_t>(std::max(size, checked_mul(seqs, block, "MLA workspace")));
}

VllmMlaProfile vllm_mla_profile(const VllmMlaShape& s, int64_t max_model_len, int64_t max_num_seqs, int64_t block_size,
                                DType served) {
  VllmMlaProfile p;
  p.workspace_tokens = vllm_mla_workspace_tokens(max_model_len, max_num_seqs, block_size);
  const uint64_t d = static_cast<uint64_t>(dtype_bits(served)) / 8, w = static_cast<uint64_t>(p.workspace_tokens);
  p.simulated_bytes = checked_mul(
      checked_mul(w, static_cast<uint64_t>(s.heads_per_rank), "MLA profile bytes"),
      checked_mul(static_cast<uint64_t>(s.qk_nope_head_dim + s.v_head_dim), d, "MLA profile bytes"), "MLA profile bytes");
  p.workspace_bytes = checked_mul(checked_mul(w, static_cast<uint64_t>(s.kv_lora_rank + s.qk_rope_head_dim),
                                              "MLA workspace bytes"), d, "MLA workspace bytes");
  return p;
}

}  // namespace memplan
