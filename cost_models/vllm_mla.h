// vLLM's multi-head latent attention (DeepseekV2ForCausalLM's MLA layers: vllm/model_executor/models/deepseek_v2.py
// at b863fe5, run by the MLA backends of vllm/v1/attention/backends/mla/ through MLAAttention,
// vllm/model_executor/layers/attention/mla_attention.py at 90b0a26): its KV cache, its block size and what its
// profile run allocates, in place of the per-head keys and values of transformers' cache.
//  - The cache (MLAAttention.get_kv_cache_spec; MLAAttentionSpec.real_page_size_bytes, vllm/v1/kv_cache_interface.py
//    at bc8282e): one "head" (num_kv_heads 1) of head_size = kv_lora_rank + qk_rope_head_dim elements a token and
//    layer, the latent and the rope key, in the cache's type (--kv-cache-dtype fp8: one byte), no separate values.
//    The latent is not split by heads: every tensor-parallel rank holds all of it. DeepSeek-V3 in bf16:
//    61 x 576 x 2 = 70,272 B a token.
//  - The backend and block size (vllm_mla_choice; docs/research/vllm-mla-hopper-ampere.md reads the tags):
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

// The MLA backend vLLM runs on a GPU of compute capability `capability` (major x 10 + minor), the block size it
// runs it with for --block-size `requested` (`given`: the user's, else vLLM's default 16), and what importing the
// backends allocates at load (without VLLM_ATTENTION_BACKEND; vllm/platforms/cuda.py):
//  - 10.0, and from 0.13 the 10.x family (is_device_capability_family(100) at the v0.13.0 tag): CUTLASS MLA, which
//    check_and_update_config sets as the backend, the block raised to 128 (to 0.16: unless a multiple from 0.12,
//    unless 128 itself at v0.11.0's `!= 128`; from 0.17.1 CUTLASS's own preferred 128 by the same arithmetic for the
//    default, a given block that is not a multiple of 128 not read). From PR #32615 (merged 2026-01-19; in the
//    v0.16.0 branch; 0.15 taken to carry it) FlashInfer MLA where qk_nope_head_dim is 128 (docs/research/
//    vllm-flashinfer-mla-blackwell.md): to 0.16 preselected (check_and_update_config writes the backend, its
//    validation then refuses a head size other than 576 or an fp8_e5m2 cache: no start), the block forced to 64
//    unless 32 or a multiple of 64; from 0.17.1 first in the 10.x list, valid for qk_nope_head_dim 128 (64 too from
//    0.18) and head size 576 (320 too from 0.18), its preferred block 32 (it takes multiples of 32 or 64: 16 is not
//    one), a given block it does not take falling to Triton MLA (multiples of 16). Its prefill workspaces (0.16's two
//    394 MiB buffers) and 0.18's per-layer decode outputs come after the cache is sized: in no term.
//    Importing cutlass_mla.py allocates its module-level g_sm100_workspace, SM100Workspace(128 MiB) (torch.empty on
//    "cuda"; cutlass_mla.py at v0.11.0 to v0.18.0), and flashinfer_mla.py its g_fi_workspace, torch.zeros(128 MiB),
//    during the model's construction (MLAAttention.__init__ asks for its backend inside load_model): in the weights'
//    term. To 0.16 only the preselected backend's module is imported; from 0.17.1 get_valid_backends imports every
//    backend of the list, both modules.
//  - 9.x: v0.11.0 runs FlashMLA, the block forced to 64 when it is not 64. From PR #27363 (merged 2025-11-11, in
//    v0.11.2; the 0.11.1 release, cut from main a week later, is taken to carry it) _get_backend_priorities puts
//    FLASH_ATTN_MLA first and get_valid_backends walks the list; to 0.16 check_and_update_config still forces a block
//    that is not a multiple of 64 to 64 for FlashMLA whenever dense FlashMLA is built, whichever backend then wins.
//    From PR #35122 (merged 2026-03-09, first in v0.17.1rc0) nothing is forced: a block not given is the chosen
//    backend's preferred size (update_block_size_for_backend: FLASH_ATTN_MLA takes any multiple of 16, so 16),
//    and a given one is kept by the first backend that supports it. FLASH_ATTN_MLA refuses an fp8 cache at every
//    release: FlashMLA then, whose block is 64 (to 0.16 forced; from 0.17.1 its preferred 64, a given multiple of
//    64 kept); a given block that is not a multiple of 64 has no backend at 0.17.1 and Triton MLA from 0.17.2 (PR
//    #34597 gave it fp8).
//  - below 9.0: Triton MLA with the block as given (a multiple of 16 from 0.17.1, PR #36292); an fp8 cache has no
//    backend before 0.17.2 (TritonMLAImpl refuses it).
// From 0.11.1 on 9.x and below, get_valid_backends imports every backend of the list, FLASHINFER_MLA's module with it
// (a hard dependency of the CUDA wheel from 0.11.1), whose module-level g_fi_workspace is torch.zeros(128 MiB) on
// "cuda" (flashinfer_mla.py FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE at v0.11.2 to v0.18.0), during the model's
// construction: in the weights' term, unless FlashInfer does not import (`flashinfer_importable` false).
inline constexpr uint64_t kVllmMlaModuleWorkspace = 128ull << 20;
struct VllmMlaChoice {
  std::string backend;              // "FLASH_ATTN_MLA", "FLASHMLA", "CUTLASS_MLA", "TRITON_MLA"
  int64_t block_size = 0;
  uint64_t module_workspace_bytes = 0;  // the backend modules' workspaces allocated at import
  std::string module_workspace;         // whose ("cutlass_mla.py g_sm100_workspace", ...; "" for none)
  std::string refused;                  // why vLLM finds no backend ("" when one runs)
};
// `kv_cache_dtype`: --kv-cache-dtype (auto, fp8, fp8_e4m3, fp8_e5m2); `shape`: the model's MLA dimensions.
VllmMlaChoice vllm_mla_choice(int64_t requested, bool given, const std::string& kv_cache_dtype, int capability,
                              const VllmRule& rule, bool flashinfer_importable, const VllmMlaShape& shape);

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
