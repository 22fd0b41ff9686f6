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

VllmMlaChoice vllm_mla_choice(int64_t requested, bool given, const std::string& kv_cache_dtype, int capability,
                              const VllmRule& rule, bool flashinfer_importable, const VllmMlaShape& shape) {
  VllmMlaChoice c;
  const bool fp8_kv = kv_cache_dtype != "auto";
  const std::string block_text = "--block-size " + std::to_string(requested);
  const std::string kv_text = "--kv-cache-dtype " + kv_cache_dtype;
  const auto add_workspace = [&c](const char* whose) {
    c.module_workspace_bytes += kVllmMlaModuleWorkspace;
    c.module_workspace += (c.module_workspace.empty() ? "" : " and ") + std::string(whose);
  };
  if (vllm_sm100(capability, rule)) {
    const int64_t head = shape.kv_lora_rank + shape.qk_rope_head_dim;
    const bool nope_ok = shape.qk_nope_head_dim == 128 || (rule.flashinfer_mla_shapes_018 && shape.qk_nope_head_dim == 64);
    const bool head_ok = head == 576 || (rule.flashinfer_mla_shapes_018 && head == 320);
    if (rule.flashinfer_mla_blackwell && !rule.mla_preferred_block && shape.qk_nope_head_dim == 128) {
      // 0.15 and 0.16: FlashInfer MLA preselected, validated alone (no fallback).
      c.backend = "FLASHINFER_MLA";
      c.block_size = requested == 32 || requested % 64 == 0 ? requested : 64;
      if (!flashinfer_importable) {
        c.refused = "--flashinfer no: FlashInfer MLA, which check_and_update_config selects there, does not import "
                    "without FlashInfer";
        return c;
      }
      add_workspace("flashinfer_mla.py g_fi_workspace");
      if (!head_ok)
        c.refused = "FlashInfer MLA, which check_and_update_config selects there, takes a latent and rope key of 576 "
                    "(this model's: " + std::to_string(head) + ")";
      else if (kv_cache_dtype == "fp8_e5m2")
        c.refused = kv_text + ": FlashInfer MLA, which check_and_update_config selects there, takes fp8 and fp8_e4m3 "
                    "caches only";
      return c;
    }
    add_workspace("cutlass_mla.py g_sm100_workspace");
    if (rule.mla_preferred_block && flashinfer_importable) add_workspace("flashinfer_mla.py g_fi_workspace");
    const bool flashinfer = rule.flashinfer_mla_blackwell && rule.mla_preferred_block && flashinfer_importable &&
                            nope_ok && head_ok;
    const bool e5m2 = kv_cache_dtype == "fp8_e5m2";
    if (flashinfer && (!given || requested % 32 == 0 || e5m2)) {
      c.backend = "FLASHINFER_MLA";
      c.block_size = given ? requested : 32;
      if (e5m2)
        c.refused = kv_text + ": FlashInfer MLA takes fp8 and fp8_e4m3 only, and which backend vLLM falls to is "
                    "not read";
      return c;
    }
    if (flashinfer || (rule.mla_preferred_block && given && requested % 128 != 0)) {
      // A given block neither FlashInfer MLA (32, 64) nor CUTLASS MLA (128) takes: Triton MLA's multiples of 16.
      c.backend = "TRITON_MLA";
      c.block_size = requested;
      if (requested % 16 != 0) c.refused = block_text + ": no MLA backend takes it (multiples of 16 from 0.17.1)";
      return c;
    }
    c.backend = "CUTLASS_MLA";
    c.block_size = forced_block(requested, 128, rule);
    return c;
  }
  if (rule.mla_backend_priorities && flashinfer_importable) add_workspace("flashinfer_mla.py g_fi_workspace");
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
        c.refused = block_text + " with " + kv_text + ": FlashMLA takes multiples of 64 and " +
                    (rule.triton_mla_fp8 ? "Triton MLA multiples of 16" : "Triton MLA no fp8 cache before 0.17.2");
    }
    return c;
  }
  c.backend = "TRITON_MLA";
  c.block_size = requested;
  if (fp8_kv && !rule.triton_mla_fp8)
    c.refused = kv_text + " below compute capability 9.0: vLLM runs Triton MLA there, which takes an fp8 cache from "
                "0.17.2 (PR #34597; TritonMLAImpl refuses it before)";
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
