// --fsdp-cpu-offload: what FSDP1's CPUOffload(offload_params=True) and FSDP2's CPUOffloadPolicy share (the host
// line, the host-to-device copy before an all-gather), and FSDP1's own steps. FSDP2's rules are training_fsdp2.cc's.
// FSDP1 (--shard fsdp, FullyShardedDataParallel(..., cpu_offload=CPUOffload(offload_params=True))), read in
// torch/distributed/fsdp/ at pytorch 01caf79e (_flat_param.py) and 3ade90a6 (_runtime_utils.py), both 2.x:
//  - _flat_param.py FlatParamHandle.init_flat_param_attributes: the sharded flat parameter (_local_shard, the padded
//    shard of training_fsdp.cc) stays on the CPU, pinned; `_cpu_grad = torch.zeros_like(_local_shard,
//    device=cpu).pin_memory()` is made for every handle, trained or not: a second shard-sized host tensor. The
//    optimizer is built over the CPU parameters (the flat shard, or with use_orig_params=True the views of it):
//    its states are on the host, sized as without offload; no optimizer step runs on the GPU.
//  - FlatParamHandle.pre_unshard (no mixed precision): `flat_param_to(self.device, non_blocking=True)`, "a new tensor
//    distinct from any attributes": a GPU copy of the padded shard, all-gathered (_all_gather_flat_param) into the
//    padded unsharded flat parameter; _use_unsharded_flat_param then points flat_param.data at the unsharded one, so
//    the copy, referenced by nothing, is freed after the all-gather. _runtime_utils.py _unshard runs the pre-unshard
//    and the unshard of one handle before the next: the backward prefetch (_prefetch_handles) copies and gathers the
//    next unit after the current one's copy is gone. reshard points flat_param.data back at the CPU _local_shard.
//  - _runtime_utils.py _post_backward_hook: the unsharded grad padded and reduce-scattered into new_sharded_grad
//    (on the GPU, as without offload), which becomes flat_param._saved_grad_shard; with offload_params
//    `flat_param._cpu_grad.copy_(grad_to_offload.detach(), non_blocking=True)` (grad_to_offload is
//    _saved_grad_shard). The GPU shard stays referenced by _saved_grad_shard until _post_backward_final_callback ->
//    _finalize_params -> FlatParamHandle.prepare_gradient_for_optim, which sets `flat_param.grad = _cpu_grad` and
//    deletes _saved_grad_shard: every trained unit's GPU grad shard lives from its reduce-scatter to the end of
//    backward, none after it.
//  - Gradient accumulation outside no_sync() is wrong under CPU offload (FullyShardedDataParallel's docstring:
//    "FSDP will use the newly-reduced gradient instead of accumulating with any existing gradient";
//    prepare_gradient_for_backward's TODO): refused (report/option_checks.cc). With MixedPrecision the copy is the
//    _mp_shard's source (training_fsdp_mp.cc).
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

// The host line (TrainingResult::fsdp_offload_host_bytes) for one unit: its shards on the host, the grad shards on
// the host (FSDP1's _cpu_grad, FSDP2's sharded_param.grad) and the optimizer's states over the host shards.
uint64_t TrainingStep::fsdp_offload_host_bytes(uint64_t shards, uint64_t grads, uint64_t state) const {
  const uint64_t states = checked_mul(state, static_cast<uint64_t>(states_per_param()), "optimizer states");
  return checked_add(checked_add(shards, grads, "FSDP CPU offload"), states, "FSDP CPU offload");
}

// The step copying a unit's host shards to the GPU before its all-gather (FSDP1 pre_unshard's flat_param_to,
// FSDP2 all_gather_inputs' .to(device)), pushed now, before the all-gather that reads the copy; `transient`: a
// buffer the copy makes and frees in the same step (FSDP2's stored-dtype copy under a policy).
int32_t TrainingStep::fsdp_offload_h2d(const std::string& step, const std::string& copy, uint64_t bytes, Phase phase,
                                       const std::string& transient, uint64_t transient_bytes) {
  Step h2d{step, "_to_copy", phase, {}, {}, 0};
  const int32_t b = writer_.new_buffer(copy, bytes, Category::Weight);
  h2d.writes.push_back(b);
  if (transient_bytes > 0) h2d.writes.push_back(writer_.new_buffer(transient, transient_bytes, Category::Weight));
  program().steps.push_back(std::move(h2d));
  return b;
}

// FSDP1: the reduce-scattered grad shard, written by `rs`, kept on the GPU as _saved_grad_shard and copied to the
// host's _cpu_grad right after.
void TrainingStep::fsdp_offload_grad(int32_t u, Step& rs) {
  const std::string& name = context_.units.names[u];
  const int32_t shard = writer_.new_buffer("fsdp_grad_shard:" + name, unit_grad_shard_bytes_[u], Category::Gradient);
  rs.writes.push_back(shard);
  program().steps.push_back(std::move(rs));
  program().steps.push_back({"fsdp_grad_offload:" + name, "_to_copy", Phase::Backward, {shard}, {}, 0});
  fsdp_offload_grad_shards_.push_back(shard);
}

// FSDP1: _post_backward_final_callback's _finalize_params deletes every _saved_grad_shard.
void TrainingStep::fsdp_post_backward_final() {
  if (fsdp_offload_grad_shards_.empty()) return;
  program().steps.push_back({"fsdp_post_backward_final", "free", Phase::Backward, fsdp_offload_grad_shards_, {}, 0});
  fsdp_offload_grad_shards_.clear();
}

}  // namespace memplan
