// Training under PyTorch FSDP (FullyShardedDataParallel, ShardingStrategy.FULL_SHARD): one FlatParameter per
// wrapping unit (wrap_units.h) holding every parameter of the unit, trained or frozen, of which each GPU keeps
// a 1/N shard. use_orig_params=False (the default) when every parameter trains; with frozen parameters (LoRA,
// QLoRA, --trainable/--frozen) use_orig_params=True, which PEFT needs and FSDP requires for a unit that mixes
// them (_flat_param.py, FlatParamHandle._validate_tensors_to_flatten: "Must flatten tensors with uniform
// `requires_grad` when `use_orig_params=False`").
// Rules and sources, each from torch/distributed/fsdp/:
//  - _flat_param.py (FlatParamHandle._init_flat_param_and_metadata, flatten_tensors, _get_shard): a unit's
//    parameters are flattened into one FlatParameter padded to a multiple of the world size, and each rank
//    keeps numel_padded / N elements. With use_orig_params=True (align_addresses) each parameter also starts
//    at a multiple of 16 bytes (_get_aligned_numel: ALIGNMENT = 16), and the world-size padding is part of
//    the flat parameter itself. Its requires_grad is the OR of its parameters'.
//  - use_orig_params=False: the optimizer sees the flat shard (its states are shard-sized). True: it sees the
//    original parameters, each a view of its part of the rank's shard (_use_sharded_views:
//    flat_param[offset : offset + numel_in_shard]), so its states cover the trainable elements of the shard:
//    the busiest rank's count is this program's.
//  - _runtime_utils.py _pre_forward_unshard / _post_forward_reshard: a unit's full flat parameter is
//    all-gathered before its forward and freed after it (FULL_SHARD), except the root's, which stays for
//    the backward; forward_prefetch defaults to False (no prefetch in forward).
//  - _pre_backward_hook: the unit is all-gathered again before its backward and, with the default
//    backward_prefetch=BACKWARD_PRE, the next unit in backward order is prefetched at the same time;
//    _limiter_utils.py's _FreeEventQueue (limit_all_gathers) keeps at most two all-gathers in flight.
//  - _post_backward_hook: after the unit's backward, flat_param.grad is the unsharded grad (the view grads
//    concatenated by autograd's SplitWithSizesBackward, zeros where a view got none: the whole flat
//    parameter), F.pad-ded to the multiple of N when needed, and reduce-scattered into a new shard-sized
//    grad; the unsharded flat parameter is freed (_reshard). With use_orig_params=True the forward's
//    parameters are views of the unsharded flat parameter (_use_unsharded_views(as_params=False), a
//    torch.split of it), so in a unit that trains, a frozen parameter's view requires grad and autograd
//    computes its grad too (FullyShardedDataParallel's docstring warns of "higher than expected gradient
//    memory usage" when a unit mixes frozen and trainable parameters; training_context.cc marks them). A
//    unit with no trainable parameter gets no grad: it is resharded after its backward
//    (_register_post_backward_reshard_only_hook) at the same point.
//  - bitsandbytes (QLoRA): Params4bit keeps the packed 4-bit values in a tensor of `quant_storage`
//    (functional.py quantize_4bit: torch.zeros(((n + 1) // mod, 1), dtype=quant_storage), mod = 2 x its
//    element size), which FSDP-QLoRA sets to the model's float type so that the unit flattens with one
//    dtype: the flat parameter holds those elements. The QuantState (absmax and the double-quantization
//    constants) is an attribute of the weight, not a parameter: every GPU keeps it whole. The units'
//    dtypes are not checked: a unit is sized by its parameters' bytes (docs/cost-models.md 3.9).
#include <algorithm>
#include <map>

#include "cost_models/frozen_storage.h"
#include "cost_models/fsdp_groups.h"
#include "cost_models/lora_adapters.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

namespace {

// "m.weight" and "m.bias" -> "m"; any other name is its own module.
std::string module_key(const std::string& name) {
  for (const std::string suffix : {".weight", ".bias"})
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return name.substr(0, name.size() - suffix.size());
  return name;
}

// The order FSDP flattens the parameters in: named_parameters' (_init_flat_param_and_metadata walks
// module.named_modules()), which the initializers follow, except --lora-rank's adapters, appended to the
// initializers: PEFT's LoraLayer registers base_layer before lora_A and lora_B (peft/tuners/lora/layer.py),
// so each adapter follows its base module's weight and bias.
std::vector<int32_t> flattening_order(const Graph& g, const std::vector<int32_t>& parameters) {
  std::map<std::string, std::vector<int32_t>> adapters;
  std::vector<int32_t> base, order;
  for (int32_t p : parameters) {
    const std::string m = lora_adapter_module(g.tensors[p].name);
    if (m.empty()) base.push_back(p);
    else adapters[m].push_back(p);
  }
  for (size_t i = 0; i < base.size(); ++i) {
    order.push_back(base[i]);
    const std::string m = module_key(g.tensors[base[i]].name);
    if (i + 1 < base.size() && module_key(g.tensors[base[i + 1]].name) == m) continue;
    auto it = adapters.find(m);
    if (it == adapters.end()) continue;
    order.insert(order.end(), it->second.begin(), it->second.end());
    adapters.erase(it);
  }
  for (int32_t p : parameters)  // an adapter whose base is not a parameter here
    if (!lora_adapter_module(g.tensors[p].name).empty() && adapters.count(lora_adapter_module(g.tensors[p].name)))
      order.push_back(p);
  return order;
}

}  // namespace

uint64_t TrainingStep::params4bit_packed(int32_t p, uint64_t element) {
  const uint64_t count = (graph_.tensors[p].elements() + 1) / (2 * element);  // the packed values in quant_storage
  const uint64_t state = layout().stored_bytes[p] - std::min(layout().stored_bytes[p], count * element);
  const int32_t b = writer_.new_buffer(graph_.tensors[p].name + ":quant_state", state, Category::Weight);
  program().buffers[b].resident = true;
  result_.frozen_stored_bytes = checked_add(result_.frozen_stored_bytes, state, "frozen weight bytes");
  return count;
}

void TrainingStep::add_fsdp_shards() {
  const WrapUnits& w = context_.units;
  const size_t n = w.count();
  const bool orig_params = context_.module_parameters.size() > context_.params.size();  // frozen ones exist
  init_fsdp_units();
  // Per unit, in flattening order: each member's [start, end) element range and whether it trains.
  struct Range {
    uint64_t start, end;
    bool trains;
  };
  std::vector<std::vector<Range>> ranges(n);
  // Per unit: the element bytes of the gathered flat parameter (MixedPrecision's param_dtype, the layout's) and of
  // the sharded one (the model's type under MixedPrecision, training_fsdp_mp.cc).
  std::vector<uint64_t> element(n, 0), stored(n, 0), numel(n, 0);
  for (int32_t p : flattening_order(graph_, context_.module_parameters)) {
    const int32_t u = layout().shard_group[p];
    if (element[u] == 0) {
      element[u] = std::max(1, dtype_bits(layout().dtype[p]) / 8);
      stored[u] = options_.fsdp2_mp ? std::max(1, dtype_bits(graph_.tensors[p].dtype) / 8) : element[u];
    }
    const uint64_t e = element[u];
    uint64_t count = bytes_of(p) / e + (bytes_of(p) % e != 0);
    if (layout().storage[p] == FrozenStorage::Nf4) {
      count = params4bit_packed(p, e);
    } else if (layout().stored_bytes[p] > 0) {
      count = layout().stored_bytes[p] / e + (layout().stored_bytes[p] % e != 0);
    }
    // _get_aligned_numel(unsharded_dtype=_fwd_bwd_param_dtype): param_dtype's element under MixedPrecision
    const uint64_t aligned = orig_params ? std::max<uint64_t>(1, 16 / e) : 1;
    const uint64_t start = numel[u] % aligned == 0 ? numel[u] : numel[u] + aligned - numel[u] % aligned;
    numel[u] = checked_add(start, count, "FSDP flat parameter");
    ranges[u].push_back({start, numel[u], context_.is_param[p]});
    unit_trains_[u] = unit_trains_[u] || context_.is_param[p];
  }
  // --frozen-dtype fp16/bf16 under MixedPrecision (accelerate over a half checkpoint): the flat parameters were made
  // in the half type, and accelerate upcasts to float32 only those that require grad (Accelerator.prepare_model,
  // v1.14.0: `param.requires_grad` of each module._flat_param, its parameters' OR). A unit with nothing to train
  // keeps its half flat parameter, its fwd/bwd param_dtype its own (_uses_param_mixed_precision false: no _mp_shard).
  const DType frozen_half = frozen_half_dtype(options_);
  if (options_.fsdp2_mp && frozen_half != DType::Float32)
    for (size_t u = 0; u < n; ++u)
      if (numel[u] > 0 && !unit_trains_[u]) stored[u] = std::max(1, dtype_bits(frozen_half) / 8);
  const uint64_t gpus = static_cast<uint64_t>(options_.gpus);
  for (size_t u = 0; u < n; ++u) {
    if (numel[u] == 0) continue;
    const uint64_t per_rank = numel[u] / gpus + (numel[u] % gpus != 0);  // padded to a multiple of the world size
    unit_padded_bytes_[u] = checked_mul(checked_mul(per_rank, gpus, "FSDP padding"), element[u], "FSDP padding");
    // With use_orig_params the padding is part of the flat parameter and of its unsharded grad.
    unit_bytes_[u] = orig_params ? unit_padded_bytes_[u] : checked_mul(numel[u], element[u], "FSDP flat parameter");
    uint64_t busiest = 0;  // the trainable elements of the busiest rank's shard
    for (uint64_t r = 0; r < gpus && unit_trains_[u]; ++r) {
      const uint64_t lo = r * per_rank, hi = lo + per_rank;
      uint64_t mine = 0;
      for (const Range& m : ranges[u])
        if (m.trains && m.end > lo && m.start < hi) mine += std::min(m.end, hi) - std::max(m.start, lo);
      busiest = std::max(busiest, mine);
    }
    unit_state_bytes_[u] = orig_params ? busiest * stored[u] : per_rank * stored[u];
    unit_grad_shard_bytes_[u] = per_rank * stored[u];
    unit_element_[u] = element[u];
    if (options_.fsdp2_mp && element[u] != stored[u]) unit_mp_shard_bytes_[u] = per_rank * element[u];
    if (!fsdp_cpu_offload()) {
      add_fsdp_shard_buffer(u, "fsdp_flat_param_shard:", per_rank * stored[u]);
      continue;
    }
    // CPUOffload (training_fsdp_offload.cc): _local_shard and _cpu_grad (every unit) and the states on the host.
    unit_has_shards_[u] = true;
    result_.fsdp_offload_host_bytes = checked_add(
        result_.fsdp_offload_host_bytes,
        fsdp_offload_host_bytes(per_rank * stored[u], per_rank * stored[u], unit_trains_[u] ? unit_state_bytes_[u] : 0),
        "FSDP CPU offload");
  }
}

// The per-unit state both FSDP1 and FSDP2 (training_fsdp2.cc) keep, and each unit's first op reading its parameters.
void TrainingStep::init_fsdp_units() {
  const size_t n = context_.units.count();
  unit_bytes_.assign(n, 0);
  unit_padded_bytes_.assign(n, 0);
  unit_state_bytes_.assign(n, 0);
  unit_grad_shard_bytes_.assign(n, 0);
  unit_element_.assign(n, 0);
  unit_mp_shard_bytes_.assign(n, 0);
  unit_no_sync_grad_.assign(n, -1);
  unit_trains_.assign(n, false);
  unit_shard_.assign(n, -1);
  unit_has_shards_.assign(n, false);
  unit_gathered_forward_.assign(n, -1);
  unit_gathered_backward_.assign(n, -1);
  unit_grad_shard_.assign(n, -1);
  unit_first_param_op_.assign(n, -1);
  fsdp_pending_grad_.assign(graph_.tensors.size(), -1);
  for (size_t i = 0; i < context_.ops.size(); ++i)
    for (int32_t t : context_.ops[i].inputs) {
      if (layout().shard[t] != ParameterShard::FlatShard) continue;
      const int32_t u = layout().shard_group[t];
      if (unit_first_param_op_[u] < 0) unit_first_param_op_[u] = static_cast<int32_t>(i);
    }
}

// The resident shard GPU 0 keeps of unit `u`'s parameters.
void TrainingStep::add_fsdp_shard_buffer(int32_t u, const std::string& prefix, uint64_t bytes) {
  const int32_t b = writer_.new_buffer(prefix + context_.units.names[u], bytes, Category::Weight);
  program().buffers[b].resident = true;
  unit_shard_[u] = b;
  unit_has_shards_[u] = true;
  result_.param_bytes = checked_add(result_.param_bytes, bytes, "parameter bytes");
}

// Grads resident before the step (gradient accumulation, torch 1.x zero_grad): FSDP's _saved_grad_shard,
// one shard per unit, into which each new reduce-scattered shard is added (FSDP2: the sharded parameters'
// .grad, foreach_reduce's `sharded_param.grad._local_tensor += new_sharded_grad`).
// Under --fsdp-cpu-offload they are on the host (training_fsdp2.cc; FSDP1 refuses accumulation there).
void TrainingStep::add_fsdp_resident_grads() {
  if (fsdp_cpu_offload()) return;
  for (size_t u = 0; u < context_.units.count(); ++u) {
    if (!fsdp_unit_sharded(u) || !unit_trains_[u]) continue;
    const uint64_t bytes = unit_grad_shard_bytes_[u];
    unit_grad_shard_[u] = writer_.new_buffer("fsdp_grad_shard:" + context_.units.names[u], bytes, Category::Gradient);
    program().buffers[unit_grad_shard_[u]].resident = true;
    result_.grad_bytes = checked_add(result_.grad_bytes, bytes, "gradient bytes");
  }
}

// The unit's all-gathered (unsharded, padded) flat parameter, gathered in `st` if it is not yet. A kept unit's
// forward copy (the root's; torchtitan's [norm, output]: fsdp_groups.h) is its backward's.
int32_t TrainingStep::fsdp_gathered(int32_t unit, bool backward, Step& st) {
  if (!fsdp_unit_sharded(unit)) return -1;
  if (kept_after_forward(context_.units, options_.fsdp_wrap, unit) && backward) backward = unit_gathered_forward_[unit] < 0;
  int32_t& b = backward ? unit_gathered_backward_[unit] : unit_gathered_forward_[unit];
  if (b < 0 && fsdp2()) {
    b = fsdp2_copy_out(unit, backward, st);
  } else if (b < 0) {
    const std::string suffix = context_.units.names[unit] + (backward ? ":backward" : "");
    b = writer_.new_buffer("fsdp_unsharded:" + suffix, unit_padded_bytes_[unit], Category::Weight);
    st.writes.push_back(b);
    add_unique(st.reads, fsdp_all_gather_input(unit, suffix, st));
  } else {
    add_unique(st.reads, b);
  }
  return b;
}

// Whether unit `v` has a backward: the pre-backward hook sits on the unit's forward outputs that require grad
// (_runtime_utils.py _register_pre_backward_hooks; FSDP2: _fsdp_state.py FSDPState._register_pre_backward_hook): a
// unit none of whose outputs needs a grad (frozen, before anything that trains) is not gathered again.
bool TrainingStep::fsdp_has_backward(int32_t v) const {
  const WrapUnits& w = context_.units;
  return outputs_need_grad(w.first_op[v], w.last_op[v], [&](int32_t i) { return w.unit_of_op[i] == v; });
}

// Whether an op of [first, last] that `in` admits makes an output that requires grad: the rule a module's pre-backward
// hook follows (FSDP's, above; DeepSpeed ZeRO-3's PreBackwardFunctionForModule, training_deepspeed3.cc).
bool TrainingStep::outputs_need_grad(int32_t first, int32_t last, const std::function<bool(int32_t)>& in) const {
  for (int32_t i = first; i >= 0 && i <= last; ++i)
    if (in(i))
      for (int32_t t : context_.ops[i].outputs)
        if (context_.requires_grad[t]) return true;
  return false;
}

// The non-root unit whose backward comes next after the ops before `before_op` (forward order: the latest
// ending before it) and that has a backward; -1: none.
int32_t TrainingStep::fsdp_next_in_backward(int32_t before_op) const {
  const WrapUnits& w = context_.units;
  int32_t next = -1;
  for (size_t vv = 1; vv < w.count(); ++vv) {
    const int32_t v = static_cast<int32_t>(vv);
    if (fsdp_unit_sharded(v) && w.last_op[v] < before_op && (next < 0 || w.last_op[v] > w.last_op[next]) &&
        fsdp_has_backward(v))
      next = v;
  }
  return next;
}

// Before the backward of a unit's last forward op: its pre-backward hook all-gathers it (unless prefetched)
// and prefetches the next unit in backward order (BACKWARD_PRE).
void TrainingStep::fsdp_pre_backward(int32_t op) {
  const WrapUnits& w = context_.units;
  const int32_t u = w.unit_of_op[op];
  if (u == 0 || w.last_op[u] != op || !fsdp_unit_sharded(u) || !fsdp_has_backward(u)) return;
  Step st{"fsdp_pre_backward:" + w.names[u], "all_gather", Phase::Backward, {}, {}, 0};
  fsdp_gathered(u, /*backward=*/true, st);
  const int32_t next = fsdp_next_in_backward(w.first_op[u]);
  // _unshard copies (casts) and gathers one handle, then the prefetch the next: their transients never overlap.
  if (next > 0 && (fsdp_cpu_offload() || unit_mp_shard_bytes_[next] > 0)) {
    program().steps.push_back(std::move(st));
    st = Step{"fsdp_backward_prefetch:" + w.names[next], "all_gather", Phase::Backward, {}, {}, 0};
  }
  if (next > 0) fsdp_gathered(next, /*backward=*/true, st);
  program().steps.push_back(std::move(st));
}

// A parameter's grad under FSDP: the grad of its view of the flat parameter, held by autograd until every
// view's grad of the unit has arrived; a second contribution is added into the first.
void TrainingStep::fsdp_add_param_grad(int32_t p, Step& st) {
  const int32_t incoming = writer_.new_buffer("grad:" + graph_.tensors[p].name + ":view", bytes_of(p), Category::ActivationGrad);
  st.writes.push_back(incoming);
  if (fsdp_pending_grad_[p] >= 0) add_unique(st.reads, fsdp_pending_grad_[p]);
  else fsdp_pending_grad_[p] = incoming;
}

// After the backward of the first op reading the unit's parameters: the view grads concatenated into the
// unit's unsharded grad, the unsharded parameter freed; then the grad padded and reduce-scattered.
void TrainingStep::fsdp_post_backward(int32_t op) {
  const WrapUnits& w = context_.units;
  for (size_t uu = 0; uu < w.count(); ++uu) {
    const int32_t u = static_cast<int32_t>(uu);
    if (unit_first_param_op_[u] != op || !fsdp_unit_sharded(u)) continue;
    Step cat{"fsdp_post_backward:" + w.names[u], "split_with_sizes_backward", Phase::Backward, {}, {}, 0};
    bool any_grad = false;
    for (int32_t p : context_.module_parameters)
      if (layout().shard_group[p] == u && fsdp_pending_grad_[p] >= 0) {
        add_unique(cat.reads, fsdp_pending_grad_[p]);
        any_grad = true;
      }
    const int32_t gathered =
        kept_after_forward(context_.units, options_.fsdp_wrap, u) && unit_gathered_forward_[u] >= 0 ? unit_gathered_forward_[u] : unit_gathered_backward_[u];
    if (gathered < 0 && !any_grad) continue;  // not gathered for a backward: nothing to free
    if (gathered >= 0) add_unique(cat.reads, gathered);
    if (!any_grad) {  // a unit that does not train: only the reshard
      program().steps.push_back(std::move(cat));
      continue;
    }
    const int32_t flat = writer_.new_buffer("fsdp_unsharded_grad:" + w.names[u], unit_bytes_[u], Category::ActivationGrad);
    cat.writes.push_back(flat);
    program().steps.push_back(std::move(cat));
    const int32_t kept = unit_no_sync_grad_[u];
    if (kept >= 0)  // AccumulateGrad adds this micro-batch's grad into the one kept under no_sync() (in place)
      program().steps.push_back({"fsdp_no_sync_accumulate:" + w.names[u], "add_", Phase::Backward, {flat, kept}, {}, 0});
    fsdp_reduce_scatter(u, kept >= 0 ? kept : flat);
  }
}

// The reduce-scattered grad shard of unit `u`, written by `rs`: the unit's grad, or added into the resident one
// (FSDP1: _saved_grad_shard += new_sharded_grad; FSDP2 foreach_reduce: sharded_param.grad._local_tensor +=).
void TrainingStep::fsdp_new_grad_shard(int32_t u, Step& rs) {
  const uint64_t shard = unit_grad_shard_bytes_[u];
  const int32_t fresh = writer_.new_buffer((options_.shard == Sharding::Fsdp2 ? "fsdp2_grad_shard:" : "fsdp_grad_shard:") +
                                               context_.units.names[u] + (unit_grad_shard_[u] >= 0 ? ":new" : ""),
                                           shard, Category::Gradient);
  rs.writes.push_back(fresh);
  if (unit_grad_shard_[u] >= 0) {
    rs.reads.push_back(unit_grad_shard_[u]);
  } else {
    program().buffers[fresh].live_at_end = true;
    unit_grad_shard_[u] = fresh;
    result_.grad_bytes = checked_add(result_.grad_bytes, shard, "gradient bytes");
  }
}

std::vector<TrainingStep::UpdateTarget> TrainingStep::update_targets() const {
  std::vector<UpdateTarget> out;
  if (ds3()) return ds3_targets();  // the float32 sub-groups
  if (deepspeed()) {  // the float32 partition, on the GPU unless offload_optimizer
    if (ds_config_.offload_optimizer == DeepSpeedOffload::None) out.push_back(ds_target(-1));
    return out;
  }
  if (fsdp_cpu_offload()) return out;  // the optimizer steps the host shards (training_fsdp_offload.cc)
  if (flat_shards()) {
    for (size_t u = 0; u < context_.units.count(); ++u)
      if (fsdp_unit_sharded(u) && unit_trains_[u])
        out.push_back({"fsdp:" + context_.units.names[u], unit_grad_shard_[u], unit_state_bytes_[u], 0});
    return out;
  }
  for (int32_t p : context_.params) out.push_back(param_target(p));
  return out;
}

TrainingStep::UpdateTarget TrainingStep::param_target(int32_t p) const {
  const uint64_t local = bytes_of(p), element = dtype_bytes(layout().dtype[p], 1).value_or(1);
  return {graph_.tensors[p].name, param_grad_buffer_[p], state_bytes(p), local / element};
}

}  // namespace memplan
