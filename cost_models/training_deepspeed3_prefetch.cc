// DeepSpeed ZeRO-3 with parameter prefetch (stage3_prefetch_bucket_size > 0): every module call as DeepSpeed's hooks
// see it, read from the graph's node scopes, run through the coordinator's rules (deepspeed_zero3_schedule.h), and the
// schedule's gathers, waits, prefetches and releases emitted at their ops. Source: DeepSpeed at commit
// edaa7221267243c7be7fb49c5d5f5c4fb97b4641, deepspeed/runtime/zero/parameter_offload.py (_register_deepspeed_module:
// every module gets the hooks, parameter-less containers and activations included) and
// partitioned_param_coordinator.py. docs/cost-models.md, "DeepSpeed ZeRO-3".
#include <algorithm>
#include <map>

#include "cost_models/deepspeed_zero3.h"
#include "cost_models/graph_facts.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

struct ScopeModule {
  std::string name;
  int depth = 0;
  int32_t first_op = -1, last_op = -1;  // the ops with a node in its scope
  int32_t param_module = -1;            // its index among ds3_modules_ when it owns parameters
};

}  // namespace

// The hook calls in the order they run. Forward: each module's pre-forward hook before its first op (parents
// before children; a module owning parameters before the first op reading them, where the non-prefetch model
// fetches it), the release after the last op reading them (inner modules first). Backward: a module whose ops'
// outputs need grad gets PreBackwardFunctionForModule on its outputs, so its pre-backward hook runs before the
// backward of its last op (the latest ending first, outer modules first: its wrapper is the one applied last); a
// module owning parameters releases after the backward of its first op when its input needs grad
// (PostBackwardFunctionModule), else at release_backward_leftovers.
void TrainingStep::ds3_scope_calls() {
  const std::string where = "--deepspeed at stage 3 with stage3_prefetch_bucket_size " +
                            std::to_string(ds_config_.prefetch_bucket_size) + ", model '" + graph_.model_path + "': ";
  std::map<std::string, ScopeModule> scopes;
  for (size_t i = 0; i < context_.ops.size(); ++i)
    for (int32_t n : context_.ops[i].nodes) {
      const std::vector<std::string> paths = scope_paths(graph_.nodes[n].name);
      for (size_t d = 0; d < paths.size(); ++d) {
        ScopeModule& s = scopes[paths[d]];
        s.name = paths[d];
        s.depth = static_cast<int>(d);
        if (s.first_op < 0) s.first_op = static_cast<int32_t>(i);
        s.last_op = static_cast<int32_t>(i);
      }
    }
  for (size_t m = 0; m < ds3_modules_.size(); ++m) {
    const Ds3Module& mod = ds3_modules_[m];
    if (mod.first_op < 0) continue;
    auto it = scopes.find(mod.name);
    if (it == scopes.end())
      throw InputError(where + "no node is named under module '" + mod.name + "'s scope (torch.onnx.export's /" +
                       mod.name + "/<Op>, a '.' between modules written '/'): which parameters DeepSpeed prefetches "
                       "depends on every module call, parameter-less modules included, which memplan reads from those "
                       "scopes; give stage3_prefetch_bucket_size 0 (modelled without them)");
    if (mod.first_op < it->second.first_op || mod.last_op > it->second.last_op)
      throw InputError(where + "module '" + mod.name + "'s parameters are read outside its scope: not modelled");
    it->second.param_module = static_cast<int32_t>(m);
    it->second.first_op = mod.first_op;  // fetched where the non-prefetch model fetches it
    it->second.last_op = mod.last_op;
  }
  std::vector<const ScopeModule*> all;
  for (const auto& [name, s] : scopes) all.push_back(&s);
  auto params_of = [&](const ScopeModule* s) {
    return s->param_module < 0 ? std::vector<int32_t>{} : ds3_modules_[s->param_module].params;
  };
  auto grad = [&](const ScopeModule* s) {
    return s->param_module >= 0 ? ds3_modules_[s->param_module].backward_at >= 0
                                : outputs_need_grad(s->first_op, s->last_op, [](int32_t) { return true; });
  };
  std::vector<Zero3Call> calls;
  auto add = [&](const ScopeModule* s, int32_t op, Ds3Hook hook, bool release) {
    ds3_calls_.push_back({s->name, op, hook});
    calls.push_back({release, params_of(s)});
  };
  // The modules starting and ending at each op, outer modules first (a stable sort by depth over the names' order).
  const int32_t ops = static_cast<int32_t>(context_.ops.size());
  std::stable_sort(all.begin(), all.end(), [](const ScopeModule* a, const ScopeModule* b) { return a->depth < b->depth; });
  std::vector<std::vector<const ScopeModule*>> starts(ops), ends(ops);
  for (const ScopeModule* s : all) {
    starts[s->first_op].push_back(s);
    ends[s->last_op].push_back(s);
  }
  for (int32_t i = 0; i < ops; ++i) {
    for (const ScopeModule* s : starts[i]) add(s, i, kDs3BeforeForward, false);
    for (auto it = ends[i].rbegin(); it != ends[i].rend(); ++it)
      if ((*it)->param_module >= 0) add(*it, i, kDs3AfterForward, true);
  }
  auto inside = [&](const ScopeModule* s, int32_t segment) {
    return segment_of_op_[s->first_op] == segment && segment_of_op_[s->last_op] == segment;
  };
  for (int32_t i = ops - 1; i >= 0; --i) {
    // A checkpointed segment ending here is recomputed first (training_deepspeed3_recompute.cc): the module calls it
    // contains whole, as in forward (a container it lies in, such as the model, is not called again).
    if (segment_of_op_[i] >= 0 && is_segment_end(i))
      for (int32_t j = 0; j <= i; ++j) {
        if (segment_of_op_[j] != segment_of_op_[i]) continue;
        for (const ScopeModule* s : starts[j])
          if (inside(s, segment_of_op_[i])) add(s, j, kDs3BeforeRecompute, false);
        for (auto it = ends[j].rbegin(); it != ends[j].rend(); ++it)
          if ((*it)->param_module >= 0 && inside(*it, segment_of_op_[i])) add(*it, j, kDs3AfterRecompute, true);
      }
    for (const ScopeModule* s : ends[i])
      if (grad(s)) add(s, i, kDs3BeforeBackward, false);
    for (auto it = starts[i].rbegin(); it != starts[i].rend(); ++it)
      if ((*it)->param_module >= 0 && grad(*it) && ds3_modules_[(*it)->param_module].post_backward)
        add(*it, i, kDs3AfterBackward, true);
  }
  ds3_schedule_ = zero3_schedule(calls, ds3_numel_, ds3_persistent_,
                                 {ds_config_.prefetch_bucket_size, ds_config_.max_live_parameters, ds_config_.max_reuse_distance});
  ds3_handle_flat_.assign(ds3_schedule_.handles.size(), -1);
}

// The calls due at op i's hook, in order.
void TrainingStep::ds3_run_calls(Ds3Hook hook, int32_t i) {
  while (ds3_next_call_ < ds3_calls_.size() && ds3_calls_[ds3_next_call_].hook == hook && ds3_calls_[ds3_next_call_].op == i)
    ds3_emit_call(ds3_next_call_++);
}

// A fetch: its own missing parameters gathered (one all_gather_coalesced, waited on at once: ds3_gather), each
// prefetch handle it waits on first completed (AllGatherCoalescedHandle.wait: torch.cat of each parameter's pieces,
// then the flat freed), then its prefetch launched (all_gather_coalesced: the flat of several parameters, or one
// parameter's own padded buffer, _all_gather_sequential). A release: partition(free_data) of each released one.
void TrainingStep::ds3_emit_call(size_t c) {
  const Ds3Call& call = ds3_calls_[c];
  const Zero3Action& a = ds3_schedule_.actions[c];
  const bool forward = call.hook == kDs3BeforeForward || call.hook == kDs3AfterForward;
  const Phase phase = forward ? Phase::Forward : Phase::Backward;
  if (call.hook == kDs3AfterForward || call.hook == kDs3AfterBackward || call.hook == kDs3AfterRecompute) {
    const char* kind = forward ? "deepspeed:release:" : recomputing_ ? "deepspeed:release_recompute:" : "deepspeed:release_backward:";
    ds3_release(a.released, kind + call.module, phase);
    return;
  }
  if (!a.gathered.empty()) ds3_gather(call.module, a.gathered, phase);
  auto element_of = [&](int32_t q) {
    return ds_grad_element_bytes_ > 0 ? ds_grad_element_bytes_ : dtype_bytes(layout().dtype[ds3_tensor_[q]], 1).value_or(1);
  };
  auto numel_of = [&](const std::vector<int32_t>& params) {
    std::vector<uint64_t> numel;
    for (int32_t q : params) numel.push_back(ds3_numel_[q]);
    return numel;
  };
  const std::string tag = call.module.empty() ? std::string("(root)") : call.module;
  for (int32_t h : a.waited) {
    const std::vector<int32_t>& params = ds3_schedule_.handles[h];
    if (ds3_handle_flat_[h] < 0) continue;  // one parameter: its buffer is the gathered copy
    const Zero3Gather g = zero3_gather(numel_of(params), options_.gpus);
    Step st{"deepspeed:wait:" + tag, "all_gather_wait", phase, {ds3_handle_flat_[h]}, {}, 0};
    for (size_t k = 0; k < params.size(); ++k) {
      const int32_t p = ds3_tensor_[params[k]];
      const uint64_t own = dtype_bytes(layout().dtype[p], 1).value_or(1);
      ds3_whole_[params[k]] = writer_.new_buffer("deepspeed:gathered:" + graph_.tensors[p].name,
                                                 checked_mul(g.gathered[k], own, "DeepSpeed bytes"), Category::Weight);
      st.writes.push_back(ds3_whole_[params[k]]);
    }
    program().steps.push_back(std::move(st));
  }
  if (a.prefetched < 0) return;
  const std::vector<int32_t>& params = ds3_schedule_.handles[a.prefetched];
  const Zero3Gather g = zero3_gather(numel_of(params), options_.gpus);
  const char* kind = forward ? "deepspeed:prefetch:" : recomputing_ ? "deepspeed:prefetch_recompute:" : "deepspeed:prefetch_backward:";
  Step st{kind + tag, "all_gather_coalesced", phase, {}, {}, 0};
  ds3_stage_partitions(params, st);  // the partitions it sends (their GPU copies under offload_param)
  if (g.transient > 0) {
    ds3_handle_flat_[a.prefetched] = writer_.new_buffer("deepspeed:prefetch_flat:" + tag,
                                                        checked_mul(g.transient, element_of(params[0]), "DeepSpeed bytes"),
                                                        Category::Weight);
    st.writes.push_back(ds3_handle_flat_[a.prefetched]);
  } else {
    const int32_t p = ds3_tensor_[params[0]];
    ds3_whole_[params[0]] = writer_.new_buffer("deepspeed:gathered:" + graph_.tensors[p].name,
                                               checked_mul(g.gathered[0], dtype_bytes(layout().dtype[p], 1).value_or(1),
                                                           "DeepSpeed bytes"),
                                               Category::Weight);
    st.writes.push_back(ds3_whole_[params[0]]);
  }
  program().steps.push_back(std::move(st));
}

// The report's account of the prefetch.
std::string TrainingStep::ds3_prefetch_note() const {
  if (!ds3_prefetch())
    return "no prefetch (stage3_prefetch_bucket_size 0, so stage3_max_live_parameters bounds nothing)";
  size_t fetches = 0, launches = 0, params = 0;
  uint64_t elements = 0;
  for (size_t c = 0; c < ds3_calls_.size(); ++c) {
    const Ds3Hook hook = ds3_calls_[c].hook;
    if (hook == kDs3BeforeForward || hook == kDs3BeforeBackward || hook == kDs3BeforeRecompute) ++fetches;
    const int32_t h = ds3_schedule_.actions[c].prefetched;
    if (h < 0) continue;
    ++launches;
    params += ds3_schedule_.handles[h].size();
    for (int32_t q : ds3_schedule_.handles[h]) elements += ds3_numel_[q];
  }
  return "prefetch (stage3_prefetch_bucket_size " + std::to_string(ds_config_.prefetch_bucket_size) +
         ", stage3_max_live_parameters " + std::to_string(ds_config_.max_live_parameters) + " elements) over " +
         std::to_string(fetches) + " module calls read from the graph's node scopes, forward and backward, "
         "parameter-less modules included: " + std::to_string(launches) + " of them gathered " + std::to_string(params) +
         " parameters (" + std::to_string(elements) + " elements) ahead of use; at most " +
         std::to_string(ds3_schedule_.most_available) +
         " elements gathered at once besides the persistent ones (__n_available_params)";
}

}  // namespace memplan
