// vLLM's fused mixture-of-experts kernel: what a sparse block (cost_models/engine_kernels.h MoeBlock) allocates when
// vLLM runs it, in place of the exported graph's per-expert gather, MLP and scatter. vLLM's MoE models (mixtral.py,
// qwen2_moe.py, qwen3_moe.py) hold their experts in one FusedMoE layer (vllm/model_executor/layers/fused_moe/
// layer.py), whose unquantized method runs fused_experts (fused_moe.py at 13cb3e4, fused_experts ->
// inplace_fused_experts / outplace_fused_experts -> fused_experts_impl) after fused_topk. Per call, on T tokens of
// hidden size H, E experts, top-k k, one tensor-parallel rank's expert width I_p = I / tp, served type d:
//  - fused_topk (fused_moe.py at 13cb3e4): topk_weights float32 [T, k], topk_ids int32 [T, k],
//    token_expert_indices int32 [T, k];
//  - moe_align_block_size (moe_align_block_size.py at 05be992): sorted_ids int32 [T·k + E·(B − 1)], expert_ids int32
//    [cdiv(T·k + E·(B − 1), B)], num_tokens_post_pad int32 [1], with B the config's BLOCK_SIZE_M; without a tuned
//    config file for the GPU (configs/E=..,N=..,device_name=...json), get_default_config's: 16 when M <= E, else 64
//    (E there is w2.size(0), the rank's experts; the alignment's E is global_num_experts), fp8 with a block shape 64;
//    from 0.17 (PR #34846, merged after the v0.16.0 branch; read at v0.17.1rc0) by the batch: 16 up to M = 32, 32 to
//    96, 64 to 512, else 128, and fp8 with a block shape 16 up to M = 64, else 64 (vllm_triton_moe_block_size);
//  - fused_experts_impl: M = min(T, VLLM_FUSED_MOE_CHUNK_SIZE) tokens per chunk; cache13 of M·k·max(N, H) elements
//    (intermediate_cache1 [M, k, N] and intermediate_cache3 [M, k, H] share it) and intermediate_cache2
//    [M·k, N / 2], in d, where N = 2·I_p (w13's rows: gate and up stacked); the output [T, H] in d
//    (out_hidden_states, empty_like(hidden_states) out of place; the in-place path writes over its input).
// VLLM_FUSED_MOE_CHUNK_SIZE defaults to 32768 up to 0.11 (vllm/envs.py at 001f69f and the v0.11.2 tag) and to
// 16 x 1024 from 0.12 (the v0.12.0 and v0.13.0 tags: VllmRule.fused_moe_chunk_16k, VllmFusedMoeShape.chunk_size):
// both give M = T up to 16384 tokens a step, vLLM's default step on any GPU being 8192 or 2048.
// The experts' weights (FusedMoE.__init__: intermediate_size_per_partition = intermediate_size // tp_size;
// UnquantizedFusedMoEMethod.create_weights: w13_weight [E, 2·I_p, H], w2_weight [E, H, I_p]) are the graph's
// expert weights as its tensor-parallel plan shards them (each expert's gate and up column-parallel, down
// row-parallel: the same I_p per rank when tp divides I, which vLLM's FusedMoE asserts).
#pragma once

#include <cstdint>
#include <string>

#include "onnx_import/graph.h"

namespace memplan {

// vLLM's Marlin MoE kernel (fused_moe/fused_marlin_moe.py fused_marlin_moe, the 0.11 series': an index copy, id
// 2122422579), which the MXFP4 and ModelOpt NVFP4 experts run on Marlin (cost_models/mxfp4_experts.h,
// vllm_nvfp4.h), allocates fused_experts' buffers without chunking: block_size_m the first of 8, 16, 32, 48, 64 with
// T·k / E / block < 0.9 (else 64; E the layer's experts, w1.size(0)), moe_align_block_size at it over the global E
// (moe_align_block_size.py of the series, id 1115867164: T·k + E·(B − 1) sorted ids, no smaller bound), cache13 of
// T·k·max(2·N, H) and cache2 [T·k, N] in the activation type, N the layer's (padded) width, and the output
// empty_like(hidden_states) [T, H]; the layer's own workspace is passed in. Both moe_wna16_marlin_gemm calls take
// use_fp32_reduce and use_atomic_add = (activations float16 or compute capability 9.0 and up); without atomic add
// the op allocates a float32 c_tmp of min(n · len(sorted ids), SMs · 4 · B · max_thread_n 256) elements, doubled at
// B = 8 (csrc/moe/marlin_moe_wna16/ops.cu of the series, index id 24530491262), n the GEMM's output width (2·N, then
// H): a temporary of each call, the larger one counted (reduce_bytes). From 0.12 vLLM passes use_atomic_add=False
// always (vllm_marlin_moe_reduces).
// In the modular kernel (NVFP4 experts from 0.14: cost_models/vllm_nvfp4.h) Marlin runs as MarlinExperts
// (fused_marlin_moe.py at the v0.16.0 branch, 2d5be1dd; experts/marlin_moe.py at the v0.23.0 and v0.24.0 branches):
// its workspace_shapes, workspace1 (M·k, max(N, K)) and workspace2 (M·k·max(2N, K)) with N the width Marlin holds
// (marlin_moe_intermediate_size) and K = H, are TritonExperts' (N = 2·I_p there, below) to the byte, the output
// (M, K) sharing workspace1's request, so the same WorkspaceManager buffer; apply passes them as cache2 and cache13
// (no cache of the call's own) but no workspace=, so _fused_marlin_moe zeroes a lock workspace of SMs x 4 int32
// each call (marlin_make_workspace_new(device, 4): lock_bytes).
//
// From 0.14 (PR #31052, merged the week of 2025-12-26, after 0.13.0; fp8's Triton path from PR #30825, the same
// release) UnquantizedFusedMoEMethod runs its experts in FusedMoEModularKernel(MoEPrepareAndFinalizeNoEP,
// TritonExperts) (a helper's reading, docs/research/vllm-modular-moe-versions.md). The kernel's workspaces come from
// the process's WorkspaceManager (vllm/v1/worker/workspace.py, created in Worker.init_device): one uint8 buffer,
// grown on first need and never freed, every request rounded up to 256 B (get_simultaneous), shared by all MoE layers
// (modular_kernel.py _allocate_buffers). TritonExperts.workspace_shapes: workspace13 (M, k, max(N/2, K)) and
// workspace2 (M, k, max(N, K)) in the activation type (N = 2·I_p, K = H), the output (M, K) sharing workspace13's
// buffer (max of the two, workspace13's for k >= 1). The profile run's first MoE layer allocates them at its
// tokens: held from there to the process's end, through the sampler's warm-up (workspace_bytes). Each call still
// allocates the router's fused_topk tensors, moe_align_block_size's and its output [T, H] (empty_like or
// zeros_like: the same bytes); kernel-level chunking (VLLM_FUSED_MOE_CHUNK_SIZE, 16384 then) is gone from 0.18
// (PR #34086).
// Expert parallelism in the modular kernel (one data-parallel rank: FusedMoEParallelConfig.use_all2all_kernels needs
// dp_size > 1, so prepare and finalize stay MoEPrepareAndFinalizeNoEP's, later NoDPEPModular's; read at v0.16.0,
// v0.17.1rc0, v0.18.0 and the v0.23.0 branch: docs/research/vllm-ep-modular.md): TritonExperts at I_p = I (the
// layer's tp_size is 1) with the rank's E_local experts, workspace_shapes the same formula at that width, and
// moe_align_block_size(…, expert_map) without ignore_invalid_experts gathers expert_map[expert_ids], one more int32
// [cdiv(P, B)] while the first is alive (remaps_expert_ids).
inline constexpr int64_t kVllmFusedMoeChunkSize = 32768;  // envs.py VLLM_FUSED_MOE_CHUNK_SIZE (at 001f69f, v0.11.2)
inline constexpr int64_t kVllmModularMoeChunkSize = 16384;  // the same variable's default from 0.12 (v0.12.0 tag)

struct VllmFusedMoeShape {
  int64_t tokens = 0, hidden = 0, experts = 0, top_k = 0;
  int64_t intermediate_per_rank = 0;  // I_p
  // The experts one rank holds (w2.size(0), get_default_config's E): 0 for all of them; expert parallelism's
  // E_local (cost_models/vllm_expert_parallel.h), while moe_align_block_size keeps the global E.
  int64_t local_experts = 0;
  int64_t block_size_m = 0;  // 0: get_default_config's (vllm_triton_moe_block_size); Marlin's its own
  bool fp8_blocks = false;   // fp8_w8a8 with a block shape (vllm_fp8_block.h): get_default_config's own branch
  bool block_by_batch = false;  // 0.17 on: get_default_config by the batch (VllmRule.triton_moe_block_by_batch)
  bool chunked = true;       // fused_experts_impl's chunks of VLLM_FUSED_MOE_CHUNK_SIZE; Marlin takes every token
  int64_t chunk_size = kVllmFusedMoeChunkSize;  // that variable's default for the version (kVllmModularMoeChunkSize
                                                // from 0.12)
  bool modular = false;      // 0.14 on: TritonExperts in the modular kernel, its workspaces the WorkspaceManager's
  bool remaps_expert_ids = false;  // expert parallelism in the modular kernel: the expert_map[expert_ids] copy
};

// get_default_config's BLOCK_SIZE_M at M tokens a chunk (above): `rank_experts` the rank's E (w2.size(0)),
// `fp8_blocks` fp8 with a block shape, `by_batch` from 0.17 (VllmRule.triton_moe_block_by_batch).
int64_t vllm_triton_moe_block_size(int64_t tokens, int64_t rank_experts, bool fp8_blocks, bool by_batch);

struct VllmFusedMoeBytes {
  int64_t chunk_tokens = 0;    // M
  int64_t block_size_m = 0;    // B
  uint64_t topk_bytes = 0;     // fused_topk's three [T, k] tensors
  uint64_t align_bytes = 0;    // moe_align_block_size's sorted_ids, expert_ids, num_tokens_post_pad
  uint64_t cache13_bytes = 0;
  uint64_t cache2_bytes = 0;
  uint64_t output_bytes = 0;
  uint64_t padded_input_bytes = 0;  // FusedMoE.forward's F.pad of the input to a padded hidden size (MXFP4 Marlin)
  uint64_t reduce_bytes = 0;        // Marlin's float32 c_tmp, the larger GEMM's (without atomic add)
  uint64_t lock_bytes = 0;          // MarlinExperts: Marlin's lock workspace, SMs x 4 int32 zeroed each call
  // The modular kernel's WorkspaceManager buffer (cache13 and cache2 then 0): held from the first MoE layer on, not
  // a call's; not in total().
  uint64_t workspace_bytes = 0;
  uint64_t total() const;  // what one call allocates and frees
};

// The WorkspaceManager buffer TritonExperts asks for at `tokens` tokens (above), in `d`.
uint64_t vllm_modular_moe_workspace_bytes(int64_t tokens, int64_t top_k, int64_t hidden, int64_t width, DType d);

VllmFusedMoeBytes vllm_fused_moe_bytes(const VllmFusedMoeShape& s, DType dtype);

// VLLM_FUSED_MOE_CHUNK_SIZE's default at a release: `from_0_12`, VllmRule.fused_moe_chunk_16k.
inline int64_t vllm_fused_moe_chunk_size(bool from_0_12) {
  return from_0_12 ? kVllmModularMoeChunkSize : kVllmFusedMoeChunkSize;
}

// moe_align_block_size's sorted token ids at block `block`: T·k + E·(block − 1), E the global experts (the buffer's
// length; fused_marlin_moe's c_tmp is sized by it too).
uint64_t vllm_moe_align_sorted_ids(int64_t tokens, int64_t top_k, int64_t experts, int64_t block);

// fused_marlin_moe's block_size_m (above).
int64_t vllm_marlin_moe_block_size(int64_t tokens, int64_t top_k, int64_t experts);

// Whether fused_marlin_moe's GEMMs reduce in a float32 c_tmp (above). `computes_atomic_add` (VllmRule
// marlin_moe_atomic_add, up to 0.11): use_atomic_add for float16 activations or compute capability 9.0 and up (major
// x 10 + minor), no c_tmp then. From 0.12 the calls pass use_atomic_add=False (PR #24722, merged 2025-11-29, read at
// the v0.12.0 and v0.13.0 tags of a fork that keeps them: docs/research/vllm-013-marlin-atomic-add.md): every GPU
// reduces.
inline bool vllm_marlin_moe_reduces(int capability, DType d, bool computes_atomic_add) {
  return !computes_atomic_add || (d != DType::Float16 && capability < 90);
}

// fused_marlin_moe on `tokens` tokens of `hidden` (the layer's, padded where the layer pads it), `width` N, in `d`,
// with `multiprocessors` SMs; `reduces`: vllm_marlin_moe_reduces (c_tmp's cap needs the SMs: the caller refuses an
// unknown count where it reduces; std::logic_error here). `modular`: as MarlinExperts (above): the caches in the
// WorkspaceManager's buffer (workspace_bytes), the lock workspace the call's (the SMs needed too).
VllmFusedMoeBytes vllm_marlin_moe_bytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t width,
                                        bool reduces, int multiprocessors, DType d, bool modular);

// I_p for a tensor-parallel group of `tp`: I / tp; throws InputError naming `model` when tp does not divide I
// (FusedMoE's assert intermediate_size % tp_size == 0).
int64_t vllm_moe_intermediate_per_rank(int64_t intermediate, int tp, const std::string& model);

}  // namespace memplan
