// vLLM's expert parallelism (--enable-expert-parallel) for a mixture of experts' FusedMoE layers, one data-parallel
// rank (vLLM's --data-parallel-size 1): what one GPU of the tensor-parallel group holds of the experts and how it
// runs them. Read in vLLM at:
//  - vllm/config/parallel.py at 840e797 (ParallelConfig): enable_expert_parallel, "Use expert parallelism instead
//    of tensor parallelism for MoE layers", default False; data_parallel_size 1 by default; enable_eplb needs it;
//  - vllm/model_executor/layers/fused_moe/config.py at 00c1c6a (FusedMoEParallelConfig.make): use_ep =
//    dp x pcp x tp > 1 and enable_expert_parallel; with EP the MoE's tp_size becomes 1 and ep_size the flattened
//    tp x dp (x pcp): at dp 1, ep_size = tp. use_all2all_kernels = dp_size > 1 and use_ep: at dp 1 no all-to-all;
//  - vllm/distributed/device_communicators/base_device_communicator.py at a12c734 (DeviceCommunicatorBase.__init__):
//    use_ep = data_parallel_size > 1, use_all2all = is_ep_communicator and use_ep; without it no all2all manager is
//    made (no buffer allocated) and dispatch / combine are the base class's no-ops: every rank of the group gets the
//    whole (replicated) token batch, runs its own experts, and the layer's all-reduce sums the ranks' outputs as it
//    does under tensor parallelism (the same [T, H] tensor);
//  - vllm/model_executor/layers/fused_moe/layer.py (FusedMoE.__init__, determine_expert_map; the balanced rule of
//    PR #21497, merged 2025-07-24, so in 0.10.1 and every later version: the version read is the one with
//    expert_placement_strategy): base = E // ep_size, remainder = E % ep_size, rank r holds base + 1 experts when
//    r < remainder, else base (rank 0 the most: ceil(E / ep_size)); expert_map = torch.full((E,), -1, int32) with
//    the local experts' indices, register_buffer'd (on the GPU with the weights); intermediate_size_per_partition =
//    intermediate_size // tp_size = I whole (tp_size 1); quant_method.create_weights(num_experts =
//    local_num_experts, ...): UnquantizedFusedMoEMethod's w13_weight [E_local, 2I, H] and w2_weight [E_local, H, I].
//    Before PR #21497 (layer.py at c439a13) the last rank took every remaining expert (E - (ep - 1) x base): the
//    0.8 series, refused by report/serve_vllm_moe.cc when ep does not divide E;
//  - fused_moe.py at 13cb3e4 (fused_experts_impl): N = w1.size(1) = 2I, so the caches are M x k x max(2I, H) and
//    M x k x I, the full width (a rank of tensor parallelism has I / tp); try_get_optimal_moe_config's E is
//    w2.size(0), the local experts (get_default_config: BLOCK_SIZE_M 16 when M <= E_local); moe_align_block_size
//    gets global_num_experts (its buffers sized by the global E) and expert_map with ignore_invalid_experts=True,
//    which the CUDA op applies in place (no expert_map[expert_ids] gather: that copy is made only when
//    ignore_invalid_experts is False, moe_align_block_size.py of the same series).
// Data parallelism (--data-parallel-size D > 1 with --enable-expert-parallel, "DP attention + EP experts"):
//  - FusedMoEParallelConfig.make (config.py at 00c1c6a): use_ep with dp_size > 1 flattens the group to ep_size =
//    dp x tp, so each rank holds determine_expert_map's share of E over D x T ranks (the rule above, unchanged);
//    attention, the dense layers and the router stay tensor-parallel over T inside each DP rank (replicated across
//    the D ranks): the graph's --tp plan;
//  - FusedMoE's naive dispatch/combine (layer.py, do_naive_dispatch_combine: dp_size > 1 and the quant method has
//    no modular all2all kernel, true for UnquantizedFusedMoEMethod and Fp8MoEMethod's Triton path) gathers every DP
//    rank's tokens before the experts: both the default backends allocate the gathered hidden states [sum(T_r), H]
//    and router logits [sum(T_r), E] in their input types: NaiveAll2AllManager.naive_multicast (all2all.py, the
//    "naive" backend, envs.py's earlier default os.getenv("VLLM_ALL2ALL_BACKEND", "naive"):
//    torch.empty((cu_tokens_across_dp_cpu[-1], x.size(1)))) and AgRsAll2AllManager.dispatch
//    (allgather_reducescatter, all2all.py at 0014300: dist_group.all_gatherv with sizes = dp_metadata's per-rank
//    tokens; the later default, "already the default" when PR #33728 removed naive in 2026-02). Which of the two a
//    given 0.11 to 0.20 release defaults to does not change the answer (the combine below). Neither manager allocates a buffer at
//    construction (no persistent non-torch memory beyond the DP/EP groups' NCCL communicators);
//  - the profile run (gpu_model_runner.py profile_run -> _dummy_run(max_num_tokens, is_profile=True), which pads
//    its tokens to the largest across DP with get_dp_padding and passes num_tokens_across_dp to the forward
//    context's DPMetadata): every DP rank profiles in lockstep (the dispatch's collectives need all of them), each
//    with max_num_batched_tokens, so the fused MoE kernel runs on D x max_num_batched_tokens tokens (chunked at
//    VLLM_FUSED_MOE_CHUNK_SIZE as before);
//  - the KV cache: each DP rank is its own engine core (vllm/v1/engine/core.py: DPEngineCoreProc, an EngineCoreProc
//    whose EngineCore.__init__ runs _initialize_kv_caches over its own --tp workers; it asserts model_config.is_moe,
//    a dense model's DP ranks being plain EngineCoreProc replicas), so every rank sizes its own cache by the per-GPU
//    rule (vllm_engine.h) and the total is D x one rank's;
//  - the combine after the kernel's intermediate caches are freed: naive all-reduces [sum(T_r), H] out of place and
//    keeps a slice of it, allgather_reducescatter reduce-scatters to [T, H]: both below the kernel's peak whenever
//    its caches exceed them (checked by the caller, which keeps the larger).
// Not modelled: the modular all2all kernels (pplx, deepep_high_throughput, deepep_low_latency, flashinfer: their
// own buffers), EPLB (--enable-eplb: redundant experts and EplbState's load-recording tensors), the round_robin
// placement (linear is vLLM's default), and the MoE at dp > 1 without expert parallelism (vLLM then splits each
// expert's width over dp x tp ranks).
#pragma once

#include <cstdint>

namespace memplan {

struct VllmExpertParallel {
  int ep_size = 1;               // tp x dp
  int64_t local_experts = 0;     // rank 0's: ceil(E / ep_size)
  uint64_t expert_map_bytes = 0; // one layer's expert_map, int32 [E]
};

// `experts` E of one FusedMoE layer split over the `ranks` = dp x tp GPUs of the expert-parallel group.
VllmExpertParallel vllm_expert_parallel(int64_t experts, int ranks);

// The naive dispatch at --data-parallel-size `dp` > 1: the gathered hidden states [dp x tokens, hidden] and router
// logits [dp x tokens, experts], `bytes` an element each (0 at dp 1: no dispatch).
uint64_t vllm_dp_dispatch_bytes(int64_t tokens_per_rank, int dp, int64_t hidden, int64_t experts, uint64_t bytes);

}  // namespace memplan
