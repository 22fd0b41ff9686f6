// DeepSpeed ZeRO-3 with offload_optimizer cpu: DeepSpeedZeroOptimizer_Stage3 with self.device the host. The float32
// sub-groups, their grads, the optimizer states (DeepSpeedCPUAdam) and grad_partitions_flat_buffer live there
// (zero3_host_bytes, on the report's host line as ZeRO-1/2's offload is); the GPU keeps the bit16 partitions, the
// persistent and gathered parameters and the IPG bucket, and the step runs on the host (_optimizer_step; the norm
// from the per-parameter norms partition_grads recorded, complete_grad_norm_calculation_for_cpu_offload; the bit16
// partitions refreshed by a host-to-device copy_, _reassign_or_swap_out_partitioned_parameters). Source: DeepSpeed at
// edaa7221267243c7be7fb49c5d5f5c4fb97b4641, deepspeed/runtime/zero/stage3.py. docs/cost-models.md, "DeepSpeed
// ZeRO-3", Offload.
#include "cost_models/deepspeed_zero3.h"
#include "cost_models/training_step.h"

namespace memplan {

// partition_grads under offload, for parameter p of the bucket just reduced (the reduce-scatter's flat, `flat`, -1
// when the one grad was reduced in place, alive throughout; p's own `grad`, -1 when it was a view of the bucket, alive
// until its turn ends with param.grad = None): the partition copied to the host, then back to the GPU
// (grad_buffer.to), its float64 norm chunk and its float32 cast (zero3_offload_transients), placed after the reduce.
void TrainingStep::ds3_offload_copy(int32_t p, int32_t flat, int32_t grad) {
  const Zero3OffloadTransients t =
      zero3_offload_transients(zero3_partition_numel(static_cast<uint64_t>(graph_.tensors[p].elements()), options_.gpus),
                               ds_grad_element_bytes_);
  const std::string& name = graph_.tensors[p].name;
  auto step = [&](const std::string& function, const char* op, uint64_t bytes, int32_t reads) {
    Step st{"deepspeed:" + function + ":" + name, op, Phase::Backward, {}, {}, 0};
    if (flat >= 0) st.reads.push_back(flat);
    if (grad >= 0) st.reads.push_back(grad);
    if (reads >= 0) st.reads.push_back(reads);
    for (int32_t b : ds_buckets_) st.reads.push_back(b);
    const int32_t b = bytes == 0 ? -1 : writer_.new_buffer("deepspeed:" + function + ":" + name, bytes, Category::Workspace);
    if (b >= 0) st.writes.push_back(b);
    ds_after_reduce_.push_back(std::move(st));
    return b;
  };
  const int32_t copy = step("partition_grads_to_gpu", "to", t.gpu_copy, -1);
  step("_constant_buffered_norm2", "norm", t.norm_double, copy);
  step("offload_fp32_grad", "to", t.fp32_cast, copy);
}

}  // namespace memplan
