// --ep N in a training step. The graph is already rank 0's (onnx_import/hf_moe_grouped.h, hf_moe_ep.cc): E/N
// experts' parameters, the all-to-all buffers, the rows rank 0's experts receive. So the parameters, their grads
// and optimizer states are E/N experts' wherever the step counts them, and the activations are rank 0's; what is
// left to the step is how FSDP2 shards the experts' slice.
// torchtitan v0.2.2 (pytorch/torchtitan at 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce), models/llama4/infra/
// parallelize.py apply_fsdp (deepseek_v3's and qwen3's parallelize call the same): the routed experts get their
// own fully_shard over edp_mesh, whose efsdp dimension is dp_shard / ep (distributed/parallel_dims.py
// ParallelDims.build_mesh: efsdp = fsdp x tp / (etp x ep), tp = etp = 1 here): an expert's [E/N, ...] slice is
// chunked on dim 0 over gpus / N ranks, while every other parameter is over all the gpus. When efsdp x ep exceeds
// the experts, apply_fsdp shards them on dim 1 instead (shard_placement_fn Shard(1)): refused here, not modelled.
// The experts' group is counted inside its block's unit (gathered and freed with the block), where torchtitan
// gathers it as its own group when the experts run: a peak within the block's gathered parameters either way.
#include <string>

#include "cost_models/graph_facts.h"
#include "cost_models/training_step.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

// A grouped experts' parameter: the stacked weight an aten::_grouped_mm reads as its groups (grouped_mm_experts,
// the rule the tensor-parallel plan and find_moe_blocks use), directly or through its Transpose.
bool is_grouped_expert(const Graph& g, int32_t p) {
  for (int32_t c : g.tensors[p].consumers) {
    const Node& n = g.nodes[c];
    if (grouped_mm_experts(g, n) == p) return true;
    if (n.op_type != "Transpose" || n.outputs.empty() || n.outputs[0] < 0) continue;
    for (int32_t r : g.tensors[n.outputs[0]].consumers)
      if (grouped_mm_experts(g, g.nodes[r]) == p) return true;
  }
  return false;
}

}  // namespace

std::string expert_parallel_note(const TrainingOptions& o) {
  const std::string n = std::to_string(o.expert_parallel);
  return "Expert parallelism (--ep " + n + ", torchtitan's ExpertParallel): the figures are rank 0's, the busiest "
         "(its experts receive the most rows under the routing): 1/" + n + " of each layer's experts' parameters, "
         "grads and optimizer states; the all-to-all send and receive buffers, the rows permuted and padded to 8 per "
         "expert (_permute) and scattered back (_unpermute). " +
         (o.shard == Sharding::Fsdp2 && o.gpus / o.expert_parallel > 0
              ? "FSDP2 shards each expert slice over " + std::to_string(o.gpus / o.expert_parallel) +
                    " GPUs (efsdp = --gpus / --ep), counted in its block's group. "
              : std::string()) +
         "Not counted: NCCL's send/recv buffers of the all-to-all, the split sizes' host copies.";
}

uint64_t TrainingStep::fsdp2_ways(int32_t p, uint64_t rows) const {
  const uint64_t gpus = static_cast<uint64_t>(options_.gpus);
  const uint64_t ep = static_cast<uint64_t>(options_.expert_parallel);
  if (ep <= 1 || !is_grouped_expert(graph_, p)) return gpus;
  const uint64_t ways = gpus / ep;
  if (ways > rows)
    throw InputError("--gpus " + std::to_string(gpus) + " with --ep " + std::to_string(ep) + ": FSDP2 over the " +
                     std::to_string(ways) + " copies of each rank's " + std::to_string(rows) + " experts shards them " +
                     "on dim 1 (torchtitan's apply_fsdp, Shard(1) when efsdp x ep exceeds the experts): not modelled");
  return ways;
}

}  // namespace memplan
