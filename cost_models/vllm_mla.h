// vLLM's multi-head latent attention (DeepseekV2ForCausalLM's MLA layers: vllm/model_executor/models/deepseek_v2.py
// at b863fe5, run by the MLA backends of vllm/v1/attention/backends/mla/ through MLAAttention,
// vllm/model_executor/layers/attention/mla_attention.py at 90b0a26): its KV cache, its block size and what its
// profile run allocates, in place of the per-head keys and values of transformers' cache.
//  - The cache (MLAAttention.get_kv_cache_spec; MLAAttentionSpec.real_page_size_bytes, vllm/v1/kv_cache_interface.py
//    at bc8282e): one "head" (num_kv_heads 1) of head_size = kv_lora_rank + qk_rope_head_dim elements a token and
//    layer, the latent and the rope key, in the cache's type (--kv-cache-dtype fp8: one byte), no separate values.
//    The latent is not split by heads: every tensor-parallel rank holds all of it. DeepSeek-V3 in bf16:
//    61 x 576 x 2 = 70,272 B a token.
//  - The block size (CudaPlatformBase.check_and_update_config, vllm/platforms/cuda.py at 1c0d9ec, without
//    VLLM_ATTENTION_BACKEND): compute capability 10.0 runs CUTLASS MLA, the block size raised to 128 unless a
//    multiple of it; other GPUs FlashMLA, which is_flashmla_dense_supported accepts on Hopper only
//    (vllm/attention/ops/flashmla.py: capability major 9), the block size then 64 unless a multiple of 64; below
//    Hopper the backend selector falls to Triton MLA and the block size stays --block-size. The v0.11.0 tag forces
//    the block whenever it is not the backend's own (64 or 128 exactly); from 0.13 the 10.x family runs CUTLASS
//    MLA (VllmRule.mla_block_multiples, sm100_family). Not modelled: FlashInfer MLA, the default on Blackwell for
//    qk_nope_head_dim 128 from PR #32615 (merged 2026-01-19; in the v0.16.0 branch), block 64: refused there from
//    0.15 (report/serve_vllm_mla.cc).
//  - The profile run: with no attention metadata, MLACommonImpl.forward allocates and drops
//    torch.empty((chunked_prefill_workspace_size, num_heads, qk_nope_head_dim + v_head_dim)) in the latent's type,
//    "to simulate the worst case output size of kv_b_proj(kv_c_normed)" of a chunked prefill's context, then
//    returns its output (mla_attention.py at 90b0a26, MLACommonImpl.forward); num_heads is the rank's. Nothing of the
//    decompression of the step's own tokens (kv_b_proj, the keys, the values) runs.
//  - chunked_prefill_workspace_size (MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size at 90b0a26):
//    max(min(max(8 x max_model_len, 4 x max_num_seqs x block_size), 64 x 1024), max_num_seqs x block_size) tokens.
//  - The builder's workspace, torch.empty((that size, kv_lora_rank + qk_rope_head_dim)) in the model's type
//    (MLACommonMetadataBuilder.__init__), is allocated when GPUModelRunner.initialize_kv_cache creates the
//    metadata builders, after determine_available_memory: in no term of the budget, it comes out of what
//    --gpu-memory-utilization leaves.
#pragma once

#include <cstdint>
#include <string>

#include "cost_models/vllm_engine.h"
#include "onnx_import/graph.h"

namespace memplan {

struct VllmMlaShape {
  int64_t kv_lora_rank = 0, qk_rope_head_dim = 0, qk_nope_head_dim = 0, v_head_dim = 0;
  int64_t heads_per_rank = 0, layers = 0;
};

// Every layer's page for one token: layers x (kv_lora_rank + qk_rope_head_dim) x element_bytes.
uint64_t vllm_mla_kv_bytes_per_token(const VllmMlaShape& s, uint64_t element_bytes);

// The block size vLLM runs MLA with on a GPU of compute capability `capability` (major x 10 + minor) for
// --block-size `requested` at the release `rule` names: from 0.12 a multiple of the backend's block is kept; at 0.11
// (cuda.py check_and_update_config at the v0.11.0 tag: `block_size != 64`, `!= 128`) only the block itself.
int64_t vllm_mla_block_size(int64_t requested, int capability, const VllmRule& rule);

// The MLA backend that block size goes with ("CUTLASS_MLA", "FLASHMLA", "TRITON_MLA"): CUTLASS on 10.0, and from
// 0.13 on the 10.x family (is_device_capability_family(100) at the v0.13.0 tag; v0.12.0 tests 10.0 only).
std::string vllm_mla_backend(int capability, const VllmRule& rule);

// determine_chunked_prefill_workspace_size, in tokens.
int64_t vllm_mla_workspace_tokens(int64_t max_model_len, int64_t max_num_seqs, int64_t block_size);

struct VllmMlaProfile {
  int64_t workspace_tokens = 0;
  uint64_t simulated_bytes = 0;   // the profile's [tokens, heads_per_rank, nope + v] tensor, a layer at a time
  uint64_t workspace_bytes = 0;   // the builder's [tokens, kv_lora_rank + rope], after the profile
};
VllmMlaProfile vllm_mla_profile(const VllmMlaShape& s, int64_t max_model_len, int64_t max_num_seqs, int64_t block_size,
                                DType served);

}  // namespace memplan
