// DeepSpeed ZeRO-3 (--deepspeed with zero_optimization.stage 3): the sizes and the fetch/release rules of
// DeepSpeedZeroOptimizer_Stage3, pure functions of element counts (no graph, no program). Source: DeepSpeed at commit
// edaa7221267243c7be7fb49c5d5f5c4fb97b4641, deepspeed/runtime/zero/: partition_parameters.py,
// partitioned_param_coordinator.py, parameter_offload.py, stage3.py; each rule below names its function. The step's
// use of them is cost_models/training_deepspeed3.cc; docs/cost-models.md, "DeepSpeed ZeRO-3".
// Without prefetch (stage3_prefetch_bucket_size 0) what is gathered at once is each module's own parameters plus what
// stage3_max_reuse_distance keeps, and stage3_max_live_parameters bounds nothing (PartitionedParameterCoordinator
// reads it only to size a prefetch); with prefetch, the coordinator's schedule is deepspeed_zero3_schedule.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memplan {

// partition_parameters.py Init._partition_param: each parameter is padded to a multiple of the world size
// (_aligned_size, _padding_size) and every rank keeps aligned / N elements (ds_tensor, partition_numel).
uint64_t zero3_partition_numel(uint64_t numel, int gpus);

// parameter_offload.py DeepSpeedZeRoOffload.mark_persistent_parameters, over named_parameters' order: a parameter
// of at most `threshold` elements persists (kept whole on every rank, never released once the trace is complete)
// unless adding it would pass `model_threshold` elements in all (that one is skipped, later ones still tried).
std::vector<bool> zero3_persistent(const std::vector<uint64_t>& numel, uint64_t threshold, uint64_t model_threshold);

// stage3.py _create_fp16_sub_groups: the optimizer's parameter group cut into sub-groups, a parameter added until
// the sub-group reaches sub_group_size partition elements (>=), the last parameter closing the last one; one
// sub-group when sub_group_size covers the group. Returns each sub-group's partition elements.
std::vector<uint64_t> zero3_sub_groups(const std::vector<uint64_t>& partition_numel, uint64_t sub_group_size);
// The same cut, per parameter: the index of the sub-group it falls in.
std::vector<int32_t> zero3_sub_group_of(const std::vector<uint64_t>& partition_numel, uint64_t sub_group_size);

// The elements one all_gather_coalesced of `numel` (the parameters of one fetch not yet available) allocates
// (partition_parameters.py): one parameter goes through _all_gather_sequential, whose buffer of ceil(numel / N) x N
// elements the parameter then views (`gathered` = that, `transient` = 0); several through _all_gather_dtype, a flat
// tensor of sum(partition numels) x N (`transient`, freed once AllGatherCoalescedHandle.wait has copied every
// parameter out) and, per parameter, torch.cat of its N pieces: numel elements (`gathered`).
struct Zero3Gather {
  std::vector<uint64_t> gathered;  // per parameter, in the given order
  uint64_t transient = 0;
};
Zero3Gather zero3_gather(const std::vector<uint64_t>& numel, int gpus);

// The transient one reduce of the gradient bucket allocates (comm/coalesced_collectives.py reduce_scatter_coalesced,
// the reduce_scatter true path of __avg_scatter_grads): torch.cat of every grad's N chunks each padded to
// ceil(numel / N), sum(ceil(numel / N)) x N elements; none when the bucket is one grad whose numel N divides (its
// view is reduced in place).
uint64_t zero3_reduce_scatter_elements(const std::vector<uint64_t>& numel, int gpus);

// The fetch trace (PartitionedParameterCoordinator.__submodule_order) as memplan sees it: each fetch of a module
// that owns parameters, forward then backward, and the parameters it owns (indices into `numel`).
// release_sub_module after the module at trace position s frees its non-persistent parameters except (
// __params_to_release) those that some later fetch t > s uses, where the modules between s + 1 and t - 1 own fewer
// than max_reuse_distance elements in all. Modules owning no parameter add no element to that sum, so without
// prefetch leaving them out of the trace changes nothing. Returns, per trace position, the parameters released there
// (zero3_schedule's releases when each fetch is followed by its release and no prefetch).
std::vector<std::vector<int32_t>> zero3_releases(const std::vector<std::vector<int32_t>>& trace,
                                                  const std::vector<uint64_t>& numel, const std::vector<bool>& persistent,
                                                  uint64_t max_reuse_distance);

// offload_optimizer cpu (stage3.py: self.device is the host): the bytes DeepSpeedZeroOptimizer_Stage3 keeps there,
// for the report's host line: the float32 sub-groups (_create_fp32_partitions), each one's float32 grad
// (initialize_optimizer_states: subgroup_gradient_buffer, the sub-group's elements in its type), the optimizer's
// `optimizer_states` float32 states per sub-group element (DeepSpeedCPUAdam: exp_avg, exp_avg_sq), and
// grad_partitions_flat_buffer (`grad_partition_bytes`: every trainable partition in the grads' type, on self.device).
uint64_t zero3_host_bytes(const std::vector<uint64_t>& sub_groups, uint64_t grad_partition_bytes, int optimizer_states);

// What partition_grads allocates on the GPU for one parameter of a reduced bucket under offload_optimizer cpu, at
// the accumulation boundary, freed before the next parameter's: grad_buffer.to(grad_partition.device), the host
// partition's copy back on the GPU (`partition` elements in the grads' type; with accumulation the same copy the
// add_ runs on), alive for both of _offload_grad_partition_at_boundary's: _constant_buffered_norm2, part.double() of
// one chunk of at most 250,000,000 elements at a time (buffer_size), and grad_buffer.to(float32) before the copy to
// the float32 grad on the host (none when the grads are float32: .to returns the tensor itself). In bytes.
struct Zero3OffloadTransients {
  uint64_t gpu_copy = 0;
  uint64_t norm_double = 0;
  uint64_t fp32_cast = 0;
};
Zero3OffloadTransients zero3_offload_transients(uint64_t partition, uint64_t grad_element_bytes);

}  // namespace memplan
