#include "cost_models/vllm_expert_parallel.h"

#include <stdexcept>

#include "onnx_import/checked.h"

namespace memplan {

VllmExpertParallel vllm_expert_parallel(int64_t experts, int ranks) {
  if (experts <= 0 || ranks <= 0) throw std::logic_error("vllm_expert_parallel: experts and ranks must be positive");
  VllmExpertParallel p;
  p.ep_size = ranks;  // FusedMoEParallelConfig.make: ep_size = dp x tp
  // determine_expert_map: base + 1 on the first E % ep_size ranks (rank 0 among them when there is a remainder).
  const int64_t base = experts / ranks, remainder = experts % ranks;
  p.local_experts = remainder > 0 ? base + 1 : base;
  // torch.full((global_num_experts,), -1, dtype=torch.int32), one per layer, only when ep_size > 1.
  p.expert_map_bytes = ranks > 1 ? checked_mul(static_cast<uint64_t>(experts), 4, "expert map bytes") : 0;
  return p;
}

uint64_t vllm_dp_dispatch_bytes(int64_t tokens_per_rank, int dp, int64_t hidden, int64_t experts, uint64_t bytes) {
  if (tokens_per_rank <= 0 || dp <= 0 || hidden <= 0 || experts <= 0)
    throw std::logic_error("vllm_dp_dispatch_bytes: sizes must be positive");
  if (dp == 1) return 0;
  const uint64_t rows = checked_mul(static_cast<uint64_t>(tokens_per_rank), static_cast<uint64_t>(dp), "dispatch");
  return checked_mul(checked_mul(rows, static_cast<uint64_t>(hidden + experts), "dispatch"), bytes, "dispatch");
}

}  // namespace memplan
