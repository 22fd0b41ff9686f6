// DeepSpeed ZeRO-3 with NVMe offload (ZeRO-Infinity). The sizes: deepspeed_zero3_nvme.h; DeepSpeed at
// edaa7221267243c7be7fb49c5d5f5c4fb97b4641. docs/cost-models.md, "DeepSpeed ZeRO-3", NVMe offload.
//  - offload_param nvme: the GPU sees what offload_param cpu gives it (training_deepspeed3_offload.cc): each gather
//    copies the partitions it sends to the GPU from host memory (_all_gather_dtype `p.ds_tensor.to(device)`), an
//    NVMe-resident one swapped into a pinned buffer first (_ensure_availability_of_partitioned_params, synchronous).
//    The host line becomes the flat buffer of trainable partitions, the frozen partitions too small to swap and the
//    swap buffers; the NVMe line the swap files. Refused: more trainable elements than max_in_cpu (sub-groups left on
//    NVMe go through reserve_partitioned_swap_space and _partitioned_params_swap_out, not modelled), and prefetch with
//    a partition on NVMe (fetch_sub_module stops its prefetch at one, `_is_currently_on_nvme`, and
//    __prefetch_nvme_param_partitions swaps ahead: the prefetch order changes); a gather needing more swap buffers
//    than buffer_count, DeepSpeed's own failure (swap_in asserts 'Not enough swap in buffers').
//  - offload_optimizer nvme: stage3.py keeps self.device the host as under cpu (the step on DeepSpeedCPUAdam), with
//    one difference on the GPU: _offload_grad_partition_at_boundary does not copy a swappable sub-group's gradient to
//    the host at once but appends `grad_buffer.to(dtype=float32)` (a GPU tensor: the cast, or the GPU copy itself when
//    the grads are float32) to offload_fp32_gradients, which partition_grads swaps out after the bucket's last
//    parameter; the pieces _swap_out_gradients does not swap stay on the GPU until the sub-group's step reads them
//    (zero3_grad_swapped_elements). The host line: deepspeed_zero3_nvme.h zero3_optimizer_swap.
#include "cost_models/deepspeed_zero3.h"
#include "cost_models/deepspeed_zero3_nvme.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

// After ds3_add_resident's sizes: `element` per parameter (ds3_tensor_ order), the trainable partitions in that order,
// the gradient partitions' bytes. Sets the host and NVMe lines and what the step needs.
void TrainingStep::ds3_nvme_resident(const std::vector<uint64_t>& element, const std::vector<uint64_t>& trainable_partitions,
                                     uint64_t grad_partition) {
  const std::string where = "--deepspeed at stage 3, model '" + graph_.model_path + "': ";
  const DeepSpeedZero& z = ds_config_;
  ds3_on_nvme_.assign(ds3_tensor_.size(), false);
  if (z.offload_param == DeepSpeedOffload::Nvme) {
    std::vector<uint64_t> partition;
    std::vector<bool> trainable;
    for (size_t q = 0; q < ds3_tensor_.size(); ++q) {
      partition.push_back(zero3_partition_numel(ds3_numel_[q], options_.gpus));
      trainable.push_back(context_.is_param[ds3_tensor_[q]]);
    }
    const Zero3ParamSwap swap = zero3_param_swap(partition, element, trainable, z);
    if (swap.trainable_elements > z.param_swap.max_in_cpu)
      throw InputError(where + "zero_optimization.offload_param.max_in_cpu " + std::to_string(z.param_swap.max_in_cpu) +
                       " is below the " + std::to_string(swap.trainable_elements) + " trainable partition elements a GPU "
                       "updates: sub-groups left on NVMe (stage3.py _create_fp16_partitions_with_defragmentation, "
                       "reserve_partitioned_swap_space) are not modelled; give max_in_cpu of at least that");
    ds3_on_nvme_ = swap.on_nvme;
    size_t on_nvme = 0;
    for (size_t q = 0; q < ds3_on_nvme_.size(); ++q) on_nvme += ds3_on_nvme_[q];
    if (on_nvme > 0 && ds3_prefetch())
      throw InputError(where + std::to_string(on_nvme) + " frozen parameter partition(s) stay on NVMe (offload_param "
                       "nvme, each of at least " + std::to_string(zero3_min_aio_bytes(z.aio)) + " bytes): with prefetch "
                       "not modelled (fetch_sub_module stops prefetching at a partition on NVMe and "
                       "__prefetch_nvme_param_partitions swaps ahead); give stage3_prefetch_bucket_size 0");
    result_.deepspeed_param_host_bytes = swap.host_bytes;
    result_.deepspeed_nvme_bytes = checked_add(result_.deepspeed_nvme_bytes, swap.nvme_bytes, "DeepSpeed NVMe bytes");
    result_.notes.push_back(
        "DeepSpeed offload_param nvme (AsyncPartitionedParameterSwapper): host memory " + std::to_string(swap.host_bytes) +
        " bytes (the trainable partitions' pinned flat buffer, frozen partitions under " +
        std::to_string(zero3_min_aio_bytes(z.aio)) + " bytes, and buffer_count " + std::to_string(z.param_swap.buffer_count) +
        " swap buffers of buffer_size " + std::to_string(z.param_swap.buffer_size) + " elements), NVMe " +
        std::to_string(swap.nvme_bytes) + " bytes of swap files; " + std::to_string(on_nvme) +
        " frozen partition(s) read from NVMe at each gather; on the GPU the same as offload_param cpu.");
  }
  if (!ds3_swap_optimizer()) return;
  ds3_sub_group_of_.assign(ds3_tensor_.size(), -1);
  const std::vector<int32_t> of = zero3_sub_group_of(trainable_partitions, z.sub_group_size);
  std::vector<std::vector<uint64_t>> members(ds3_sub_groups_.size());
  for (size_t q = 0, k = 0; q < ds3_tensor_.size(); ++q) {
    if (!context_.is_param[ds3_tensor_[q]]) continue;
    ds3_sub_group_of_[q] = of[k];
    members[of[k]].push_back(trainable_partitions[k]);
    ++k;
  }
  const Zero3OptimizerSwap swap = zero3_optimizer_swap(members, grad_partition, states_per_param(), z);
  ds3_sub_group_swaps_ = swap.swappable;
  ds3_grads_to_step_.assign(ds3_sub_groups_.size(), {});
  // PartitionedOptimizerSwapper.swap_in_optimizer_state allocates num_tensors() (the float32 copy and each state) + 1
  // (the gradient) buffers at once and asserts it got them.
  const uint64_t needed = 2 + static_cast<uint64_t>(states_per_param());
  for (bool s : swap.swappable)
    if (s && z.optimizer_swap.buffer_count < needed)
      throw InputError(where + "zero_optimization.offload_optimizer.buffer_count " +
                       std::to_string(z.optimizer_swap.buffer_count) + " is below the " + std::to_string(needed) +
                       " buffers a swapped sub-group's step takes at once (its float32 copy, each optimizer state and its "
                       "gradient: PartitionedOptimizerSwapper.swap_in_optimizer_state asserts them)");
  result_.deepspeed_host_bytes = swap.host_bytes;
  result_.deepspeed_nvme_bytes = checked_add(result_.deepspeed_nvme_bytes, swap.nvme_bytes, "DeepSpeed NVMe bytes");
  size_t swapping = 0;
  for (bool s : swap.swappable) swapping += s;
  result_.notes.push_back(
      "DeepSpeed offload_optimizer nvme (PartitionedOptimizerSwapper): " + std::to_string(swapping) + " of " +
      std::to_string(swap.swappable.size()) + " float32 sub-group(s) swap (at least " +
      std::to_string(zero3_min_aio_bytes(z.aio)) + " bytes), their copies, states and gradients on NVMe; host memory " +
      std::to_string(swap.host_bytes) + " bytes (the gradient partitions, buffer_count " +
      std::to_string(z.optimizer_swap.buffer_count) + " pinned float32 swap buffers of the largest sub-group, and any "
      "sub-group too small to swap whole); on the GPU each swapped sub-group's float32 "
      "gradients wait for the bucket's swap-out, the unaligned or small ones until its step.");
}

// Before a gather: the NVMe-resident partitions among `missing` each take a swap buffer, besides those gathered ones
// still hold (a partition leaves its buffer when released: partition -> remove_partition_and_release_buffers).
void TrainingStep::ds3_nvme_swap_in(const std::vector<int32_t>& missing) {
  if (ds3_on_nvme_.empty()) return;
  uint64_t held = 0, wanted = 0;
  for (size_t q = 0; q < ds3_on_nvme_.size(); ++q) held += ds3_on_nvme_[q] && ds3_whole_[q] >= 0;
  for (int32_t q : missing) wanted += ds3_on_nvme_[q];
  if (wanted > 0 && held + wanted > ds_config_.param_swap.buffer_count)
    throw InputError("--deepspeed at stage 3, model '" + graph_.model_path + "': a gather of " + std::to_string(wanted) +
                     " partition(s) on NVMe while " + std::to_string(held) + " hold swap buffers needs more than "
                     "zero_optimization.offload_param.buffer_count " + std::to_string(ds_config_.param_swap.buffer_count) +
                     " (AsyncPartitionedParameterSwapper.swap_in asserts 'Not enough swap in buffers'): DeepSpeed fails there");
}

// _offload_grad_partition_at_boundary under offload_optimizer nvme: parameter p's float32 gradient on the GPU
// (`buffer`) is kept for its sub-group's swap when that sub-group swaps.
void TrainingStep::ds3_nvme_keep_grad(int32_t p, int32_t buffer) {
  const int32_t s = ds3_sub_group_of_[ds3_index_[p]];
  if (s < 0 || !ds3_sub_group_swaps_[s] || buffer < 0) return;
  const uint64_t partition = zero3_partition_numel(static_cast<uint64_t>(graph_.tensors[p].elements()), options_.gpus);
  if (zero3_grad_swapped_elements(partition, ds_config_.aio) == partition)
    ds3_grads_to_swap_out_.push_back(buffer);
  else
    ds3_grads_to_step_[s].push_back(buffer);
}

// partition_grads' end: _swap_out_offload_fp32_gradients copies the kept gradients into pinned buffers and writes them
// (OptimizerSwapper._swap_out_gradients); offload_fp32_gradients then goes out of scope.
void TrainingStep::ds3_nvme_swap_out_grads() {
  if (ds3_grads_to_swap_out_.empty()) return;
  ds_after_reduce_.push_back(Step{"deepspeed:swap_out_gradients", "swap_out", Phase::Backward, ds3_grads_to_swap_out_, {}, 0});
  ds3_grads_to_swap_out_.clear();
}

// The step of sub-group s (_optimizer_states_and_gradient_swap_in -> _swap_in_gradients ->
// _retrieve_unswapped_grad_partitions): the gradients kept on the GPU are copied into its pinned gradient buffer and
// dropped (release_unswapped_gradients).
void TrainingStep::ds3_nvme_step(size_t s) {
  if (s >= ds3_grads_to_step_.size() || ds3_grads_to_step_[s].empty()) return;
  program().steps.push_back(Step{"deepspeed:swap_in_gradients:" + std::to_string(s), "copy_", Phase::Optimizer,
                                 ds3_grads_to_step_[s], {}, 0});
}

}  // namespace memplan
