// The DeepSpeed ZeRO state of a training step (--deepspeed): what training_deepspeed.cc (ZeRO-1/2) and
// training_deepspeed3*.cc (ZeRO-3: its modules, fetches, prefetch schedule, offload and NVMe swaps) read and write
// between the step's phases. TrainingStep (training_step.h) holds it as a private base, so those files name the
// members as their own; the rules are deepspeed_zero.h's, deepspeed_zero3.h's and deepspeed_zero3_schedule.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cost_models/deepspeed_zero.h"
#include "cost_models/deepspeed_zero3_schedule.h"
#include "planner/program.h"

namespace memplan {

struct DeepSpeedStepState {
  // ZeRO-3's module hooks, in the order a module call runs them (training_deepspeed3_prefetch.cc).
  enum Ds3Hook { kDs3BeforeForward, kDs3AfterForward, kDs3BeforeBackward, kDs3AfterBackward, kDs3BeforeRecompute,
                 kDs3AfterRecompute };
  // DeepSpeed: rank 0's partition, each trainable parameter's index in it (-1: none), the grads' element size, the
  // gradient buckets, the float32 partition, grads_in_partition (this micro-batch's; with accumulation the earlier
  // ones' all_grad_tensors), the parameters in the bucket and their elements, ZeRO-1's grads kept to the step.
  DeepSpeedZero ds_config_;  // options_.deepspeed with "auto" resolved from the graph
  ZeroPartition ds_;
  std::vector<int32_t> ds_index_;
  uint64_t ds_grad_element_bytes_ = 0;
  std::vector<int32_t> ds_buckets_;
  int32_t ds_fp32_ = -1, ds_grads_ = -1, ds_accumulated_ = -1;
  std::vector<int32_t> ds_bucket_params_;
  std::vector<Step> ds_after_reduce_;  // offload: copy_grads_in_partition's steps, placed after their reduce
  uint64_t ds_bucket_elements_ = 0;
  // DeepSpeed ZeRO-3: per module parameter (ds3_index_: tensor -> index, -1 none) its elements, whether it persists,
  // its resident partition and its whole copy (gathered or persistent, -1: not available); the modules (owners) with
  // their parameters, first and last op reading them, whether their backward is fetched and whether their post-backward
  // hook fires; the fetch trace's positions and what each releases; the gradient partitions; the sub-groups.
  std::vector<int32_t> ds3_index_, ds3_tensor_;
  std::vector<uint64_t> ds3_numel_;
  std::vector<bool> ds3_persistent_;
  std::vector<int32_t> ds3_whole_;
  struct Ds3Module {
    std::string name;
    std::vector<int32_t> params;
    int32_t first_op = -1, last_op = -1, forward_at = -1, backward_at = -1;
    int32_t recompute_at = -1;  // its fetch in its checkpointed segment's recomputation (-1: none)
    bool post_backward = false;
  };
  std::vector<Ds3Module> ds3_modules_;
  std::map<std::pair<int32_t, int32_t>, int32_t> ds3_read_module_;  // (op, parameter) -> the module whose call reads it
  std::vector<std::vector<int32_t>> ds3_starting_at_, ds3_ending_at_;  // per op: the modules whose first / last op it is
  std::vector<std::vector<int32_t>> ds3_releases_;
  // With prefetch: every module call the node scopes show, as hook calls in the order they run (ds3_calls_: which
  // module, at which op, which hook), the coordinator's schedule over them, each prefetch
  // handle's flat buffer (-1: one parameter, gathered into its own buffer), the next call to emit.
  struct Ds3Call {
    std::string module;
    int32_t op = -1;
    Ds3Hook hook = kDs3BeforeForward;
  };
  std::vector<Ds3Call> ds3_calls_;
  Zero3Schedule ds3_schedule_;
  std::vector<int32_t> ds3_handle_flat_;
  size_t ds3_next_call_ = 0;
  int32_t ds3_grad_partitions_ = -1;
  std::vector<uint64_t> ds3_sub_groups_;
  // NVMe offload: per parameter whether its partition stays on NVMe (frozen and swappable), the swap buffers those
  // hold; per trainable parameter its sub-group; per sub-group whether it swaps, and the float32 gradients partition_
  // grads keeps on the GPU for it until its step; the ones the bucket's swap-out reads last.
  std::vector<bool> ds3_on_nvme_;
  std::vector<int32_t> ds3_sub_group_of_;
  std::vector<bool> ds3_sub_group_swaps_;
  std::vector<std::vector<int32_t>> ds3_grads_to_step_;
  std::vector<int32_t> ds3_grads_to_swap_out_;
  std::vector<int32_t> ds_kept_grads_;  // ZeRO-1: the grads kept to the step
};

}  // namespace memplan
