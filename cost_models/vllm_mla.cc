#include "cost_models/vllm_mla.h"

#include <algorithm>

#include "onnx_import/checked.h"

namespace memplan {

uint64_t vllm_mla_kv_bytes_per_token(const VllmMlaShape& s, uint64_t element_bytes) {
  return checked_mul(checked_mul(static_cast<uint64_t>(s.layers),
                                 static_cast<uint64_t>(s.kv_lora_rank + s.qk_rope_head_dim), "MLA KV bytes"),
                     element_bytes, "MLA KV bytes");
}

namespace {

// A block forced to the backend's own (check_and_update_config to 0.16): multiples kept from 0.12, `!= block` at 0.11.
int64_t forced_block(int64_t requested, int64_t block, const VllmRule& rule) {
  const bool kept = rule.mla_block_multiples ? requested % block == 0 : requested == block;
  return kept ? requested : block;
}

}  // namespace

VllmMlaChoice vllm_mla_choice(int64_t requested, bool given, bool fp8_kv, int capability, const VllmRule& rule,
                              bool flashinfer_importable) {
  VllmMlaChoice c;
  const std::string block_text = "--block-size " + std::to_string(requested);
  if (vllm_sm100(capability, rule)) {
    c.backend = "CUTLASS_MLA";
    c.block_size = forced_block(requested, 128, rule);
    c.module_workspace_bytes = kVllmMlaModuleWorkspace;
    c.module_workspace = "cutlass_mla.py g_sm100_workspace";
    return c;
  }
  if (rule.mla_backend_priorities && flashinfer_importable) {
    c.module_workspace_bytes = kVllmMlaModuleWorkspace;
    c.module_workspace = "flashinfer_mla.py g_fi_workspace";
  }
  if (capability / 10 == 9) {
    const bool flash_attn = rule.mla_backend_priorities && !fp8_kv;
    if (!rule.mla_preferred_block) {
      c.backend = flash_attn ? "FLASH_ATTN_MLA" : "FLASHMLA";
      c.block_size = forced_block(requested, 64, rule);
    } else if (flash_attn || (given && requested % 64 != 0 && requested % 16 == 0 && rule.triton_mla_fp8)) {
      c.backend = flash_attn ? "FLASH_ATTN_MLA" : "TRITON_MLA";
      c.block_size = requested;
      if (requested % 16 != 0) c.refused = block_text + ": no MLA backend takes it (multiples of 16 from 0.17.1)";
    } else {
      c.backend = "FLASHMLA";
      c.block_size = given ? requested : 64;
      if (requested % 64 != 0 && given)
        c.refused = block_text + " with an fp8 KV cache: FlashMLA takes multiples of 64 and " +
                    (rule.triton_mla_fp8 ? "Triton MLA multiples of 16" : "Triton MLA no fp8 cache before 0.17.2");
    }
    return c;
  }
  c.backend = "TRITON_MLA";
  c.block_size = requested;
  if (fp8_kv && !rule.triton_mla_fp8)
    c.refused = "an fp8 KV cache below compute capability 9.0: vLLM runs Triton MLA there, which takes an fp8 cache "
                "from 0.17.2 (PR #34597; TritonMLAImpl refuses it before)";
  else if (rule.mla_preferred_block && requested % 16 != 0)
    c.refused = block_text + ": Triton MLA takes multiples of 16 from 0.17.1 (PR #36292)";
  return c;
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
