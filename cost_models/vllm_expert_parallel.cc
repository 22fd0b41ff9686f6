#include "cost_models/vllm_expert_parallel.h"

#include <stdexcept>

#include "onnx_import/checked.h"

namespace memplan {

VllmExpertParallel vllm_expert_parallel(int64_t experts, int tp) {
  if (experts <= 0 || tp <= 0) throw std::logic_error("vllm_expert_parallel: experts and tp must be positive");
  VllmExpertParallel p;
  p.ep_size = tp;  // FusedMoEParallelConfig.make: ep_size = dp x tp, dp 1
  // determine_expert_map: base + 1 on the first E % ep_size ranks (rank 0 among them when there is a remainder).
  const int64_t base = experts / tp, remainder = experts % tp;
  p.local_experts = remainder > 0 ? base + 1 : base;
  // torch.full((global_num_experts,), -1, dtype=torch.int32), one per layer, only when ep_size > 1.
  p.expert_map_bytes = tp > 1 ? checked_mul(static_cast<uint64_t>(experts), 4, "expert map bytes") : 0;
  return p;
}

}  // namespace memplan
