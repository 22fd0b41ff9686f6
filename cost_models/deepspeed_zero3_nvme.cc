#include "cost_models/deepspeed_zero3_nvme.h"

#include <algorithm>

#include "cost_models/deepspeed_zero3.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

constexpr uint64_t kMinAioBytes = 1024 * 1024;  // swap_tensor/utils.py MIN_AIO_BYTES = 1024**2
constexpr uint64_t kAioAlignedBytes = 1024;     // swap_tensor/utils.py AIO_ALIGNED_BYTES

// numel_alignment = aligned_bytes // swap_element_size (AIO_ALIGNED_BYTES x intra_op_parallelism), at least 1.
uint64_t numel_alignment(uint64_t element_bytes, const DeepSpeedAio& aio) {
  precondition(element_bytes > 0, "an element of no bytes");
  return std::max<uint64_t>(1, checked_mul(kAioAlignedBytes, aio.intra_op_parallelism, "DeepSpeed aio alignment") / element_bytes);
}

bool swappable(uint64_t numel, uint64_t element, const DeepSpeedAio& aio) {
  return checked_mul(numel, element, "DeepSpeed bytes") >= zero3_min_aio_bytes(aio);
}

}  // namespace

uint64_t zero3_min_aio_bytes(const DeepSpeedAio& aio) { return std::max(kMinAioBytes, aio.block_size); }

uint64_t zero3_io_aligned_numel(uint64_t numel, uint64_t element_bytes, const DeepSpeedAio& aio) {
  return round_up(numel, numel_alignment(element_bytes, aio));
}

Zero3ParamSwap zero3_param_swap(const std::vector<uint64_t>& partition, const std::vector<uint64_t>& element,
                                const std::vector<bool>& trainable, const DeepSpeedZero& z) {
  precondition(partition.size() == element.size() && partition.size() == trainable.size(), "per-parameter lists differ");
  Zero3ParamSwap out;
  out.on_nvme.assign(partition.size(), false);
  uint64_t flat_bytes = 0, swap_element = 0;
  for (size_t q = 0; q < partition.size(); ++q) {
    const uint64_t bytes = checked_mul(partition[q], element[q], "DeepSpeed bytes");
    swap_element = std::max(swap_element, element[q]);
    if (trainable[q]) {
      out.trainable_elements = checked_add(out.trainable_elements, partition[q], "DeepSpeed elements");
      flat_bytes = checked_add(flat_bytes, bytes, "DeepSpeed host bytes");
    }
    if (swappable(partition[q], element[q], z.aio)) {
      if (partition[q] > z.param_swap.buffer_size)
        throw InputError("--deepspeed: a parameter partition of " + std::to_string(partition[q]) +
                         " elements does not fit zero_optimization.offload_param.buffer_size " +
                         std::to_string(z.param_swap.buffer_size) + " (AsyncPartitionedParameterSwapper.get_buffer "
                         "asserts 'More elements than buffer size'): give a buffer_size of at least the largest partition");
      out.nvme_bytes = checked_add(
          out.nvme_bytes, checked_mul(zero3_io_aligned_numel(partition[q], element[q], z.aio), element[q], "DeepSpeed bytes"),
          "DeepSpeed NVMe bytes");
      out.on_nvme[q] = !trainable[q];  // trainable ones are read back into the flat buffer for good
    } else if (!trainable[q]) {
      out.host_bytes = checked_add(out.host_bytes, bytes, "DeepSpeed host bytes");  // Init's "cpu" partition
    }
  }
  out.host_bytes = checked_add(out.host_bytes, flat_bytes, "DeepSpeed host bytes");
  if (swap_element == 0) return out;
  // The swapper's dtype is the model's (Init's self.dtype): every partition's element size.
  const uint64_t buffers = checked_mul(zero3_io_aligned_numel(z.param_swap.buffer_size, swap_element, z.aio),
                                       z.param_swap.buffer_count, "DeepSpeed host bytes");
  out.host_bytes = checked_add(out.host_bytes, checked_mul(buffers, swap_element, "DeepSpeed host bytes"), "DeepSpeed host bytes");
  return out;
}

Zero3OptimizerSwap zero3_optimizer_swap(const std::vector<std::vector<uint64_t>>& sub_groups, uint64_t grad_partition_bytes,
                                        int optimizer_states, const DeepSpeedZero& z) {
  Zero3OptimizerSwap out;
  out.host_bytes = grad_partition_bytes;
  uint64_t largest = 0;
  const uint64_t states = static_cast<uint64_t>(optimizer_states);
  for (const std::vector<uint64_t>& params : sub_groups) {
    uint64_t e = 0;
    for (uint64_t p : params) e = checked_add(e, p, "DeepSpeed elements");
    largest = std::max(largest, e);
    const bool swap = swappable(e, 4, z.aio);
    out.swappable.push_back(swap);
    if (!swap) {
      out.host_bytes = checked_add(out.host_bytes, zero3_host_bytes({e}, 0, optimizer_states), "DeepSpeed host bytes");
      continue;
    }
    const uint64_t aligned = checked_mul(zero3_io_aligned_numel(e, 4, z.aio), 4, "DeepSpeed NVMe bytes");
    out.nvme_bytes = checked_add(out.nvme_bytes, checked_mul(aligned, 1 + states, "DeepSpeed NVMe bytes"), "DeepSpeed NVMe bytes");
    for (uint64_t p : params)
      out.nvme_bytes = checked_add(out.nvme_bytes, checked_mul(zero3_grad_swapped_elements(p, z.aio), 4, "DeepSpeed NVMe bytes"),
                                   "DeepSpeed NVMe bytes");
  }
  if (sub_groups.empty()) return out;
  const uint64_t manager = checked_mul(zero3_io_aligned_numel(largest, 4, z.aio), z.optimizer_swap.buffer_count, "DeepSpeed host bytes");
  out.host_bytes = checked_add(out.host_bytes, checked_mul(manager, 4, "DeepSpeed host bytes"), "DeepSpeed host bytes");
  return out;
}

uint64_t zero3_grad_swapped_elements(uint64_t partition, const DeepSpeedAio& aio) {
  if (!swappable(partition, 4, aio)) return 0;
  // _adjust_for_misaligned_lengths: the aligned part, (numel // numel_alignment) x numel_alignment, then tested again
  const uint64_t alignment = numel_alignment(4, aio);
  const uint64_t aligned = partition / alignment * alignment;
  return swappable(aligned, 4, aio) ? aligned : 0;
}

}  // namespace memplan
