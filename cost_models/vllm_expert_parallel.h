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
// Not modelled: --data-parallel-size above 1 (the all2all manager's buffers), EPLB (--enable-eplb: redundant
// experts and EplbState's load-recording tensors), the round_robin placement (linear is vLLM's default).
#pragma once

#include <cstdint>

namespace memplan {

struct VllmExpertParallel {
  int ep_size = 1;               // tp x dp, dp 1
  int64_t local_experts = 0;     // rank 0's: ceil(E / ep_size)
  uint64_t expert_map_bytes = 0; // one layer's expert_map, int32 [E]
};

// `experts` E of one FusedMoE layer split over a tensor-parallel group of `tp` GPUs with expert parallelism, dp 1.
VllmExpertParallel vllm_expert_parallel(int64_t experts, int tp);

}  // namespace memplan
