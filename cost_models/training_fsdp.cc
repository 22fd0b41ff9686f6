// Training under PyTorch FSDP (FullyShardedDataParallel, ShardingStrategy.FULL_SHARD, use_orig_params=False,
// the defaults): one FlatParameter per wrapping unit (wrap_units.h), of which each GPU keeps a 1/N shard.
// Rules and sources, each from torch/distributed/fsdp/:
//  - _flat_param.py (FlatParamHandle): a unit's parameters are flattened into one FlatParameter padded to a
//    multiple of the world size, and each rank keeps numel_padded / N elements; the optimizer sees that shard
//    (its states are shard-sized).
//  - _runtime_utils.py _pre_forward_unshard / _post_forward_reshard: a unit's full flat parameter is
//    all-gathered before its forward and freed after it (FULL_SHARD), except the root's, which stays for
//    the backward; forward_prefetch defaults to False (no prefetch in forward).
//  - _pre_backward_hook: the unit is all-gathered again before its backward and, with the default
//    backward_prefetch=BACKWARD_PRE, the next unit in backward order is prefetched at the same time;
//    _limiter_utils.py's _FreeEventQueue (limit_all_gathers) keeps at most two all-gathers in flight.
//  - _post_backward_hook: after the unit's backward, flat_param.grad is the unsharded grad (the view grads
//    concatenated by autograd's SplitWithSizesBackward), F.pad-ded to the multiple of N when needed, and
//    reduce-scattered into a new shard-sized grad; the unsharded flat parameter is freed (_reshard).
#include <algorithm>

#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

void TrainingStep::add_fsdp_shards() {
  const WrapUnits& w = context_.units;
  const size_t n = w.count();
  unit_bytes_.assign(n, 0);
  unit_padded_bytes_.assign(n, 0);
  unit_shard_.assign(n, -1);
  unit_gathered_forward_.assign(n, -1);
  unit_gathered_backward_.assign(n, -1);
  unit_grad_shard_.assign(n, -1);
  unit_first_param_op_.assign(n, -1);
  fsdp_pending_grad_.assign(graph_.tensors.size(), -1);
  std::vector<uint64_t> element(n, 0);
  for (int32_t p : context_.params) {
    const int32_t u = w.unit_of_tensor[p];
    unit_bytes_[u] = checked_add(unit_bytes_[u], bytes_of(p), "parameter bytes");
    if (element[u] == 0) element[u] = std::max(1, dtype_bits(context_.dtype[p]) / 8);
  }
  const uint64_t gpus = static_cast<uint64_t>(options_.gpus);
  for (size_t u = 0; u < n; ++u) {
    if (unit_bytes_[u] == 0) continue;
    const uint64_t numel = unit_bytes_[u] / element[u];
    const uint64_t per_rank = numel / gpus + (numel % gpus != 0);  // padded to a multiple of the world size
    unit_padded_bytes_[u] = checked_mul(checked_mul(per_rank, gpus, "FSDP padding"), element[u], "FSDP padding");
    const int32_t b = writer_.new_buffer("fsdp_flat_param_shard:" + w.names[u], per_rank * element[u], Category::Weight);
    program().buffers[b].resident = true;
    unit_shard_[u] = b;
    result_.param_bytes = checked_add(result_.param_bytes, per_rank * element[u], "parameter bytes");
  }
  for (size_t i = 0; i < context_.ops.size(); ++i)
    for (int32_t t : context_.ops[i].inputs) {
      const int32_t p = context_.tied_to[t] >= 0 ? context_.tied_to[t] : t;
      if (!context_.is_param[p]) continue;
      const int32_t u = w.unit_of_tensor[p];
      if (unit_first_param_op_[u] < 0) unit_first_param_op_[u] = static_cast<int32_t>(i);
    }
}

// Grads resident before the step (gradient accumulation, torch 1.x zero_grad): FSDP's _saved_grad_shard,
// one shard per unit, into which each new reduce-scattered shard is added.
void TrainingStep::add_fsdp_resident_grads() {
  for (size_t u = 0; u < context_.units.count(); ++u) {
    if (unit_shard_[u] < 0) continue;
    const uint64_t bytes = program().buffers[unit_shard_[u]].bytes;
    unit_grad_shard_[u] = writer_.new_buffer("fsdp_grad_shard:" + context_.units.names[u], bytes, Category::Gradient);
    program().buffers[unit_grad_shard_[u]].resident = true;
    result_.grad_bytes = checked_add(result_.grad_bytes, bytes, "gradient bytes");
  }
}

// The unit's all-gathered (unsharded, padded) flat parameter, gathered in `st` if it is not yet. The root's
// forward copy is kept for the backward.
int32_t TrainingStep::fsdp_gathered(int32_t unit, bool backward, Step& st) {
  if (unit_shard_[unit] < 0) return -1;
  if (unit == 0 && backward) backward = unit_gathered_forward_[0] < 0;
  int32_t& b = backward ? unit_gathered_backward_[unit] : unit_gathered_forward_[unit];
  if (b < 0) {
    b = writer_.new_buffer("fsdp_unsharded:" + context_.units.names[unit] + (backward ? ":backward" : ""),
                           unit_padded_bytes_[unit], Category::Weight);
    st.writes.push_back(b);
    add_unique(st.reads, unit_shard_[unit]);
  } else {
    add_unique(st.reads, b);
  }
  return b;
}

// Before the backward of a unit's last forward op: its pre-backward hook all-gathers it (unless prefetched)
// and prefetches the next unit in backward order (BACKWARD_PRE).
void TrainingStep::fsdp_pre_backward(int32_t op) {
  const WrapUnits& w = context_.units;
  const int32_t u = w.unit_of_op[op];
  if (u == 0 || w.last_op[u] != op || unit_shard_[u] < 0) return;
  Step st{"fsdp_pre_backward:" + w.names[u], "all_gather", Phase::Backward, {}, {}, 0};
  fsdp_gathered(u, /*backward=*/true, st);
  int32_t next = -1;
  for (size_t v = 1; v < w.count(); ++v)
    if (unit_shard_[v] >= 0 && w.last_op[v] < w.first_op[u] && (next < 0 || w.last_op[v] > w.last_op[next]))
      next = static_cast<int32_t>(v);
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
    if (unit_first_param_op_[u] != op || unit_shard_[u] < 0) continue;
    Step cat{"fsdp_post_backward:" + w.names[u], "split_with_sizes_backward", Phase::Backward, {}, {}, 0};
    bool any_grad = false;
    for (int32_t p : context_.params)
      if (w.unit_of_tensor[p] == u && fsdp_pending_grad_[p] >= 0) {
        add_unique(cat.reads, fsdp_pending_grad_[p]);
        any_grad = true;
      }
    add_unique(cat.reads, u == 0 ? unit_gathered_forward_[0] : unit_gathered_backward_[u]);
    const int32_t flat = writer_.new_buffer("fsdp_unsharded_grad:" + w.names[u], unit_bytes_[u], Category::ActivationGrad);
    if (any_grad) cat.writes.push_back(flat);
    program().steps.push_back(std::move(cat));
    if (!any_grad) continue;
    Step rs{"fsdp_reduce_scatter:" + w.names[u], "reduce_scatter", Phase::Backward, {flat}, {}, 0};
    if (unit_padded_bytes_[u] > unit_bytes_[u])
      rs.writes.push_back(writer_.new_buffer("fsdp_unsharded_grad:" + w.names[u] + ":padded", unit_padded_bytes_[u],
                                             Category::ActivationGrad));
    const uint64_t shard = program().buffers[unit_shard_[u]].bytes;
    const int32_t fresh = writer_.new_buffer("fsdp_grad_shard:" + w.names[u] + (unit_grad_shard_[u] >= 0 ? ":new" : ""),
                                             shard, Category::Gradient);
    rs.writes.push_back(fresh);
    if (unit_grad_shard_[u] >= 0) {
      rs.reads.push_back(unit_grad_shard_[u]);  // _saved_grad_shard += new_sharded_grad
    } else {
      program().buffers[fresh].live_at_end = true;
      unit_grad_shard_[u] = fresh;
      result_.grad_bytes = checked_add(result_.grad_bytes, shard, "gradient bytes");
    }
    program().steps.push_back(std::move(rs));
  }
}

std::vector<TrainingStep::UpdateTarget> TrainingStep::update_targets() const {
  std::vector<UpdateTarget> out;
  if (fsdp()) {
    for (size_t u = 0; u < context_.units.count(); ++u)
      if (unit_shard_[u] >= 0)
        out.push_back({"fsdp:" + context_.units.names[u], unit_grad_shard_[u], result_.program.buffers[unit_shard_[u]].bytes});
    return out;
  }
  for (int32_t p : context_.params) out.push_back({graph_.tensors[p].name, param_grad_buffer_[p], state_bytes(p)});
  return out;
}

}  // namespace memplan
