// vLLM's V1 engine: how it sizes its paged KV cache at start-up, rule by rule, each from the vLLM source it
// follows (vllm-project/vllm; gpu_worker.py at 35d5cda, gpu_model_runner.py at 4e17906, kv_cache_utils.py at
// bbf906a, mem_utils.py at a6d5c39, sample/sampler.py at 3e34265, sample/ops/topk_topp_sampler.py at 3babc05:
// the V1 worker after PR #25359, which initialises NCCL before the memory snapshot).
//
//   requested  = total_memory x gpu_memory_utilization              (Worker.init_device: requested_memory)
//   available  = requested - (weights + torch_peak_increase + non_torch_increase)
//                                       (Worker.determine_available_memory; utils/mem_utils.py memory_profiling)
//   num_blocks = available // page_size // num_layers               (kv_cache_utils.get_num_blocks)
//   GPU KV cache size = num_blocks x block_size tokens              (_get_kv_cache_config_uniform_type)
//   Maximum concurrency = num_blocks / cdiv(max_model_len, block_size)
//                                            (get_max_concurrency_for_kv_cache_config, full attention)
// The profile run that sets torch_peak_increase (GPUModelRunner.profile_run): one forward of
// max_num_batched_tokens tokens spread over min(max_num_seqs, tokens) dummy requests, attention not computed
// (no attention metadata while profiling), then the sampler's warm-up on the last position of each request
// while the forward's hidden states are still referenced. Peak allocated bytes (allocated_bytes.all.peak), not
// reserved, are what vLLM charges. CUDA graphs are captured after the cache is allocated
// (Worker.compile_or_warm_up_model) and the CUDA context and NCCL's buffers are allocated before the snapshot
// (Worker.init_device): neither is charged to the cache; they live in the memory utilization leaves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost_models/paged_kv.h"
#include "onnx_import/graph.h"

namespace memplan {

// Which vLLM's start-up rule applies (--engine-version), each from the source the research notes cite
// (docs/research/vllm-kv-sizing.md sections 1, 2, 6 and Addendum A):
//  - V0_11 (default; the notes' current code, gpu_worker.py at 35d5cda, after PR #25359): the baseline rule above;
//    NCCL and custom all-reduce buffers are allocated before the snapshot, so they are in no term; the profile run
//    holds the forward's hidden states [tokens, hidden] while the sampler warms up (gpu_model_runner.py at 4e17906,
//    profile_run deletes them after _dummy_sampler_run). CUDA graphs are captured after the cache is sized.
//  - V0_8 (0.8.x and 0.9.0; gpu_worker.py at 0012cf6, Worker.determine_available_memory of the 0.8 series):
//    available = int(total x utilization - peak) where peak = allocated_bytes.all.peak since reset_peak_memory_stats
//    (absolute: the weights and everything PyTorch holds) plus, when positive, every byte on the GPU outside PyTorch's
//    allocator after the profile ((total - free) - allocated_bytes.all.current: the CUDA context, NCCL's buffers,
//    other processes), so the non-torch term is all of it, not an increase over a snapshot. Its runner's
//    _dummy_run returns the sampled rows only (the worker calls _dummy_sampler_run(hidden_states=_dummy_run(...));
//    notes' Addendum A): the [tokens, hidden] states are freed before the sampler runs. The runner's persistent
//    input buffers (token ids, positions, block tables), which this absolute peak holds too, are not modelled.
//    0.9.0 (May 2025) and its 0.9.0.1 hot fix ran the same text (notes' Addendum I): main still computed
//    non_torch_allocations = (total - free) - allocated and added it to the absolute peak on 12 May 2025 (the diff
//    PR #17122 proposed against it) and on 28 May 2025 (PR #18858's printout, after 0.9.0 was out), and a 0.9.0.1
//    traceback (ServerlessLLM PR #263) shows profile_run's `hidden_states = self._dummy_run(self.max_num_tokens)`,
//    one value as in 0.8 (the pair hidden_states, last_hidden_states that holds the states came later). 0.9.1 is
//    V0_9's (below), with this profile run.
//  - V0_20 (0.20 to 0.24: the CUDA-graph estimate on by default, PR #38284, merged 2026-04-21 before the 0.20
//    branch was cut on 2026-04-26; it turned on VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, which PR #30515 had added
//    off on 2026-03-07; docs/research/vllm-020-defaults.md): the current rule less the graphs' estimate, which is
//    taken only when graphs are captured (cudagraph_mode not NONE). Its per-graph capture sizes are not sized here:
//    answered with --enforce-eager (no graphs, no estimate) or with the estimate as vLLM logs it
//    (--cuda-graph-memory). Its V1 sampler is V0_17's (vllm_triton_sampler_peak_bytes). The same PR made 0.92 the
//    default gpu_memory_utilization (VllmRule.default_gpu_memory_utilization).
//  - V0_6 (vLLM's V0 engine, the default before 0.8.0, from 0.6.0 to 0.6.4, before PR #10511): the worker's
//    absolute rule, as V0_8's (vllm/worker/worker.py at 6ae5229, Worker.determine_num_available_blocks:
//    int(total x utilization - peak), peak the absolute allocated peak plus every non-torch byte), one block of
//    every layer (CacheEngine.get_cache_block_size), num_gpu_blocks = int(available // block_bytes). Its profile run
//    (vllm/worker/model_runner.py at 587909c, ModelRunner.profile_run and execute_model): max_num_seqs dummy prompts
//    splitting max_num_batched_tokens (vLLM's SchedulerConfig makes that at least max_num_seqs), attention computed
//    by the backend's kernel over the prompts with no KV cache, then compute_logits on each prompt's last token
//    while execute_model still holds the forward's [tokens, hidden] states, then V0's sampler (vllm_v0_sampler_peak_
//    bytes). CUDA graphs are captured after the cache is allocated (Worker._warm_up_model): not in the budget.
//  - V0_9 (0.9.1 to 0.10.x: PR #19312, merged on 9 June 2025, gave the V1 worker V0's memory_profiling,
//    the baseline rule above; PR #25359, merged in September 2025 after 0.10.2, moved the distributed set-up before
//    the snapshot): Worker.init_device takes init_snapshot and only then calls init_worker_distributed_environment
//    (the order PR #25359 reverses, by its description; a device plugin's copy of that init_device, index ids
//    58612312667 and 58630295341), so NCCL's communicators and the custom all-reduce's IPC buffers, allocated outside PyTorch after
//    the snapshot, are in non_torch_increase at tensor parallel >= 2 (vllm_custom_all_reduce_bytes; NCCL's own
//    buffers are NCCL's, sized by its version and the topology, not by vLLM: --reserve carries them). The profile run
//    holds the forward's hidden states while the sampler warms up (profile_run's `del hidden_states, output` after
//    _dummy_sampler_run in 0.10-era copies of gpu_model_runner.py, index ids 36090783594, 68835586706; the v0.9.2
//    tag's `hidden_states, last_hidden_states = self._dummy_run(...)`). The v0.9.1 tag (b6553be, 10 June 2025)
//    carries PR #19312 (and #18974 before it): init_snapshot at gpu_worker.py:135, the distributed set-up at :153,
//    memory_profiling (vllm/utils.py, the text of v0.9.2's) at :201; but its profile run is 0.8's, _dummy_run
//    returning hidden_states[logit_indices], the forward's states freed before the sampler. Its step
//    defaults, sliding-window and MLA sizing and data parallelism are not read at those versions (as 0.8's).
//  - V0_6_5 (0.6.5 to 0.6.x, V0; 0.6.6.post1 the last): PR #10511 (merged in December 2024, its review's "merging"
//    of the 16th, first in 0.6.5) gave V0's Worker.determine_num_available_blocks the baseline rule: with memory_profiling(baseline = total - the free
//    memory init_device measured, weights = model_runner.model_memory_usage): profile_run(); available = total x
//    utilization - (weights + torch_peak_increase + non_torch_increase), num_gpu_blocks = int(available //
//    cache_block_size) (a 0.6.5-era copy of worker.py, index id 1418536268; of vllm/utils.py memory_profiling, whose
//    docstring gives non_torch_increase as the GPU's used memory less the baseline, the weights and the profile's
//    change of allocated bytes, index id 1271025205). The profile run is V0_6's. init_device measures its free
//    memory after set_device and empty_cache (the CUDA context before it) and before init_worker_distributed_
//    environment (worker.py at 6ae5229; PR #10511 did not move it), so at tensor parallel >= 2 the increase holds
//    what the distributed set-up leaves on the GPU: NCCL's communicators (--reserve), the custom all-reduce's two
//    cudaMalloc'd IPC buffers (vllm_custom_all_reduce_bytes: CustomAllreduce allocates them with
//    create_shared_buffer since PR #10030, merged in November 2024) and, since this form subtracts the
//    weights and the profile's change of allocated bytes but not other tensors allocated after the baseline, the
//    all-reduce's rank_data, a torch.empty of 8 MiB (kVllmCustomAllReduceRankData). What PyTorch's caching allocator
//    holds reserved beyond the allocated bytes after empty_cache (the rounding of its segments) is in this increase
//    too, on one GPU as at tp >= 2: not sized, --reserve carries it.
//  - V0_7 (0.7.x, V0): PR #11809 (merged January 2025: non-torch memory is the used memory less
//    torch.cuda.memory_reserved(), not less the allocated bytes) and PR #12126 (January 2025: init_device takes
//    baseline_snapshot = MemorySnapshot(), memory_profiling(baseline_snapshot, weights_memory)), both after 0.6.6
//    (December 2024) and before 0.7.0 (late January 2025), made non_torch_increase the increase of (used - reserved)
//    from the baseline snapshot to after the profile (vllm/utils.py MemorySnapshot.measure and memory_profiling, a
//    copy of that text, index id 107014039; V0's worker.py determine_num_available_blocks with
//    memory_profiling(self.baseline_snapshot, ...), index id 70512571769). A 0.7.3 user's copy of init_device
//    (index id 41703700143) takes the snapshot before init_worker_distributed_environment. So at tp >= 2 the
//    increase holds NCCL's communicators (--reserve) and the custom all-reduce's IPC buffers, as V0_9's does; its
//    rank_data is in PyTorch's reserved memory, not in the increase, nor is the allocator's rounding.
//  - V0_17 (0.17 to 0.19): V0_11's worker; its V1 runner's sampler masks top-k and top-p with vLLM's Triton kernel
//    (PR #33538, "Triton-based top-k and top-p sampler kernels", listed under Kernel in the v0.17.0 release notes
//    of 7 March 2026 and not in v0.16.0's, whose branch was cut on 8 February): vllm_triton_sampler_peak_bytes.
//  - V0_25 (0.25 and later): V0_20's worker, and Model Runner V2 for the models vLLM gives it by default (the
//    v0.25.0 release notes: "Model Runner V2 is now the default for all dense models", PR #44443), which
//    VllmModelRunner below resolves with the model. To 0.28. PR #49208 (main of 2026-07-20, read at 91a893de6 of
//    2026-08-20, vllm/utils/mem_utils.py memory_profiling; first in 0.27.0: published 0.26.0 logs print the old
//    line, 0.27.1 logs the new, docs/research/vllm-026-034-budget.md) takes the non-KV memory as total_consumed (the free memory at the init
//    snapshot less that after the profile, mem_get_info's) plus the transient peak (allocated peak less allocated
//    after the profile), and logs "consumed memory (weights + non-torch)": the same sum as weights +
//    torch_peak_increase + non_torch_increase but for what PyTorch's caching allocator keeps reserved beyond the
//    allocated bytes after empty_cache, which memplan does not size (--reserve carries it, as the non-torch increase).
//  - V0_29 (0.29 and later): V0_25's worker with Model Runner V2 the default for every model (the v0.29.0 release
//    notes of 9 September 2026: "Model Runner V2 is now the default for all models (#53183)"), and V2 now
//    subtracts its CUDA graphs' memory before sizing the cache ("MRV2 also gained CUDA graph memory profiling for
//    KV cache auto-sizing (#53306)": captures against a minimal cache in a throwaway pool, measured on the GPU),
//    which memplan does not size: answered with --enforce-eager or --cuda-graph-memory, as V1 from 0.20. V2's
//    profile run is otherwise the one read for 0.25 (not read at 0.29).
enum class VllmVersion { V0_6, V0_6_5, V0_7, V0_8, V0_9, V0_11, V0_17, V0_20, V0_25, V0_29 };

// What vLLM's start check asks of a hybrid model's cache for one request of max_model_len tokens (vllm/v1/core/
// kv_cache_utils.py at the release tags; cost_models/vllm_kv_groups.h): 0.11 to 0.13 check_enough_kv_cache_memory
// sums every layer's own max_memory_usage_bytes, unpadded; PR #29431 (merged 2025-12-24, after #30785 of 0.14)
// checks the groups, _max_memory_usage_bytes_from_groups: group_size x page x the blocks of kv_cache_groups[0]
// only (v0.16.0 and v0.18.0 alike) until PR #36030 ("Correct max memory usage for multiple KV-cache groups",
// 2026-03-17, in v0.18.1rc0, not in v0.18.0) sums every group's blocks.
enum class VllmKvStartCheck { EveryLayer, FirstGroup, EveryGroup };

// What each rule does differently: the analysis (report/serve_vllm.cc) reads these, never the version.
struct VllmRule {
  bool v0_engine = false;               // V0's ModelRunner, sampler and SchedulerConfig defaults
  bool absolute_budget = false;         // the absolute peak and every non-torch byte (V0_6, V0_8)
  bool hidden_held_at_sampler = false;  // the forward's [tokens, hidden] alive while the sampler runs
  bool sizes_sliding_window = false;    // the V1 KV cache manager's SlidingWindowSpec and hybrid groups
  bool sizes_mla = false;               // the V1 MLA backends' profile run
  bool sizes_data_parallel = false;     // --data-parallel-size
  bool needs_step_flags = false;        // vLLM's default step for the GPU not read: --max-batched-tokens and
                                        // --max-num-seqs required
  bool all_reduce_after_snapshot = false;  // the custom all-reduce's IPC buffers in non_torch_increase (V0_6_5,
                                           // V0_7, V0_9)
  bool rank_data_after_baseline = false;   // and its rank_data tensor (V0_6_5: allocated bytes since the baseline)
  bool triton_top_k_top_p = false;  // V1's sampler masks top-k/top-p with the Triton kernel (V0_17 on)
  bool cudagraph_estimate = false;  // V1's worker subtracts its CUDA graphs' estimate unless eager (V0_20 on)
  // The default step (vllm_step_defaults): from 0.11.1 a default max_num_batched_tokens is at most max_num_seqs x
  // max_model_len (PR #28665, merged 2025-11-14: in v0.11.2, whose tree is main's of 2025-11-19; 0.11.1, not in the
  // store, taken with it as this file's other 0.11.1 paths are; at v0.11.0 only the ENGINE_CONTEXT path, through
  // SchedulerConfig.__post_init__, clamps); from 0.28 the at-least-160-GiB tier (PR #51726).
  bool clamps_default_step = false;
  bool largest_step_tier = false;
  bool performance_mode = false;  // 0.17 on: --performance-mode (VllmPerformanceMode)
  // CacheConfig.gpu_memory_utilization's default (vllm/config/cache.py; the LLM class's keyword and `vllm serve`'s
  // EngineArgs take it from there): 0.9, and 0.92 from 0.20 (PR #38284, which turned the estimate on and raised the
  // default "to offset" it: 0.92 at the 0.20 branch's 132765e35, vllm/config/cache.py:66).
  double default_gpu_memory_utilization = 0.9;
  // Paths that changed inside one budget rule's range, by release (the series each names):
  bool even_expert_map = false;       // 0.10.1 on: determine_expert_map deals the experts left over one each to the
                                      // first ranks (PR #21497); before it the last rank took them all
  bool modelopt_kv_auto_fp8 = false;  // 0.14 on: --kv-cache-dtype auto follows a ModelOpt checkpoint's
                                      // kv_cache_quant_algo FP8 (PR #30785, resolve_kv_cache_dtype_string, merged
                                      // 2025-12-17 after 0.13's branch; v0.13.0 has the reverted #29980 reverted)
  bool nvfp4_marlin_moe = false;      // 0.11 on: ModelOptNvFp4FusedMoE on Marlin read (cost_models/vllm_nvfp4.h): to
                                      // 0.13 apply calls fused_marlin_moe, its buffers each call's; from 0.14 (PR
                                      // #31692) MarlinExperts in the modular kernel (modular_moe)
  bool modular_moe = false;           // 0.14 on: unquantized and fp8 Triton experts in FusedMoEModularKernel, its
                                      // workspace the WorkspaceManager's (PR #31052, PR #30825), and NVFP4's Marlin
                                      // experts (PR #31692), their input scales dropped
  bool nvfp4_moe_global_scales_float32 = false;  // 0.20 on: NVFP4 Marlin experts' global scales stay float32
  bool marlin_moe_pads_width = false;  // 0.24 on: prepare_nvfp4_moe_layer_for_marlin pads the width (vllm_nvfp4.h)
  bool modular_moe_chunked = false;   // 0.14 to 0.17: that kernel chunks steps above VLLM_FUSED_MOE_CHUNK_SIZE (PR
                                      // #34086 removed it in 0.18)
  bool mxfp4_marlin_modular = false;  // 0.17 on: MXFP4 experts on Marlin in the modular kernel (PR #34588)
  // fp8 experts on compute capability 9.0 (fused_moe/oracle/fp8.py select_fp8_moe_backend, read at the v0.16.0
  // branch, v0.17.1rc0 and v0.18.0: docs/research/vllm-fp8-ep.md): FlashInfer's CUTLASS MoE (FlashInferExperts) comes
  // before Triton for static per-tensor scales and block scales where flashinfer imports (0.16 on; 0.13 took it only
  // with VLLM_USE_FLASHINFER_MOE_FP8; 0.14 and 0.15 not read); from 0.17 _get_priority_backends puts Triton first for
  // block scales without expert parallelism.
  bool fp8_moe_flashinfer_cutlass = false;
  bool fp8_block_moe_triton_first = false;
  bool triton_moe_block_by_batch = false;  // 0.17 on: get_default_config's BLOCK_SIZE_M by the batch (PR #34846,
                                           // vllm_fused_moe.h vllm_triton_moe_block_size)
  bool fused_moe_chunk_16k = false;    // 0.12 on: VLLM_FUSED_MOE_CHUNK_SIZE's default 16 x 1024 (vllm/envs.py at the
                                       // v0.12.0 tag; 32768 at v0.11.2): fused_experts_impl's chunk
  bool marlin_moe_atomic_add = false;  // up to 0.11: fused_marlin_moe computes use_atomic_add (float16, or 9.0 and up);
                                       // from 0.12 (PR #24722, merged 2025-11-29) False always: every GPU reduces in
                                       // a float32 c_tmp (vllm_fused_moe.h vllm_marlin_moe_reduces)
  bool fp4_marlin_sm75 = false;       // 0.14 on: Marlin's FP4 GEMMs on compute capability 7.5 (PR #29901, merged the
                                      // week of 2025-12-19 after 0.13's cut; is_fp4_marlin_supported needed 8.0 before)
  bool flashinfer_sampler_unread = false;  // 0.8.x: the V1 sampler took FlashInfer only below its 0.2.3
                                          // (topk_topp_sampler.py at v0.8.0 to v0.8.5), which one ran not read
  bool flashinfer_sampler = false;  // 0.9.0 to 0.11.0: V1's TopKTopPSampler runs FlashInfer's sampling wherever
                                    // flashinfer.sampling imports (VLLM_USE_FLASHINFER_SAMPLER None counts as on:
                                    // topk_topp_sampler.py at v0.9.0, v0.10.2, v0.11.0); opt-in from 0.11.1 (PR #26859)
  bool nvfp4_gemm_needs_sm100 = false;  // 0.16 on: ModelOptNvFp4LinearMethod takes flashinfer-cutlass only from 10.0
                                        // (PR #33076, in the v0.16.0 branch); before, whenever has_flashinfer()
  bool sm100_family = false;  // 0.13 on: SM100 paths test is_device_capability_family(100) (10.x), not 10.0 alone
                              // (get_mxfp4_backend and CudaPlatform.check_and_update_config at v0.13.0; v0.12.0
                              // tests is_device_capability(100))
  bool flashinfer_mla_blackwell = false;  // 0.15 on: FlashInfer MLA the default on 10.x (PR #32615, 2026-01-19)
  bool flashinfer_mla_shapes_018 = false;  // 0.18 on: FlashInfer MLA takes qk_nope_head_dim 64 and head size 320 too
  bool mla_block_multiples = false;  // 0.12 on: the MLA backends keep a --block-size that is a multiple of theirs
  bool mla_backend_priorities = false;  // 0.11.1 on: MLA backends from _get_backend_priorities, FLASH_ATTN_MLA first
                                        // on 9.x (PR #27363), every listed module imported (vllm_mla_choice)
  bool mla_preferred_block = false;  // 0.17.1 on: no block forced; the backend's preferred one (PR #35122)
  bool triton_mla_fp8 = false;       // 0.17.2 on: Triton MLA takes an fp8 KV cache (PR #34597)
  bool bundles_triton_kernels = false;  // 0.12 on: the build fetches triton_kernels (PR #28788,
                                        // cmake/external_projects/triton_kernels.cmake first at v0.12.0; neither
                                        // requirements/cuda.txt nor the Dockerfile has it before)
  bool mxfp4_hopper_swizzle = false;    // 0.11.1 on: torch 2.9.0 pinned (PR #24994; v0.10.2 and v0.11.0 pin 2.8.0,
                                        // below the 2.8.1 mxfp4_utils.py _swizzle_mxfp4 asks for Hopper's layouts)
  // A hybrid model's groups (_get_kv_cache_groups_uniform_page_size): group_size the most layers of one kind when
  // most x 4 < fewest x kv_group_pad_quarters, else the fewest: 0 (never; to 0.11.x), 5 (x 1.25: 0.12 to 0.17.1,
  // PR #29303), 6 (x 1.5: 0.17.2 on, PR #36684, first in v0.17.2rc0).
  int kv_group_pad_quarters = 0;
  VllmKvStartCheck kv_start_check = VllmKvStartCheck::EveryLayer;
};
// What the release `version_text` (an --engine-version, vllm_version's forms) does: its budget rule's flags and the
// paths of its series. Throws vllm_version's InputError.
VllmRule vllm_rule(const std::string& version_text);
// Whether vLLM's SM100 paths (get_mxfp4_backend's FlashInfer branch, CUTLASS MLA) take a GPU of compute capability
// `capability` (major x 10 + minor) at the release `rule` names: 10.0, and from 0.13 the 10.x family.
inline bool vllm_sm100(int capability, const VllmRule& rule) {
  return capability == 100 || (capability / 10 == 10 && rule.sm100_family);
}
// "0.11" to "0.16.x" and "0.17" to "0.19.x" (the same budget rule), "0.8" and "0.9.0", "0.9.1" to "0.10.x", "0.6.0"
// to "0.6.4", "0.6.5" to "0.6.x", "0.7.x", "0.20" to "0.24.x", "0.25" to "0.28.x", "0.29" and later: the rule;
// anything else throws InputError naming the versions modelled and why the others are not.
VllmVersion vllm_version(const std::string& text);

// Which GPU model runner profiles the engine (vLLM's VLLM_USE_V2_MODEL_RUNNER; memplan's --model-runner).
//  - V1: vllm/v1/worker/gpu_model_runner.py, whose profile run the rules above follow. From 0.20 its worker
//    subtracts the CUDA graphs' estimate (profile_cudagraph_memory: captures measured on the GPU), which memplan
//    does not size: --enforce-eager (no graphs, no estimate) or the estimate as logged (--cuda-graph-memory).
//  - V2: vllm/v1/worker/gpu/model_runner.py (read at main's 0036d38, the tags' text not being in the store; vLLM's
//    log of a 0.27.1 run, bench/serving.md log G, prints the same zero graph term): its profile_cudagraph_memory returns 0 ("TBD whether we keep this API"), so
//    no estimate is subtracted, graphs or not; profile_run holds hidden_states and sample_hidden_states (the rows
//    hidden_states[logits_indices], a copy) through _dummy_sampler_run, which computes the logits and runs its
//    Sampler on a dummy InputBatch: no top-k, top-p, min-p, penalties or logprobs (the dummy requests' default
//    sampling states; "the sampler may skip top_k, top_p, and logprobs"), so its peak is vllm_v2_sampler_peak_bytes.
// `forced`: --model-runner v1 or v2; none: vLLM's default (from 0.22 to 0.28 V2 for the models
// vllm_v2_default_before_0_29 lists, its profile run before 0.25 taken to be the one read at 0.25:
// profile_cudagraph_memory a placeholder returning 0 since PR #36520, "[Model Runner V2] Add dummy
// profile_cudagraph_memory API", until 0.29's PR #53306, and the dummy sampler run without top-k/top-p; from 0.29 V2
// for every model). Throws InputError naming `model`: V2 before 0.22 (its profile run is not read there), V2 with
// --enable-lora (whether 0.25's V2 runs LoRA or falls back to V1 is not read), V1 from 0.20 and V2 from 0.29
// without --enforce-eager or the estimate as vLLM logs it (`estimate_given`: --cuda-graph-memory).
enum class VllmModelRunner { V1, V2 };
VllmModelRunner vllm_model_runner(VllmVersion v, const std::string& version_text,
                                  std::optional<VllmModelRunner> forced, bool has_experts, bool enforce_eager,
                                  bool enable_lora, const std::string& model, const std::string& model_type = "",
                                  bool quantized = false, bool estimate_given = false);
// Whether the runner `runner` subtracts a CUDA-graph estimate at the release `v`: V1 from 0.20, V2 from 0.29
// (PR #53306), when graphs are captured.
bool vllm_subtracts_graph_estimate(VllmVersion v, VllmModelRunner runner);
// 0.22 to 0.28 (`minor`): Model Runner V2 the default before 0.29 for the architectures vLLM lists
// (VllmConfig._is_default_v2_model_runner_model with DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES), by the config.json's
// `model_type` (a graph without one: none):
//  - 0.22, PR #39337 (its release notes): Qwen3, dense, not quantized;
//  - 0.23, PR #43458: "MRv2 is now selected by default for Llama and Mistral dense models in addition to Qwen3", the
//    list {LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM} and `not is_moe and not is_quantized` read in a
//    fork's copy of 0.23's vllm/config/vllm.py, index id 69127399661;
//  - 0.24: PR #44446, "MRv2 now supports quantized models by default"; PR #42667 (merged 12 June 2026, after 0.23's
//    branch: a source reading of main that day, index id 61968908712) adds DeepseekV2ForCausalLM and
//    Qwen2MoeForCausalLM and drops the `is_moe` exclusion for listed architectures; a plugin's rebase notes onto 0.24
//    (index id 59841362446) list the six architectures, GraniteMoeForCausalLM too (not memplan's);
//  - 0.25 to 0.28: every dense model and the listed mixtures of experts (`is_default_v2_architecture or not
//    model_config.is_moe`, index id 65857686268, whose list holds DeepseekV2ForCausalLM, GraniteMoeForCausalLM and
//    Qwen2MoeForCausalLM among architectures memplan does not import).
// V2's features that fall back to V1 (speculative decoding but eagle/eagle3/mtp, prompt embeds, custom logits
// processors, context or sequence parallelism...) are not memplan's.
bool vllm_v2_default_before_0_29(int minor, bool has_experts, const std::string& model_type, bool quantized);
// The minor version of an --engine-version "0.MINOR[.PATCH...]" text (-1 where it is not one): what vllm_version
// and vllm_rule read, for a rule that changed inside one VllmVersion's range.
int vllm_minor_version(const std::string& text);
// The rule's name as the answer prints it.
std::string vllm_rules_name(VllmVersion v, VllmModelRunner runner);

// The custom all-reduce's buffers one tensor-parallel rank allocates outside PyTorch (vllm/distributed/
// device_communicators/custom_all_reduce.py, CustomAllreduce.__init__ and create_shared_buffer, at 00d618a; the
// 0.10-era copies, index ids 65889219201 and 40890771208, allocate the same two): meta_ptrs of meta_size() +
// max_size bytes and buffer_ptrs of max_size, each by ops.allocate_shared_buffer_and_handle, a cudaMalloc
// (csrc/custom_all_reduce.cu), with max_size = 8192 x 1024 (the constructor's default; CudaCommunicator passes
// none) and meta_size() = sizeof(vllm::Signal) = self_counter[36][8] + peer_counter[2][36][8] uint32 flags =
// 1,152 + 2,304 = 3,456 bytes (csrc/custom_all_reduce.cuh: kMaxBlocks 36, FlagType uint32_t, both 128-aligned).
// Only where the all-reduce is enabled: tp in _SUPPORTED_WORLD_SIZES (2, 4, 6, 8), otherwise 0. The peers' buffers
// opened by cudaIpcOpenMemHandle live on the peers' GPUs; rank_data (8 MiB) is a torch tensor, in PyTorch's
// reserved memory, so not in the non-torch term of the MemorySnapshot form (V0_7, V0_9); `rank_data` adds it for
// V0_6_5, whose increase counts tensors allocated after its baseline. memplan assumes one node whose GPUs reach each
// other (NVLink for more than two: otherwise vLLM disables it) and no --disable-custom-all-reduce; the driver's
// rounding of each cudaMalloc is not counted. The 0.6.5 to 0.7 releases allocated the same two buffers and
// rank_data (PR #10030, November 2024, made CustomAllreduce.__init__ call create_shared_buffer, a cudaMalloc
// through CudaRTLibrary, for meta and buffer; rank_data = torch.empty(8 x 1024 x 1024) beside them) with the
// vllm::Signal of PR #8558 (September 2024: self_counter and two peer_counter arrays of uint32 flags; the
// 36-block size and uint32 flags read in copies of that struct, index ids 16597117652 and 67336106968, not at a tag).
inline constexpr uint64_t kVllmCustomAllReduceMaxSize = 8192 * 1024;
inline constexpr uint64_t kVllmCustomAllReduceMetaSize = 36 * 8 * 4 + 2 * 36 * 8 * 4;
inline constexpr uint64_t kVllmCustomAllReduceRankData = 8 * 1024 * 1024;
uint64_t vllm_custom_all_reduce_bytes(int tp, bool rank_data = false);

// An AMD GPU by the compute capability PyTorch reports for it on ROCm (gcnArchName gfx942 as 9.4, gfx950 as 9.5: the
// MI300X's torch.cuda.get_device_capability is (9, 4), report/gpu_catalog.json), where vLLM's quantized MoE methods
// take ROCm's paths (AITER, fnuz scales, other padding).
inline bool rocm_compute_capability(int capability) { return capability == 94 || capability == 95; }

// vLLM's settings for `vllm serve` on a GPU (vllm/engine/arg_utils.py, EngineArgs and _set_default_args): the
// defaults of the release's rule (VllmRule.default_gpu_memory_utilization, vllm_step_defaults) or what was given.
struct VllmEngineSettings {
  double gpu_memory_utilization = 0;
  int64_t max_model_len = 0;           // tokens of one request (prompt and generated)
  int64_t max_num_batched_tokens = 0;  // tokens of one scheduler step: the profile run's
  int64_t max_num_seqs = 0;            // requests of one step
  int64_t block_size = kDefaultBlockSize;
};

// How vLLM was started, which picks EngineArgs' default step (vllm/usage/usage_lib.py UsageContext, passed to
// create_engine_config): Serve, `vllm serve` (OPENAI_API_SERVER: vllm/entrypoints/cli/serve.py); LlmClass, the Python
// `LLM(...)` class (LLM_CLASS: vllm/entrypoints/llm.py); Engine, AsyncLLM or LLMEngine.from_engine_args
// (ENGINE_CONTEXT, their default; `vllm run-batch`'s OPENAI_BATCH_RUNNER alike).
enum class VllmUsageContext { Serve, LlmClass, Engine };

// vLLM's --performance-mode (vllm/config/vllm.py PerformanceMode; PR #34936, merged 2026-02-25, before 0.17.0's
// release of 2026-03-07, read at v0.17.1rc0, v0.18.0 and main of 2026-08-20): Throughput doubles each default step
// value not given, before the clamp (EngineArgs._set_default_max_num_seqs_and_batched_tokens_args); Interactivity
// changes only the CUDA-graph capture sizes (captured after sizing, or measured: --cuda-graph-memory).
enum class VllmPerformanceMode { Balanced, Interactivity, Throughput };

// The default step for one scheduler step where neither value is given (vllm/engine/arg_utils.py: EngineArgs.
// _set_default_args at v0.11.0, get_batch_defaults and _set_default_max_num_seqs_and_batched_tokens_args from
// v0.11.2; the same tables read at v0.11.0 to v0.13.0 and in the 0.16, 0.17, 0.18, 0.20, 0.23, 0.24 and 0.25.1
// trees). Tokens / requests:
//                                            Serve          LlmClass       Engine
//   at least 160 GiB (from 0.28, PR #51726)  16384 / 1024   16384 / 1024   2048 / 128
//   at least 70 GiB and not an A100          8192 / 1024    16384 / 1024   2048 / 128
//   any other GPU                            2048 / 256     8192 / 256     2048 / 128
// Engine's are SchedulerConfig's DEFAULT_MAX_NUM_BATCHED_TOKENS and DEFAULT_MAX_NUM_SEQS (vllm/config/scheduler.py):
// the tables hold no other context's entry. PR #51726 ("Update default max_num_batched_tokens from 8192 to 16384",
// merged 2026-08-11, read in a tree of main after it; its release 0.28.0 second-hand: tagged 2026-08-24, 0.27.0
// before the merge) tests no device name. vLLM compares NVML's total (NvmlCudaPlatform.get_device_total_memory);
// `device_memory` is torch's, a few hundred MiB under it, and no catalog GPU lies that near either line.
// `device_name`: the GPU's name ("" when not known). vllm_engine_settings (report/serve_vllm.cc) clamps them.
struct VllmStepDefaults {
  int64_t max_num_batched_tokens = 0, max_num_seqs = 0;
};
VllmStepDefaults vllm_step_defaults(uint64_t device_memory, const std::string& device_name,
                                    VllmUsageContext context = VllmUsageContext::Serve,
                                    bool largest_tier = false);

// vLLM's --dtype auto (vllm/config/model.py _get_and_verify_dtype and _resolve_auto_dtype at 0052a5b, with
// CudaPlatformBase.supported_dtypes in vllm/platforms/cuda.py at 002db49: bfloat16, float16, float32 on compute
// capability 8.0 and up, float16 and float32 below):
// a float32 checkpoint is served in the platform's first supported type (bfloat16 from Ampere, else float16); a
// stored type the GPU supports is kept; bfloat16 below Ampere falls back to that first type. Model types whose
// float16 is unstable (_FLOAT16_NOT_SUPPORTED_MODELS: gemma2, gemma3, gemma3_text, glm4, plamo2) are never served
// in float16.
DType vllm_auto_dtype(DType stored, int cuda_arch_major, const std::string& model_type);

// vLLM's LoRA serving stacks (--enable-lora; vllm/lora/layers/base_linear.py BaseLinearLayerWithLoRA.
// create_lora_weights at 1ace43e): every linear layer vLLM wraps (for a Llama-family decoder: q, k, v, o, gate,
// up and down of each block; not the LM head unless an adapter targets it) holds, per output slice,
// lora_a [max_loras, 1, max_lora_rank, in] and lora_b [max_loras, 1, out, max_lora_rank] in the model's type, with
// in and out one tensor-parallel rank's (a column-parallel layer's out and a row-parallel one's in split). They are
// allocated while the model loads (GPUModelRunner.load_model, load_lora_model), so vLLM counts them as weights;
// max_lora_rank and max_loras size them, not the adapters' ranks. The dummy LoRAs of the profile run are not
// active (profile_run's _dummy_run, activate_lora False): no LoRA activation is profiled.
// `g`: the step's graph; `lm_head`: its head's node (not adapted); `tp`, `replicate_kv_heads`: as the step's.
uint64_t vllm_lora_stacks_bytes(const Graph& g, const std::string& lm_head, int tp, bool replicate_kv_heads,
                                int64_t max_loras, int64_t max_lora_rank, DType dtype);

// vLLM's rotary cache (vllm/model_executor/layers/rotary_embedding/base.py, RotaryEmbeddingBase.__init__ and
// _compute_cos_sin_cache at 072d10a): a buffer cos_sin_cache [max_position_embeddings, rotary_dim] in the model's
// type, made when the model is built (so in the weights term) and shared by the layers of one rope configuration
// (get_rope memoises it). The exported graph computes cos and sin per step instead. Llama-3-style rope scaling
// keeps max_position_embeddings rows.
uint64_t vllm_rotary_cache_bytes(int64_t max_positions, int64_t rotary_dim, DType dtype);

// vLLM V0's step (vllm/config.py at c0c2335, SchedulerConfig.__init__ and _verify_args; EngineArgs.max_num_seqs
// 256): without chunked prefill, max_num_batched_tokens = max(max_model_len, 2048) unless given, and vLLM refuses
// a step shorter than max_model_len or than max_num_seqs. vLLM's V0 could turn chunked prefill on by default for a
// max_model_len over 32,768 tokens (EngineArgs' use_long_context), with another default step memplan has not read
// at a named commit: then the default is refused (give --max-batched-tokens). Explicit values are checked as
// SchedulerConfig checks them (a step shorter than max_model_len needs chunked prefill, not modelled). Throws
// InputError naming the value.
inline constexpr int64_t kVllmV0DefaultMaxNumSeqs = 256;
inline constexpr int64_t kVllmV0LongContext = 32768;
VllmStepDefaults vllm_v0_step(int64_t max_model_len, int64_t max_batched_tokens, int64_t max_num_seqs,
                              const std::string& version);

// The profile run's dummy requests: min(max_num_seqs, max_num_batched_tokens) (GPUModelRunner._dummy_run); the
// sampler warms up on one row per request.
int64_t vllm_profile_requests(const VllmEngineSettings& s);

// The sampler's warm-up (GPUModelRunner._dummy_sampler_run with the SamplingMetadata it builds: temperature
// 0.5, top-p 0.9, top-k vocab - 1, no logprobs, no penalties), on `requests` rows of `vocab` logits, in the
// model's `dtype`, PyTorch's sampler path (TopKTopPSampler.forward_native, the default without
// VLLM_USE_FLASHINFER_SAMPLER). At its peak, in apply_top_k_top_p's scatter, are alive: the hidden rows of the
// last positions (hidden_states[logit_indices], a copy) and their rand_like, [requests, hidden], and the logits
// [requests, logits_width] in the model's type d (the head computes the padded vocabulary, cost_models/
// vllm_weights.h, and LogitsProcessor._get_logits slices it to the vocabulary as a view: logits_processor.py at
// 00db1f1), and over [requests, vocab] the float32 logits (Sampler.forward's logits.to(torch.float32): none when d
// is float32, the head's slice itself), the sort's values (float32) and indices (int64), the top-k and top-p masks
// (bool), the softmax of the sorted values (float32, cumsum in place) and the scatter's output (float32):
//   d x requests x logits_width + (4 [d not float32] + 4 + 8 + 1 + 4 + 1 + 4) x requests x vocab
//     + 2 x d x requests x hidden bytes.
// The sort's own scratch inside PyTorch (cub's segmented radix sort) is not counted.
uint64_t vllm_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden, DType dtype);

// The same warm-up through FlashInfer (VllmRule.flashinfer_sampler with FlashInfer importable): forward_cuda calls
// flashinfer_sample, whose top-k and top-p branch is flashinfer.sampling.top_k_top_p_sampling_from_logits
// (topk_topp_sampler.py at v0.11.0; the dummy run passes no generators, which would send it to forward_native).
// FlashInfer's filter_apply_order "top_k_first" makes masked_logits = top_k_mask_logits(logits, top_k) and
// probs = torch.softmax(masked_logits) (flashinfer/sampling.py), then samples int32 [requests] from probs. At the
// softmax are alive, beside the sort path's hidden rows, their rand_like and the logits in d, the float32 logits
// (none when d is float32), masked_logits and probs over [requests, vocab]:
//   d x requests x (logits_width + 2 x hidden) + (4 [d not float32] + 4 + 4) x requests x vocab bytes.
// Top-k's own scratch inside FlashInfer's kernel is not counted.
uint64_t vllm_flashinfer_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden,
                                            DType dtype);

// The same warm-up from 0.17 (VllmRule::triton_top_k_top_p): apply_top_k_top_p (vllm/v1/sample/ops/
// topk_topp_sampler.py) sends `HAS_TRITON and logits.shape[0] >= 8` rows to apply_top_k_top_p_triton
// (topk_topp_triton.py, PR #33538), which masks the float32 logits in place with min(multiprocessors, requests)
// programs over a float32 scratch buffer [buffer rows, vocab] (vllm_triton_sampler_buffer_rows) that it keeps in
// _TRITON_BUFFER_CACHE for good, and a copy of top-k as int32 [requests]. forward_native then takes their softmax
// (float32) and random_sample's exponential noise q = torch.empty_like(probs), divided in place and reduced by
// argmax. Alive at the argmax: the hidden rows and their rand_like [requests, hidden] and the logits [requests,
// logits_width] in d, and over [requests, vocab] the float32 logits (none when d is float32: Sampler.forward's
// logits.to(torch.float32) returns the head's slice), the softmax and the noise, with the buffer:
//   d x requests x (logits_width + 2 x hidden) + (4 [d not float32] + 4 + 4) x requests x vocab
//     + 4 x buffer rows x vocab bytes.
// From 0.21 vLLM's default is FlashInfer's sampler (PR #40376) on CUDA; its top_k_top_p_sampling_from_logits holds
// top_k_mask_logits' output and its softmax beside the float32 logits, the same three float32 tensors (the top-k
// kernel's own workspace is not counted), and PR #41375 then warms forward_native up with a seeded generator: the
// Triton path, buffer included. Fewer than 8 rows take the sort (vllm_sampler_peak_bytes); PR #54651 (September
// 2026) sends them to Triton too, in a release not placed here: the sort counted is the larger. The lookup tables
// the kernel caches (two float32 vectors of a few hundred entries) are not counted.
inline constexpr int64_t kVllmTritonTopKTopPMinRows = 8;
uint64_t vllm_triton_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden,
                                        DType dtype, int multiprocessors);
// The rows of apply_top_k_top_p_triton's cached buffer: min(next_power_of_2(programs), multiprocessors) with
// programs = min(multiprocessors, requests) (num_compute_units of the device: its multiprocessor count). With
// `multiprocessors` 0 (not known: serve --memory, or a --catalog GPU without it) the largest it can be for
// `requests` rows on any GPU, next_power_of_2(requests).
int64_t vllm_triton_sampler_buffer_rows(int64_t requests, int multiprocessors);

// Model Runner V2's sampler warm-up (VllmModelRunner V2; vllm/v1/worker/gpu/sample/sampler.py at 0120ce5,
// Sampler.sample, and gumbel.py at 03f97cc, gumbel_sample) on `requests` rows: alive at its peak, after
// gumbel_sample's kernel, are the sampled hidden rows [requests, hidden] in d (profile_run's sample_hidden_states),
// the logits [requests, logits_width] in d (compute_logits; the vocabulary a view of the padded width), their
// float32 copy torch.empty_like(logits, dtype=torch.float32) [requests, vocab] (empty_like of the sliced view is
// dense), temperature applied in place, and gumbel_sample's local_argmax (int64) and local_max (float32)
// [requests, cdiv(vocab, 1024)], then local_max.argmax [requests, 1] and the gathered tokens [requests] (int64):
//   d x requests x (hidden + logits_width) + 4 x requests x vocab + 12 x requests x cdiv(vocab, 1024) + 16 x requests.
uint64_t vllm_v2_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden, DType dtype);

// V0's sampler on the profile run's `requests` rows (vllm/model_executor/layers/sampler.py at 467f7b5,
// Sampler.forward; sampling_metadata.py SamplingTensors.from_sampling_metadata), with profile_run's
// SamplingParams(top_p=0.99, top_k=vocab - 1), temperature 1 (random sampling), no penalties, no logprobs. The
// logits [requests, logits_width] in the model's type d stay referenced by execute_model (LogitsProcessor.forward
// at 307e086 pruned the hidden states to those rows, index_select, and slices the padded width to the vocabulary
// as a view; the pruned rows are freed on return). Then over [requests, vocab]: logits.to(torch.float) (a new
// float32 tensor unless d is float32, when it is the same tensor), divided in place by the temperatures;
// _apply_top_k_top_p: sort's values (float32) and indices (int64), the top-k mask (bool, the row's threshold
// gathered [requests, 1]), probs_sort = softmax (float32), probs_sum = cumsum (float32, not in place), the top-p
// mask (bool), and the scatter's output torch.empty_like (float32), all alive at the scatter:
//   d x requests x logits_width + (4 [d not float32] + 4 + 8 + 1 + 4 + 4 + 1 + 4) x requests x vocab bytes.
// After it the function's temporaries are freed: softmax and log_softmax (float32 each), _multinomial's
// probs[sample_indices] copy and q = empty_like (float32 each) hold 20 x requests x vocab beside the logits, less.
// get_logprobs computes nothing with no logprobs requested. The per-row sampling tensors ([requests] each) and the
// sort's scratch inside PyTorch are not counted.
uint64_t vllm_v0_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, DType dtype);

// The profile run's peak allocated bytes: the larger of the forward's (weights included, the head's logits over
// every token not: the engine computes none) and the sampler's warm-up on top of what the forward left allocated:
// `kept` (the weights and the cuBLAS workspace, which PyTorch keeps once allocated: cost_models/runtime_constants.h)
// and the forward's hidden states, which profile_run still references while the sampler runs.
uint64_t vllm_profile_peak_allocated(uint64_t forward_peak_allocated, uint64_t kept, uint64_t hidden_states_bytes,
                                     uint64_t sampler_peak);

// determine_available_memory's terms, bytes. `profile_peak_allocated` is the profile run's peak allocated bytes,
// weights included (they are allocated when it starts).
struct VllmMemory {
  uint64_t total = 0;             // the GPU's memory, as cudaMemGetInfo reports its total
  uint64_t requested = 0;         // floor(total x gpu_memory_utilization)
  uint64_t weights = 0;           // model_memory_usage: what loading the weights allocated
  uint64_t activation_peak = 0;   // torch_peak_increase: the profile run's peak above the weights
  uint64_t non_torch = 0;         // non_torch_increase: memory outside PyTorch's allocator since the snapshot
  uint64_t cuda_graphs = 0;       // the CUDA graphs' estimate taken off (0.20 on; --cuda-graph-memory)
  int64_t available = 0;          // requested - the four; <= 0: vLLM refuses to start
};
// From 0.20 (VllmRule.cudagraph_estimate) Worker.determine_available_memory subtracts `cuda_graphs`, the estimate
// profile_cudagraph_memory measures, after the non-KV memory (gpu_worker.py at the 0.20 branch's 132765e35:
// requested_memory - non_kv_cache_memory - cudagraph_memory_estimate_applied).
VllmMemory vllm_available_memory(uint64_t total, double gpu_memory_utilization, uint64_t weights,
                                 uint64_t profile_peak_allocated, uint64_t non_torch, uint64_t cuda_graphs = 0);

// The window of a model whose attention layers all slide over the same window (Mistral-7B-v0.1: 4096 on 32 layers):
// every layer's KVCacheSpec is a SlidingWindowSpec (vllm/model_executor/layers/attention Attention.get_kv_cache_spec:
// a SlidingWindowSpec when the layer's sliding_window is set), one spec for all, so one KV cache group of every
// layer (vllm/v1/core/kv_cache_utils.py get_kv_cache_groups, is_kv_cache_spec_uniform, at 001cabc1; the 0.10-era
// _get_kv_cache_config_uniform_type at bbf906a8 alike): the blocks, their size and the logged token count are
// full attention's; what changes is what one request holds at most, SlidingWindowSpec.max_memory_usage_bytes
// (vllm/v1/kv_cache_interface.py at 001cabc1):
//   (cdiv(min(sliding_window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1) pages
// (the window's last sliding_window - 1 tokens and a chunked prefill's new ones, one block more since the window
// need not start on a block's edge), where full attention's is cdiv(max_model_len, block_size) pages. `window` 0:
// full attention.
struct VllmSlidingWindow {
  int64_t window = 0;
  int64_t max_num_batched_tokens = 0;
};
// The blocks one request of `max_model_len` tokens holds at most: get_max_concurrency_for_kv_cache_config's
// num_block_per_request = cdiv(layers x max_memory_usage_bytes, page_size x layers) (kv_cache_utils.py at 001cabc1
// and bbf906a8), for one group of uniform layers the spec's max_memory_usage_bytes / page_size.
int64_t vllm_blocks_per_request(const PagedKvCache& cache, int64_t max_model_len, const VllmSlidingWindow& sliding = {});

// The cache the available memory holds, as vLLM logs it, and whether vLLM starts: check_enough_kv_cache_memory
// refuses when nothing is available, or when one request of max_model_len does not fit (then it names the
// longest that would: estimate_max_model_len, a binary search over the lengths whose
// max_memory_usage_bytes fits). With `sliding`, the layers' SlidingWindowSpec (above).
struct VllmKvCapacity {
  int64_t num_blocks = 0;
  int64_t tokens = 0;                 // "GPU KV cache size: N tokens"
  int64_t blocks_per_request = 0;     // vllm_blocks_per_request: cdiv(max_model_len, block_size) for full attention
  double max_concurrency = 0;         // "Maximum concurrency for L tokens per request: X"
  bool starts = false;
  uint64_t start_check_bytes = 0;     // what vLLM's start check asks for one request of max_model_len
  int64_t estimated_max_model_len = 0;  // when it does not start: the longest request that fits (0: none)
  std::string refusal;                // vLLM's reason, when it does not start
};
VllmKvCapacity vllm_kv_capacity(int64_t available, const PagedKvCache& cache, int64_t max_model_len,
                                const VllmSlidingWindow& sliding = {});

// One tensor-parallel rank's bytes of one more cached token: `bytes_per_token` (every present output's, the whole
// model's) times the share of the present outputs' elements that rank 0 holds in the graph's tensor-parallel plan
// (cost_models/tensor_parallel.h, KV heads replicated when tp exceeds them, as vLLM's QKVParallelLinear does): the
// same plan that shards the weights decides the cache. `bytes_per_token` at tp 1.
uint64_t vllm_kv_bytes_per_rank(const Graph& g, const std::vector<std::string>& presents, uint64_t bytes_per_token,
                                int tp);

// KV heads one tensor-parallel rank holds: heads / tp, or one head replicated on tp / heads ranks when tp
// exceeds them (vllm/config ModelConfig.get_num_kv_heads: max(1, total // tp)). Throws InputError when neither
// divides the other (vLLM's ModelConfig.verify_with_parallel_config refuses such a tp).
int64_t vllm_kv_heads_per_rank(int64_t kv_heads, int64_t tp, const std::string& model);

}  // namespace memplan
