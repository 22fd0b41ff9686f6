#include "cost_models/deepspeed_zero3_schedule.h"

#include <algorithm>
#include <deque>
#include <set>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

enum class Status { NotAvailable, Inflight, Available };  // ZeroParamStatus

struct InTrace {  // __ParamInTrace
  int32_t param;
  int64_t step;   // step_id_last_used_at
};

}  // namespace

Zero3Schedule zero3_schedule(const std::vector<Zero3Call>& calls, const std::vector<uint64_t>& numel,
                             const std::vector<bool>& persistent, const Zero3Limits& limits) {
  const size_t n = numel.size();
  precondition(persistent.size() == n, "ZeRO-3 schedule: one persistence flag per parameter");
  Zero3Schedule out;
  out.actions.resize(calls.size());
  // __submodule_order (the fetches) and __param_queue.
  std::vector<const Zero3Call*> order;
  std::deque<InTrace> queue;
  for (const Zero3Call& c : calls) {
    if (c.release) continue;
    for (int32_t p : c.params) {
      precondition(p >= 0 && static_cast<size_t>(p) < n, "ZeRO-3 schedule: a parameter out of range");
      queue.push_back({p, static_cast<int64_t>(order.size())});
    }
    order.push_back(&c);
  }
  std::vector<Status> status(n, Status::NotAvailable);
  std::vector<int32_t> handle_of(n, -1);
  for (size_t p = 0; p < n; ++p)
    if (persistent[p]) status[p] = Status::Available;
  const int64_t never = -10000000000LL;  // defaultdict(lambda: int(-1e10))
  std::vector<int64_t> most_recent(n, never);
  uint64_t available = 0;  // __n_available_params
  auto gather = [&](const std::vector<int32_t>& params) {
    for (int32_t p : params) available = checked_add(available, numel[p], "ZeRO-3 available parameters");
    out.most_available = std::max(out.most_available, available);
  };
  int64_t step = 0;  // __step_id
  for (size_t c = 0; c < calls.size(); ++c) {
    const Zero3Call& call = calls[c];
    Zero3Action& act = out.actions[c];
    if (call.release) {
      // __params_to_release(submodule, step_id), then __release_param on each AVAILABLE one.
      std::set<int32_t> release;
      for (int32_t p : call.params)
        if (!persistent[p] && most_recent[p] <= step) release.insert(p);
      uint64_t traversed = 0;
      for (size_t t = static_cast<size_t>(step); t < order.size() && !release.empty(); ++t) {
        if (traversed >= limits.max_reuse_distance) break;
        for (int32_t p : order[t]->params) {
          release.erase(p);
          traversed = checked_add(traversed, numel[p], "ZeRO-3 reuse distance");
        }
      }
      for (int32_t p : release)
        if (status[p] == Status::Available) {
          status[p] = Status::NotAvailable;
          available -= numel[p];
          act.released.push_back(p);
        }
      continue;
    }
    // __all_gather_params(params_to_fetch): the NOT_AVAILABLE ones, then the wait on each INFLIGHT one.
    for (int32_t p : call.params)
      if (status[p] == Status::NotAvailable) act.gathered.push_back(p);
    gather(act.gathered);
    for (int32_t p : act.gathered) status[p] = Status::Available;
    for (int32_t p : call.params)
      if (status[p] == Status::Inflight) {
        const int32_t h = handle_of[p];
        act.waited.push_back(h);
        for (int32_t q : out.handles[h]) status[q] = Status::Available;  // AllGatherCoalescedHandle.wait
      }
    // The own parameters not yet popped come off the queue's head.
    std::set<int32_t> expected, discarded;
    for (int32_t p : call.params)
      if (most_recent[p] < step) expected.insert(p);
    while (!queue.empty() && discarded.size() < expected.size()) {
      most_recent[queue.front().param] = queue.front().step;
      discarded.insert(queue.front().param);
      queue.pop_front();
    }
    precondition(discarded == expected, "ZeRO-3 schedule: the parameter queue disagrees with the trace");
    // The prefetch.
    if (limits.prefetch_bucket_size > 0 && available < limits.max_live_parameters) {
      const uint64_t most = std::min(limits.max_live_parameters - available, limits.prefetch_bucket_size);
      std::vector<int32_t> prefetch;
      std::vector<bool> in_prefetch(n, false);
      uint64_t prefetching = 0;
      while (!queue.empty() && prefetching < most) {
        const InTrace e = queue.front();
        queue.pop_front();
        const bool fresh = status[e.param] == Status::NotAvailable && !in_prefetch[e.param];
        most_recent[e.param] = std::max(most_recent[e.param], e.step);
        if (fresh) {
          prefetch.push_back(e.param);
          in_prefetch[e.param] = true;
          prefetching = checked_add(prefetching, numel[e.param], "ZeRO-3 prefetch");
        }
      }
      if (!prefetch.empty()) {
        act.prefetched = static_cast<int32_t>(out.handles.size());
        for (int32_t p : prefetch) {
          status[p] = Status::Inflight;
          handle_of[p] = act.prefetched;
        }
        out.handles.push_back(prefetch);
        gather(prefetch);
      }
    }
    ++step;
  }
  return out;
}

}  // namespace memplan
