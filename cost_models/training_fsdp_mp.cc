// FSDP1 (--shard fsdp, FullyShardedDataParallel FULL_SHARD): what a unit's all-gather reads and how its unsharded grad
// is reduce-scattered, with and without MixedPrecision(param_dtype, reduce_dtype) (--fsdp2-mp PARAM:REDUCE over a
// float32 model; TrainingOptions::precision is then param_dtype, so every tensor of the forward and backward, the
// gathered flat parameter and its grad included, is in it: training_context.cc's types). Read in
// torch/distributed/fsdp/ at pytorch 01caf79e (_flat_param.py) and 3ade90a6 (_runtime_utils.py), both 2.x:
//  - FlatParamHandle._init_param_reduce_dtypes: _fwd_bwd_param_dtype = param_dtype, _reduce_dtype = reduce_dtype (both
//    given here); _uses_param_mixed_precision is param_dtype != the flat parameter's own type (float32).
//    _get_aligned_numel(unsharded_dtype=self._fwd_bwd_param_dtype): with use_orig_params=True each parameter starts at
//    a multiple of 16 bytes *of param_dtype* (8 bf16 elements), which fixes the flat layout (training_fsdp.cc).
//  - init_flat_param_attributes: _local_shard (the sharded flat parameter) keeps the model's type: the resident shard,
//    the grad shard (_cast_grad_to_param_dtype casts it to flat_param.dtype) and the optimizer's states are float32;
//    _full_param_padded, the all-gather destination, is allocated in param_dtype; _mp_shard, a shard-sized
//    param_dtype tensor on the GPU, is created with its storage freed.
//  - pre_unshard -> _use_low_precision_shard (the branch before the CPU offload one): _alloc_storage(_mp_shard) and
//    `_mp_shard.copy_(_local_shard.to(device, non_blocking=True))`: without offload .to is the shard itself; with
//    CPUOffload(offload_params=True) it is a float32 GPU copy of the pinned host shard, freed when the statement ends,
//    so the cast holds both. unshard all-gathers _mp_shard into the param_dtype _full_param_padded, then post_unshard
//    -> _free_low_precision_sharded_param frees _mp_shard: a transient of the all-gather. _runtime_utils.py _unshard
//    runs pre_unshard, unshard and post_unshard of one handle before a prefetch's.
//  - _post_backward_hook: flat_param.grad is the unsharded grad in param_dtype (autograd's, held as the local
//    autograd_computed_grad to the end of the hook); `flat_param.grad.data = flat_param.grad.to(handle._reduce_dtype)`
//    when it differs: a reduce_dtype copy (unsharded_grad, also a local); F.pad to the multiple of the world size
//    (padded_unsharded_grad) when use_orig_params=False leaves it short; new_sharded_grad = empty_like(chunks[0]) in
//    reduce_dtype, reduce-scattered; _cast_grad_to_param_dtype: `sharded_grad.data = sharded_grad.data.to(param.dtype)`
//    when reduce_dtype is not float32 (a float32 copy, the reduce_dtype one freed on return); then it becomes (or is
//    added into) _saved_grad_shard, and under offload is copied to _cpu_grad. Every local above lives until the hook
//    returns, after the cast.
// --fsdp-no-sync with --grad-accum N: the first N-1 micro-batches run inside FullyShardedDataParallel.no_sync()
// (_sync_gradients False), as accelerate's Accelerator.accumulate does (the program is the last micro-batch, synced):
//  - _post_backward_hook under no_sync: the unsharded parameter is resharded (FULL_SHARD frees it:
//    _should_free_in_backward), then it returns before the reduce-scatter: flat_param.grad, the unsharded flat grad
//    (the unit's whole flat parameter, frozen parts and use_orig_params padding included; param_dtype under
//    MixedPrecision), stays on the GPU, one per trained unit. FullyShardedDataParallel.no_sync's docstring: FSDP
//    "will accumulate the full model gradients (instead of gradient shards) until the eventual sync"; under CPU
//    offload they are not offloaded until then.
//  - FlatParamHandle.prepare_gradient_for_backward leaves a grad of the unpadded unsharded size alone (it only saves a
//    shard-sized one as _saved_grad_shard), so the last micro-batch's backward finds every unit's unsharded grad, and
//    AccumulateGrad adds the new one into it in place (torch/csrc/autograd/functions/accumulate_grad.h,
//    `variable_grad += new_grad` when grad mode is off): the new one is a transient. The hook then reduce-scatters the
//    sum as above and drops it (`flat_param.grad = None`; the local freed when the hook returns).
//  - No grad shard exists before the step (the optimizer's zero_grad(set_to_none=True) dropped the last one); with
//    zero_grad keeping them (--torch 1.13) the zeroed shard becomes _saved_grad_shard and stays.
//  The synced micro-batch holds at its first post-backward every unit's kept grad, the activations and the transients
//  of its reduce-scatter, more than an earlier micro-batch at the same point (which has no reduce-scatter): it is the
//  one modelled.
//  - keep_low_precision_grads (default False) is not modelled; buffer_dtype: a float buffer the graph holds is counted
//    in param_dtype as any other tensor (training_context.cc), as accelerate's policy (buffer_dtype = param_dtype) does.
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

// What unit `u`'s all-gather (in `st`) reads: its resident shard; under CPU offload the GPU copy of the host shard
// (pre_unshard's flat_param_to), a step of its own before; under MixedPrecision the _mp_shard, cast from the shard in
// the all-gather's step (offload: in the copy's, with the float32 GPU copy as its transient).
int32_t TrainingStep::fsdp_all_gather_input(int32_t u, const std::string& suffix, Step& st) {
  const uint64_t shard = unit_grad_shard_bytes_[u], mp_shard = unit_mp_shard_bytes_[u];  // per_rank x float32, x param_dtype
  if (fsdp_cpu_offload() && mp_shard == 0)
    return fsdp_offload_h2d("fsdp_offload_h2d:" + suffix, "fsdp_shard_h2d:" + suffix, shard, st.phase);
  if (fsdp_cpu_offload())
    return fsdp_offload_h2d("fsdp_offload_h2d:" + suffix, "fsdp_mp_shard:" + suffix, mp_shard, st.phase,
                            "fsdp_shard_h2d:" + suffix, shard);
  if (mp_shard > 0) st.writes.push_back(writer_.new_buffer("fsdp_mp_shard:" + suffix, mp_shard, Category::Weight));
  return unit_shard_[u];
}

// The post-backward hook's reduce-scatter of unit `u`'s unsharded grad `flat` (param_dtype): the reduce_dtype copy,
// the padding, the reduce_dtype shard and its float32 copy, each local held to the hook's end.
void TrainingStep::fsdp_reduce_scatter(int32_t u, int32_t flat) {
  const std::string& name = context_.units.names[u];
  const uint64_t element = unit_element_[u];
  const uint64_t reduced = options_.fsdp2_mp ? static_cast<uint64_t>(dtype_bits(options_.fsdp2_reduce_dtype) / 8) : element;
  auto in_reduce_dtype = [&](uint64_t bytes) { return checked_mul(bytes / element, reduced, "FSDP reduce dtype"); };
  std::vector<int32_t> held{flat};  // autograd_computed_grad, unsharded_grad, padded_unsharded_grad
  if (reduced != element) {
    const int32_t cast =
        writer_.new_buffer("fsdp_unsharded_grad:" + name + ":reduce_dtype", in_reduce_dtype(unit_bytes_[u]), Category::ActivationGrad);
    program().steps.push_back({"fsdp_reduce_dtype_cast:" + name, "_to_copy", Phase::Backward, {flat}, {cast}, 0});
    held.push_back(cast);
  }
  Step rs{"fsdp_reduce_scatter:" + name, "reduce_scatter", Phase::Backward, held, {}, 0};
  if (unit_padded_bytes_[u] > unit_bytes_[u]) {
    const int32_t padded = writer_.new_buffer("fsdp_unsharded_grad:" + name + ":padded", in_reduce_dtype(unit_padded_bytes_[u]),
                                              Category::ActivationGrad);
    rs.writes.push_back(padded);
    held.push_back(padded);
  }
  const uint64_t output = in_reduce_dtype(unit_padded_bytes_[u]) / static_cast<uint64_t>(options_.gpus);
  if (output != unit_grad_shard_bytes_[u]) {  // new_sharded_grad in reduce_dtype, then its float32 copy
    const int32_t out = writer_.new_buffer("fsdp_reduce_output:" + name, output, Category::ActivationGrad);
    rs.writes.push_back(out);
    program().steps.push_back(std::move(rs));
    held.push_back(out);
    rs = Step{"fsdp_grad_shard_cast:" + name, "_to_copy", Phase::Backward, held, {}, 0};
  }
  if (fsdp_cpu_offload()) {
    fsdp_offload_grad(u, rs);
    return;
  }
  fsdp_new_grad_shard(u, rs);
  program().steps.push_back(std::move(rs));
}

// FSDP1 under no_sync(): each trained unit's unsharded flat grad from the earlier micro-batches, on the GPU from the
// step's start until its reduce-scatter.
void TrainingStep::add_fsdp_no_sync_grads() {
  for (size_t u = 0; u < context_.units.count(); ++u) {
    if (!fsdp_unit_sharded(u) || !unit_trains_[u]) continue;
    unit_no_sync_grad_[u] = writer_.new_buffer("fsdp_no_sync_grad:" + context_.units.names[u], unit_bytes_[u], Category::Gradient);
    program().buffers[unit_no_sync_grad_[u]].live_at_start = true;
    result_.grad_bytes = checked_add(result_.grad_bytes, unit_bytes_[u], "gradient bytes");
  }
}

}  // namespace memplan
