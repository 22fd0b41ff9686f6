// DeepSpeed ZeRO-3 with offload_optimizer cpu: DeepSpeedZeroOptimizer_Stage3 with self.device the host. The float32
// sub-groups, their grads, the optimizer states (DeepSpeedCPUAdam) and grad_partitions_flat_buffer live there
// (zero3_host_bytes, on the report's host line as ZeRO-1/2's offload is); the GPU keeps the bit16 partitions, the
// persistent and gathered parameters and the IPG bucket, and the step runs on the host (_optimizer_step; the norm
// from the per-parameter norms partition_grads recorded, complete_grad_norm_calculation_for_cpu_offload; the bit16
// partitions refreshed by a host-to-device copy_, _reassign_or_swap_out_partitioned_parameters). Source: DeepSpeed at
// edaa7221267243c7be7fb49c5d5f5c4fb97b4641, deepspeed/runtime/zero/stage3.py. docs/cost-models.md, "DeepSpeed
// ZeRO-3", Offload.
// offload_param cpu: every parameter's partition (ds_tensor) lives in pinned host memory (partition_parameters.py
// Init._partition_param: `device = self.remote_device`, the offload_param device, `get_accelerator().pin_memory`;
// ds_persist is still False then, mark_persistent_parameters runs later in DeepSpeedZeRoOffload.__init__; stage3.py
// _create_fp16_partitions_with_defragmentation then moves the trainable ones into param_groups_fp16_flat_cpu_memory,
// pinned, sum of their partition numels per group: the same bytes). Each gather copies the partitions it sends to
// the GPU first (ds3_stage_partitions); the whole copies, the fetch/release rules, the prefetch and
// stage3_max_live_parameters / stage3_max_reuse_distance are the same as without it (they count elements, wherever
// the partitions live). The optimizer's _reassign_or_swap_out_partitioned_parameters copy_ writes the host partitions.
#include "cost_models/deepspeed_zero3.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

// Under offload_param a parameter has no GPU buffer until gathered, and the forward's read_inputs skips a tensor
// without one: the op's parameters are fetched here first (ds3_prepare_input, as read_inputs would have), then found
// by lookup as their gathered copies.
void TrainingStep::ds3_gather_inputs(int32_t i, Step& st, std::map<int32_t, int32_t>& effective) {
  for (int32_t t : context_.ops[i].inputs)
    if (ds3_param(t) && ds3_buffer(t) < 0) ds3_prepare_input(i, t, st, effective);
}

// The GPU copies of the host partitions one all_gather_coalesced makes (partition_parameters.py at the commit above):
// _all_gather_dtype, several parameters: `torch.cat([p.ds_tensor.to(current_device_name()).to(allgather_dtype) for p
// in params], out=partitions[rank_in_group])`: every parameter's partition copied to the GPU, all alive until the cat
// has run (the list), freed before the all-gather is waited on; _all_gather_sequential, one parameter:
// `param_ds_tensor.to(current_device_name())` passed to _dist_allgather_fn as its input (a prefetch's: the
// collective's stream may still read it after the launch; memplan frees it with the launch step). One buffer of the sum of
// the partitions in their type, written and freed by the gather step `st` (the flat and the whole copies alive with
// it). Without offload_param the partitions are on the GPU and `.to` returns each itself: the step only reads them.
void TrainingStep::ds3_stage_partitions(const std::vector<int32_t>& params, Step& st) {
  if (!ds3_offload_param()) {
    for (int32_t q : params) add_unique(st.reads, forward_buffer_[ds3_tensor_[q]]);
    return;
  }
  uint64_t bytes = 0;
  for (int32_t q : params) {
    const uint64_t element = dtype_bytes(layout().dtype[ds3_tensor_[q]], 1).value_or(1);
    bytes = checked_add(bytes, checked_mul(zero3_partition_numel(ds3_numel_[q], options_.gpus), element, "DeepSpeed bytes"),
                        "DeepSpeed bytes");
  }
  // Named after the gather: deepspeed:ds_tensor_to_gpu:fetch:l1, ...:prefetch_backward:act.
  const std::string gather = st.name.substr(st.name.find(':') + 1);
  if (bytes > 0) st.writes.push_back(writer_.new_buffer("deepspeed:ds_tensor_to_gpu:" + gather, bytes, Category::Weight));
}

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
  const int32_t fp32 = step("offload_fp32_grad", "to", t.fp32_cast, copy);
  // offload_optimizer nvme: the float32 gradient (the cast, or the copy itself when already float32) is kept for the
  // swap (training_deepspeed3_nvme.cc).
  if (ds3_swap_optimizer()) ds3_nvme_keep_grad(p, fp32 >= 0 ? fp32 : copy);
}

}  // namespace memplan
