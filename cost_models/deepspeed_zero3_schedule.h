// DeepSpeed ZeRO-3's PartitionedParameterCoordinator run over one complete trace: which parameters each module call
// gathers, which it prefetches for later calls, and which each release frees. A pure function of the hook calls in
// order and the parameters' element counts (no graph, no program): cost_models/training_deepspeed3*.cc build the
// calls from the graph and emit the buffers. Source: DeepSpeed at commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641,
// deepspeed/runtime/zero/partitioned_param_coordinator.py, functions named below; docs/cost-models.md, "DeepSpeed
// ZeRO-3".
#pragma once

#include <cstdint>
#include <vector>

namespace memplan {

// One hook call, in the order they run. A fetch is fetch_sub_module (a module's pre-forward hook, or its pre-backward
// hook): every module call is one, parameter-less modules included, and each is one step id of __submodule_order.
// A release is release_sub_module (post-forward, post-backward), __step_id then being the number of fetches before it.
struct Zero3Call {
  bool release = false;
  std::vector<int32_t> params;  // the module's own parameters (iter_params(recurse=False)), in ds_id order
};

struct Zero3Limits {
  uint64_t prefetch_bucket_size = 0;     // stage3_prefetch_bucket_size
  uint64_t max_live_parameters = 0;      // stage3_max_live_parameters (__max_n_available_params)
  uint64_t max_reuse_distance = 0;       // stage3_max_reuse_distance
};

struct Zero3Action {
  std::vector<int32_t> gathered;  // fetch: its own parameters NOT_AVAILABLE, gathered and waited on now
  std::vector<int32_t> waited;    // fetch: prefetch handles (Zero3Schedule::handles) its own parameters wait on first
  int32_t prefetched = -1;        // fetch: the handle its prefetch launched, -1 none
  std::vector<int32_t> released;  // release: the parameters partitioned again (ascending)
};

struct Zero3Schedule {
  std::vector<Zero3Action> actions;           // per call
  std::vector<std::vector<int32_t>> handles;  // each prefetch's parameters (one all_gather_coalesced), queue order
  uint64_t most_available = 0;                // the largest __n_available_params reached
};

// The steady state (a complete trace, after reset_step: __n_available_params 0, every non-persistent parameter
// NOT_AVAILABLE, the persistent ones AVAILABLE). __param_queue: per fetch, its module's parameters with that step id
// (construct_parameter_trace_from_module_trace). A fetch (_fetch_sub_module_impl): gather its own NOT_AVAILABLE
// parameters, wait on its INFLIGHT ones (a wait completes the whole handle); pop its own parameters whose
// __most_recent_step_id_param_fetched_for is below the step id off the queue's head; then, with a prefetch bucket,
// pop the queue while the elements newly prefetched stay below min(max_live_parameters - available,
// prefetch_bucket_size): each popped parameter's most recent step becomes its step id (the max), a NOT_AVAILABLE one
// joins the prefetch; the prefetch is one gather. A release (__params_to_release): the module's non-persistent
// parameters, except those whose most recent step id is past the release's, and those some module within
// max_reuse_distance elements from the release's step on uses; only AVAILABLE ones (INFLIGHT cannot) are freed.
Zero3Schedule zero3_schedule(const std::vector<Zero3Call>& calls, const std::vector<uint64_t>& numel,
                             const std::vector<bool>& persistent, const Zero3Limits& limits);

}  // namespace memplan
