// DeepSpeed ZeRO-3 with NVMe offload (ZeRO-Infinity: offload_param / offload_optimizer device "nvme"): what lives in
// host memory and on the NVMe device, and which partitions stay on NVMe during training; pure functions of element
// counts. Source: DeepSpeed at edaa7221267243c7be7fb49c5d5f5c4fb97b4641, deepspeed/runtime/swap_tensor/
// (partitioned_param_swapper.py AsyncPartitionedParameterSwapper, optimizer_utils.py OptimizerSwapper,
// partitioned_optimizer_swapper.py, utils.py SwapBufferManager, constants.py) and deepspeed/runtime/zero/stage3.py,
// partition_parameters.py; each rule names its function. The step's use: cost_models/training_deepspeed3_nvme.cc.
// On the GPU, offload_param nvme is offload_param cpu (each gather copies the partitions it sends from host memory,
// the NVMe-resident ones swapped into pinned buffers first), and offload_optimizer nvme is offload_optimizer cpu but
// for the float32 gradient casts partition_grads keeps for the swap (training_deepspeed3_nvme.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "cost_models/deepspeed_zero.h"

namespace memplan {

// swap_tensor/utils.py MIN_AIO_BYTES (1 MiB) and AIO_ALIGNED_BYTES (1024): a tensor is swappable when its bytes reach
// max(MIN_AIO_BYTES, aio.block_size) (AsyncPartitionedParameterSwapper.swappable_tensor,
// OptimizerSwapper.is_swappable_tensor); swaps are in multiples of AIO_ALIGNED_BYTES x intra_op_parallelism bytes,
// numel_alignment = that // element size elements (_io_aligned_numel rounds up to it).
uint64_t zero3_min_aio_bytes(const DeepSpeedAio& aio);
uint64_t zero3_io_aligned_numel(uint64_t numel, uint64_t element_bytes, const DeepSpeedAio& aio);

// offload_param nvme, per parameter partition (`partition` elements, `element` bytes, `trainable`), in
// named_parameters' order.
//  - Init._partition_param: a partition whose bytes reach zero3_min_aio_bytes gets a swap buffer (get_buffer asserts it
//    fits buffer_size elements) and is written to NVMe (swap_out_and_release: the aligned buffer, a file of
//    aligned x element bytes that nothing deletes); a smaller one is allocated on the host ("cpu").
//  - stage3.py _create_param_groups_fp16_flat_cpu_memory: one pinned flat buffer of the trainable partitions (one
//    parameter group), _move_to_flat_buffer reads the NVMe ones back into it for good (swap_into_buffer, final_location
//    'not-nvme'). More trainable elements than max_in_cpu leave sub-groups on NVMe: refused by the caller.
//  - AsyncPartitionedParameterSwapper._configure_aio: buffer_count buffers of aligned(buffer_size) elements, pinned
//    (new_cpu_locked_tensor), allocated whatever is swapped.
// So the frozen swappable partitions stay on NVMe (`on_nvme`), swapped into a buffer by the gather that needs them
// (_ensure_availability_of_partitioned_params) and back out of it when released (remove_partition_and_release_buffers).
struct Zero3ParamSwap {
  uint64_t host_bytes = 0;       // the flat buffer, the frozen unswappable partitions, the swap buffers
  uint64_t nvme_bytes = 0;       // the swap files Init wrote
  uint64_t trainable_elements = 0;
  std::vector<bool> on_nvme;     // per parameter: swapped in and out at each gather during training
};
Zero3ParamSwap zero3_param_swap(const std::vector<uint64_t>& partition, const std::vector<uint64_t>& element,
                                const std::vector<bool>& trainable, const DeepSpeedZero& z);

// offload_optimizer nvme over the float32 sub-groups (`sub_groups`: each one's parameter partitions, elements) with
// `optimizer_states` float32 states each and the gradient partitions' `grad_partition_bytes` (grad_partitions_flat_
// buffer, on the host as under cpu).
//  - stage3.py _swappable_optimizer_subgroup: a sub-group swaps when its float32 bytes reach zero3_min_aio_bytes;
//    _create_fp32_partitions leaves it an empty tensor on the host and writes it to NVMe, its states too
//    (initialize_optimizer_states swaps them out); a smaller one stays on the host as under cpu (its float32 copy,
//    grad buffer and states: zero3_host_bytes' rule).
//  - OptimizerSwapper.__init__: SwapBufferManager of buffer_count pinned float32 buffers of the aligned largest
//    sub-group (largest_numel = max(fp16_partitioned_groups_flat_numel)), whatever swaps.
//  - initialize_optimizer_states' gradient_buffer (the largest sub-group, float32, on the host) is gone by the first
//    step: a swappable sub-group's grad, its view, is dropped by _optimizer_states_and_gradient_swap_out, and the step
//    swaps the grad into a SwapBufferManager buffer (PartitionedOptimizerSwapper._swap_in_gradients).
//  - NVMe: per swappable sub-group its float32 copy and each state (aligned: _initialize_parameters,
//    swap_out_optimizer_state), and the float32 gradient pieces zero3_grad_swapped_elements sends.
struct Zero3OptimizerSwap {
  uint64_t host_bytes = 0;
  uint64_t nvme_bytes = 0;
  std::vector<bool> swappable;   // per sub-group
};
Zero3OptimizerSwap zero3_optimizer_swap(const std::vector<std::vector<uint64_t>>& sub_groups, uint64_t grad_partition_bytes,
                                        int optimizer_states, const DeepSpeedZero& z);

// The elements of one parameter partition's float32 gradient (`partition` elements, in a swappable sub-group) that
// partition_grads sends to NVMe at its end (_swap_out_offload_fp32_gradients -> OptimizerSwapper._swap_out_gradients):
// _adjust_for_misaligned_lengths cuts a swappable gradient that is not a multiple of numel_alignment into an aligned
// view and a remainder view, and a piece under zero3_min_aio_bytes is not swapped but kept in unswapped_gradients,
// on the GPU (a view keeps the whole tensor), until the sub-group's step reads it (_retrieve_unswapped_grad_partitions).
// So the GPU tensor lives to the step unless the result is `partition`.
uint64_t zero3_grad_swapped_elements(uint64_t partition, const DeepSpeedAio& aio);

}  // namespace memplan
