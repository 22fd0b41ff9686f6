// Training under PyTorch's fully_shard (FSDP2): each module parameter sharded on dim 0 across the N GPUs, one
// parameter group per wrapping unit (wrap_units.h: each repeated block, and the root). The wrapping units, the
// per-parameter grads that wait for their unit's post-backward and the grad shards' accumulation are FSDP1's
// (training_fsdp.cc); what differs is written here. Read in torch/distributed/fsdp/_fully_shard/ at pytorch commit
// 010ae4a89516fa3be548ab16dff711414ec12d0b (_fsdp_param.py, _fsdp_param_group.py, _fsdp_collectives.py) and
// 01c9f4fcc3ffa856d3d1b038998b8ad90db4ec02 (_fsdp_state.py); rules:
//  - _fsdp_param.py FSDPParam._init_sharded_param: _chunk_with_empty(param, world_size, dim=0) (torch.chunk: chunks
//    of ceil(dim0 / N) rows), and every rank keeps `padded_sharded_size = chunks[0].size()`, zero-padded: a rank
//    holds ceil(dim0 / N) x (the other dims) elements of each parameter, frozen or trained, in the parameter's
//    dtype. sharded_param keeps the parameter's requires_grad: a frozen parameter gets no grad (no flat parameter
//    whose grad covers frozen parts, as FSDP1's use_orig_params=True has).
//  - _fsdp_collectives.py foreach_all_gather: one all-gather output of sum(padded shard numels) x N elements (the
//    parameters' dtype: no MixedPrecisionPolicy, below); foreach_all_gather_copy_out then allocates each
//    parameter's unsharded storage (FSDPParam.init_all_gather_outputs: padded numel x N) and copies into it.
//  - _fsdp_param_group.py FSDPParamGroup.wait_for_unshard: in forward the all-gather output is kept
//    (comm_ctx.all_gather_state) until the next group's wait_for_unshard frees it, after that group's all-gather
//    ([Note: Overlapping all-gather copy-in and all-gather]); _fsdp_state.py FSDPState._post_forward of the root
//    frees the last one. In backward it is freed right after the copy-out.
//  - _fsdp_state.py FSDPState._lazy_init: the root's group is not resharded after forward
//    (post_forward_mesh_info = None); every other group is (fully_shard's reshard_after_forward default True):
//    FSDPParamGroup.post_forward -> reshard frees the unsharded parameters.
//  - Forward prefetch is explicit only (FSDPState._states_to_forward_prefetch, empty by default): none.
//    FSDPParamGroup.pre_backward unshards the group (no-op when prefetched) and _backward_prefetch issues the
//    all-gather of the group before it in post-forward order (post_forward_order[curr_index - 1]); the root's
//    post-forward is the last, so the root's pre-backward (on the model output's grad) prefetches the last block.
//  - FSDPParamGroup.post_backward (RegisterPostBackwardFunction on the group's forward inputs; the root's, whose
//    inputs need no grad, runs in _root_post_backward_final_callback at the end of backward): reshard (the
//    unsharded parameters freed), the previous group's reduce-scatter input freed (comm_ctx.reduce_scatter_states
//    cleared), then _fsdp_collectives.py foreach_reduce: a reduce-scatter input of sum(dim-0-padded grad numels)
//    (_get_dim0_padded_size) in the reduce dtype, the unsharded grads copied in and freed, and the reduce output
//    (that sum / N) whose views become the sharded grads (or are added into them). The input is held by
//    reduce_scatter_states until the next group's post-backward.
// Without --fsdp2-mp, --precision fp32/fp16/bf16 is FSDP2 without a policy (param_dtype and reduce_dtype None:
// gathered and reduced in the parameters' type), as torchtune's recipes run it (the model in bf16, shard_model
// without mp_policy); autocast (--precision amp-*) is refused (report/combination_matrix.cc).
// --fsdp2-mp PARAM:REDUCE is MixedPrecisionPolicy(param_dtype, reduce_dtype) over a float32 model (torchtitan's
// parallelize_llama: bf16:fp32). Read at the same pytorch commit 010ae4a8 (main; the torch release is not pinned:
// _fsdp_api.py MixedPrecisionPolicy). TrainingOptions::precision is then param_dtype: every tensor the forward
// and backward make, the unsharded parameters and their grads included, is in it (training_context.cc's types).
//  - _fsdp_param.py FSDPParam.init_dtype_attrs: orig_dtype is the sharded parameter's (float32, kept: the shards,
//    _init_sharded_param's padded_sharded_param, are the model's parameters' own type); param_dtype applies to
//    every floating parameter, frozen or trained; reduce_dtype == param_dtype is clamped to None.
//  - _fsdp_collectives.py _get_param_all_gather_inputs (the fast path for a param_dtype, no extension, no
//    offload): one flat_foreach_copy_input of sum(padded shard numels) in param_dtype, the shards cast into it;
//    foreach_all_gather copies it into the all-gather output (param_dtype: the inputs' dtype) and deletes it
//    (`del param_all_gather_inputs`): a transient of the all-gather step. FSDPParam.init_all_gather_outputs
//    allocates the unsharded parameters in that dtype.
//  - _fsdp_collectives.py foreach_reduce: reduce_dtype = reduce_dtype or the grads' dtype (param_dtype); the
//    reduce-scatter input (sum of dim-0-padded numels) is allocated in reduce_dtype and the param_dtype grads
//    are chunk-cat into it (a widening cast needs no temporary: "_chunk_cat handles widening casts"); the
//    reduce output (input / N) in reduce_dtype, then `_to_dtype_if_needed(reduce_output, orig_dtype)`: the
//    sharded grads are float32 views of the output when reduce_dtype is float32, else a float32 copy, the
//    reduce_dtype output freed when foreach_reduce returns (a transient of the reduce-scatter).
//  - The optimizer steps the float32 sharded parameters: its states are float32 shard-sized (the docstring of
//    MixedPrecisionPolicy: "The optimizer step uses the sharded parameter in the original dtype").
//  - cast_forward_inputs (default True) casts the root's floating inputs to param_dtype: a language model's
//    inputs are token ids, which it leaves alone. Buffers are not the policy's: a float buffer the graph holds
//    is counted in param_dtype as any other tensor (training_context.cc), a small error for rotary tables.
// --frozen-dtype nf4 (torchtune's distributed QLoRA: a qlora_* model, LoRALinear(quantize_base=True) and
// FrozenNF4Linear holding torchao NF4Tensors, frozen_storage.h torchao_nf4) goes through fully_shard's all-gather
// extension. Read in torchao/dtypes/nf4tensor.py (pytorch/ao 36027d82, now under
// torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py) and torchtune v0.6.1 (a6290a5b):
//  - Sharding: torchtune/training/_distributed.py load_from_full_model_state_dict quantizes the full weight (to_nf4)
//    and keeps torch.chunk(full, N, dim=0)[rank] (FSDPParam._init_sharded_param does the same on the meta model);
//    torch.chunk is aten.split, which nf4_split implements by splitting quantized_scalers, quantization_factor and
//    quantized_data into num_chunks = dim0 // ceil(dim0 / N) pieces, asserting each divides: a rank holds 1/N of
//    the three, and the scaler_mean and nf4 table whole (construct_nf4_args passes them on). A weight whose dim 0
//    or scaler blocks (n / 16384) do not divide by N is refused, as nf4_split's assert fails.
//  - NF4Tensor.fsdp_pre_all_gather returns (quantized_scalers, quantization_factor, quantized_data): int8, the
//    weight's dtype and uint8. _fsdp_collectives.py foreach_all_gather (_get_all_gather_input_metadatas: mixed
//    dtypes) views every input of the group as uint8: one all-gather output of N x the group's shard bytes;
//    foreach_all_gather_copy_out allocates each input's unsharded tensor (FSDPParam.init_all_gather_outputs, N x
//    its numel in its dtype) and fsdp_post_all_gather wraps them as the unsharded NF4Tensor without copying (with
//    `out`, it asserts the data pointers are the all-gather outputs'): the gathered unit is NF4-sized, not bf16.
//  - The weight is read by linear_nf4 (LinearNF4.forward: F.linear(input, weight.to(input.dtype)), a transient
//    dequantized copy in the compute type; ctx.save_for_backward(weight): the NF4 weight, not the input, not the
//    copy; backward: grad_output @ weight.to(grad_output.dtype), dequantized again): training_forward.cc's
//    add_dequantized, in forward and backward, on the unit gathered for each.
//  - The weight needs no grad: no reduce-scatter, no grad shard, no optimizer state for it; the LoRA adapters are
//    plain parameters of the same group, sharded, gathered and reduce-scattered as above.
// --frozen-dtype nf4 --nf4-impl bitsandbytes (QLoRA under accelerate's fsdp2_prepare_model, bitsandbytes'
// Params4bit with bnb_4bit_quant_storage the model's type) is sharded as any parameter: no all-gather extension
// (bitsandbytes defines no fsdp_pre_all_gather, tags 0.45.0 to 0.50.1). A helper's reading, docs/research/
// bnb-params4bit-fsdp2.md sections 1 to 4, of the same _fsdp_param.py and bitsandbytes' functional.py quantize_4bit:
//  - the parameter is the packed values, [(n + 1) // (2 x the storage's element size), 1] in quant_storage;
//    _init_sharded_param chunks its dim 0 (ceil(P / N) rows, every rank padded to chunk 0's size) and the all-gather
//    and copy-out are a plain parameter's, in that type: the gathered unit holds the packed weights, not bf16 ones;
//  - its QuantState (absmax, and with double quantization the nested absmax, code and offset) is an attribute, not a
//    parameter: never sharded nor gathered, whole on every rank's GPU (the same as under FSDP1), and on the GPU under
//    CPU offload too (CPUOffloadPolicy moves the parameter's data only);
//  - frozen: no grad, no reduce-scatter; MatMul4Bit dequantizes the gathered weight for each op, in forward and
//    again in backward (training_forward.cc add_dequantized), as on one GPU.
// --quantize-experts (axolotl's quantize_moe_experts; docs/research/axolotl-fsdp2-moe-quant.md F6 to F17): each
// stacked experts' parameter is replace_parameter_4bit's packed uint8 [(n + 1) // 2, 1], a parameter of the
// decoder layer's group sharded the same way (a non-float parameter: no policy casts it), its QuantState the
// parametrization's attribute, whole on every rank. The experts forward dequantizes the gathered tensor whole, and
// _grouped_mm keeps that copy to its backward (frozen_storage.h parametrized_experts) as on one GPU, while the
// gathered packed bytes are resharded after the forward and gathered again for the backward.
// A MixedPrecisionPolicy whose param_dtype differed from quant_storage would cast the packed bits (nothing prevents
// it); with param_dtype equal to the storage it is clamped to None: --fsdp2-mp with nf4 is refused
// (report/combination_matrix.cc). The wrapping units are memplan's (each decoder layer and the root: accelerate
// v1.13's); axolotl's gives each LoRA Linear its own unit, and accelerate v1.14 the embedding and the head theirs.
// --fsdp-cpu-offload is fully_shard(..., offload_policy=CPUOffloadPolicy()) (pin_memory defaults to True), as
// torchtune's recipes turn it on (fsdp_cpu_offload: True -> torchtune/training/_distributed.py shard_model
// (cpu_offload=True): fsdp_kwargs["offload_policy"] = CPUOffloadPolicy(); v0.6.1). Read at pytorch 010ae4a8:
//  - _fsdp_param.py FSDPParam._init_sharded_param: with offload_to_cpu the padded sharded parameter is moved to the
//    CPU and pinned: no shard is resident on the GPU. The optimizer steps these CPU parameters: its states are on
//    the host, shard-sized as above; no optimizer step runs on the GPU.
//  - FSDPParam.all_gather_inputs (SHARDED): `sharded_param_data.to(self.device, non_blocking=True)` then
//    _to_dtype_if_needed(..., param_dtype): a GPU copy of each padded shard in its stored dtype, and with a policy a
//    param_dtype copy of it, the stored-dtype copy dropped when the cast returns. An all-gather extension (torchao's
//    NF4Tensor) is .to(device)'d whole (its shard, scaler_mean and table) before fsdp_pre_all_gather.
//  - _fsdp_collectives.py _get_param_all_gather_inputs: use_foreach_copy is False under offload, so each
//    parameter's inputs are made one by one and all held (param_all_gather_inputs) until foreach_all_gather's
//    `del param_all_gather_inputs` after all_gather_copy_in into the all-gather output: the group's GPU copies
//    (their sum) are a transient of the all-gather; while they are made, with a policy, the parameter being cast
//    also holds its stored-dtype copy (the largest such moment, in the group's parameter order, is modelled).
//  - foreach_reduce: the reduce-scatter input and output as above; then for offload_to_cpu
//    `new_sharded_grad.to(torch.device("cpu"), non_blocking=...)`: the grad shards live on the host, and the GPU
//    reduce output (and its orig_dtype copy) is dropped when foreach_reduce returns. With gradient accumulation the
//    add runs on the host (`sharded_param.grad._local_tensor += new_sharded_grad`).
//  - TrainingResult::fsdp_offload_host_bytes: the padded shards (every parameter, stored dtype; NF4 as sharded
//    above) + the trainable ones' grad shards + the optimizer states, none of it in the program
//    (training_fsdp_offload.cc, shared with FSDP1's CPUOffload).
// Shards follow dim 0 of the initializer as the graph stores it; an exporter that stores a Linear's weight
// transposed for MatMul swaps the axes, which changes the padding only when a dimension is not a multiple of N.
#include <algorithm>
#include <string>

#include "cost_models/frozen_storage.h"
#include "cost_models/fsdp_groups.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

// A torchao NF4 weight's shard on one of `gpus` ranks (the header's "--frozen-dtype nf4"): 1/N of its three
// all-gathered tensors (`gathered`: all N of them), and its scaler_mean and table whole.
struct Nf4Shard {
  uint64_t resident = 0, gathered = 0;
};

Nf4Shard nf4_shard(const Tensor& t, uint64_t rows, uint64_t element_bytes, uint64_t gpus) {
  const TorchaoNf4 q = torchao_nf4_layout(t.elements(), element_bytes, t.name);
  if (rows % gpus != 0 || q.scaler_blocks % gpus != 0)
    throw InputError("--shard fsdp2 over --frozen-dtype nf4 (torchao's NF4Tensor): weight '" + t.name + "' (" +
                     std::to_string(rows) + " rows, " + std::to_string(q.scaler_blocks) + " blocks of 16384 values) "
                     "cannot be split into " + std::to_string(gpus) + " shards: torchao's nf4_split asserts that "
                     "each of its quantized tensors divides by the number of chunks (dim 0 and the blocks must "
                     "divide by --gpus)");
  return {q.sharded() / gpus + q.replicated, q.sharded()};
}

}  // namespace

// Each unit: its sharded parameters (resident), the all-gathered bytes (N x the padded shards, every parameter),
// the reduce-scatter input (N x the trainable ones' padded shards), the grad shard and one optimizer state (the
// trainable padded shards: rank 0's sharded_size, the largest).
// With --fsdp2-mp the shards, grad shards and states are in the parameter's stored type (float32), the gathered
// parameters in param_dtype (the layout's), the reduce-scatter input in reduce_dtype.
void TrainingStep::add_fsdp2_shards() {
  init_fsdp_units();
  const size_t n = context_.units.count();
  const uint64_t gpus = static_cast<uint64_t>(options_.gpus);
  const bool mp = options_.fsdp2_mp, offload = fsdp_cpu_offload();
  fsdp2_all_gather_output_.assign(n, -1);
  fsdp2_gather_input_bytes_.assign(n, 0);
  fsdp2_h2d_stored_bytes_.assign(n, 0);
  fsdp2_reduce_output_bytes_.assign(n, 0);
  std::vector<uint64_t> shard(n, 0);
  // --fsdp-cpu-offload, per unit in parameter order: each parameter's GPU copy in its stored dtype and in param_dtype.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> copies(n);
  auto element_of = [](DType d) { return static_cast<uint64_t>(std::max(1, dtype_bits(d) / 8)); };
  for (int32_t p : context_.module_parameters) {
    const int32_t u = layout().shard_group[p];
    if (u < 0) continue;
    const Tensor& t = graph_.tensors[p];
    const uint64_t computed = element_of(layout().dtype[p]);          // param_dtype under a policy
    // orig_dtype: the model's float32; a frozen parameter's own half type under --frozen-dtype fp16/bf16 (accelerate
    // upcasts only what requires grad: fsdp2_prepare_model, v1.14.0), which the policy's equal param_dtype leaves
    // uncast (init_dtype_attrs clamps it to None: no all-gather input copy).
    const bool half_frozen = mp && !context_.is_param[p] && frozen_half_dtype(options_) != DType::Float32;
    const bool params4bit = layout().storage[p] == FrozenStorage::Nf4 && !options_.nf4_torchao;
    // bitsandbytes' Params4bit under a policy: its quant_storage is taken to be param_dtype, the one type
    // init_dtype_attrs leaves uncast (param_dtype clamped to None where it equals orig_dtype): any other would cast
    // the packed bits at each all-gather (_get_param_all_gather_inputs' foreach copy), which corrupts them
    // (docs/research/fsdp2-mp-params4bit.md section 1). So the packed shards are gathered as stored, no copy-in.
    const uint64_t stored = !mp || params4bit ? computed
                            : half_frozen     ? element_of(frozen_half_dtype(options_))
                                              : element_of(t.dtype);
    // reduce_dtype, clamped to None (the grads' type) when it is param_dtype: init_dtype_attrs
    const uint64_t reduced = mp ? element_of(options_.fsdp2_reduce_dtype) : computed;
    // Under --tp the parameter is a DTensor and fully_shard chunks its local tensor, the slice this rank holds
    // (_init_sharding_spec_tp returns param._local_tensor): dim 0 of the tensor-parallel slice.
    const TensorParallelPlan& tp = layout().tp;
    const int64_t dim0 = t.shape.empty() ? 1 : tp.sharded(p) && tp.axis[p] == 0 ? tp.local_dim[p] : t.shape[0];
    uint64_t rows = static_cast<uint64_t>(std::max<int64_t>(0, dim0));
    uint64_t rest = rows == 0 ? 0 : tp.local_bytes(graph_, p, t.elements()) / rows;
    // --quantize-experts' parametrized stacked experts: replace_parameter_4bit's default quant_storage, uint8
    // (axolotl passes none), a non-float parameter no policy casts; the Linear4bit weights: the model's type.
    const bool uint8_packed = params4bit && layout().parametrized[p];
    if (params4bit) {  // bitsandbytes' Params4bit: the packed [P, 1] tensor chunked on dim 0, its QuantState whole
      if (tp.sharded(p))
        throw InputError("--shard fsdp2 with --tp over --frozen-dtype nf4 (bitsandbytes' Params4bit): weight '" +
                         t.name + "' would be a tensor-parallel DTensor of packed 4-bit values, which memplan does not "
                         "model");
      rows = params4bit_packed(p, uint8_packed ? 1 : computed);
      rest = 1;
    }
    if (layout().storage[p] == FrozenStorage::Nf4 && !params4bit) {  // torchao's NF4Tensor: frozen, gathered as NF4
      const Nf4Shard q = nf4_shard(t, rows, computed, gpus);
      shard[u] = checked_add(shard[u], q.resident, "FSDP2 shard");
      unit_padded_bytes_[u] = checked_add(unit_padded_bytes_[u], q.gathered, "FSDP2 all-gather");
      result_.frozen_stored_bytes = checked_add(result_.frozen_stored_bytes, q.resident, "frozen weight bytes");
      if (offload) copies[u].push_back({q.resident, q.resident});  // the NF4Tensor .to(device)'d whole
      continue;
    }
    const uint64_t ways = fsdp2_ways(p, rows);  // --ep: an expert's E/N slice over the GPUs / N (training_ep.cc)
    const uint64_t rank_rows = rows / ways + (rows % ways != 0);  // chunks[0]: ceil(dim0 / N)
    const uint64_t numel = checked_mul(rank_rows, rest, "FSDP2 shard");
    // The element gathered and the one kept: the uint8 experts are bytes in both, never cast.
    const uint64_t element = uint8_packed ? 1 : computed, kept = uint8_packed ? 1 : stored;
    const uint64_t bytes = checked_mul(numel, kept, "FSDP2 shard");
    const uint64_t gathered = checked_mul(checked_mul(numel, ways, "FSDP2 all-gather"), element, "FSDP2 all-gather");
    shard[u] = checked_add(shard[u], bytes, "FSDP2 shard");
    unit_padded_bytes_[u] = checked_add(unit_padded_bytes_[u], gathered, "FSDP2 all-gather");
    if (params4bit)
      result_.frozen_stored_bytes = checked_add(result_.frozen_stored_bytes, bytes, "frozen weight bytes");
    if (offload) copies[u].push_back({bytes, numel * element});  // all_gather_inputs' .to(device), cast
    else if (element != kept)  // _get_param_all_gather_inputs' flat_foreach_copy_input
      fsdp2_gather_input_bytes_[u] = checked_add(fsdp2_gather_input_bytes_[u], numel * element, "FSDP2 all-gather input");
    if (!context_.is_param[p]) continue;
    unit_trains_[u] = true;
    const uint64_t scattered = checked_mul(checked_mul(numel, ways, "FSDP2 reduce-scatter"), reduced, "FSDP2 reduce-scatter");
    unit_bytes_[u] = checked_add(unit_bytes_[u], scattered, "FSDP2 reduce-scatter");
    unit_grad_shard_bytes_[u] = checked_add(unit_grad_shard_bytes_[u], bytes, "FSDP2 grad shard");
    unit_state_bytes_[u] = unit_grad_shard_bytes_[u];
    if (reduced != stored || offload)  // foreach_reduce's reduce_output, cast to orig_dtype or copied to the host
      fsdp2_reduce_output_bytes_[u] = checked_add(fsdp2_reduce_output_bytes_[u], numel * reduced, "FSDP2 reduce output");
  }
  if (!offload) {
    for (size_t u = 0; u < n; ++u)
      if (shard[u] > 0) add_fsdp_shard_buffer(static_cast<int32_t>(u), "fsdp2_sharded_params:", shard[u]);
    return;
  }
  uint64_t host = 0;
  for (size_t u = 0; u < n; ++u) {
    if (shard[u] == 0) continue;
    unit_has_shards_[u] = true;
    uint64_t later = 0;  // the param_dtype copies made after parameter i, all held with it at the copy-in
    for (auto c = copies[u].rbegin(); c != copies[u].rend(); ++c) {
      fsdp2_gather_input_bytes_[u] = checked_add(fsdp2_gather_input_bytes_[u], c->second, "FSDP2 all-gather input");
      // While parameter i is cast: the copies before it, its stored copy and its cast copy, i.e. every copy plus
      // (stored_i - the copies after it); without a cast the stored copy is the input itself.
      if (c->first != c->second && c->first > later)
        fsdp2_h2d_stored_bytes_[u] = std::max(fsdp2_h2d_stored_bytes_[u], c->first - later);
      later = checked_add(later, c->second, "FSDP2 all-gather input");
    }
    host = checked_add(host, fsdp_offload_host_bytes(shard[u], unit_grad_shard_bytes_[u], unit_state_bytes_[u]), "FSDP2 host");
  }
  result_.fsdp_offload_host_bytes = host;
}

// FSDPParamGroup.unshard: the group's all-gather output, gathered from its shards. In forward it frees the previous
// group's output, kept until now.
int32_t TrainingStep::fsdp2_all_gather(int32_t u, bool backward) {
  const std::string suffix = context_.units.names[u] + (backward ? ":backward" : "");
  const Phase phase = backward ? Phase::Backward : Phase::Forward;
  Step st{"fsdp2_all_gather:" + suffix, "all_gather", phase, {}, {}, 0};
  if (fsdp_cpu_offload()) {  // the host shards copied (and cast) to the GPU one by one, held until the copy-in
    st.reads.push_back(fsdp_offload_h2d("fsdp2_offload_h2d:" + suffix, "fsdp2_all_gather_input:" + suffix,
                                        fsdp2_gather_input_bytes_[u], phase, "fsdp2_offload_h2d_stored:" + suffix,
                                        fsdp2_h2d_stored_bytes_[u]));
  } else {
    st.reads.push_back(unit_shard_[u]);
  }
  const int32_t out = writer_.new_buffer("fsdp2_all_gather_output:" + suffix, unit_padded_bytes_[u], Category::Weight);
  st.writes.push_back(out);
  if (fsdp2_gather_input_bytes_[u] > 0 && !fsdp_cpu_offload())  // the shards cast to param_dtype, freed after the copy-in
    st.writes.push_back(writer_.new_buffer("fsdp2_all_gather_input:" + suffix, fsdp2_gather_input_bytes_[u], Category::Weight));
  if (!backward && fsdp2_forward_all_gather_ >= 0) {
    st.reads.push_back(fsdp2_forward_all_gather_);
    fsdp2_forward_all_gather_ = -1;
  }
  program().steps.push_back(std::move(st));
  fsdp2_all_gather_output_[u] = out;
  return out;
}

// FSDPParamGroup.wait_for_unshard, in `st`: the unsharded parameters copied out of the all-gather output (gathered
// now unless prefetched). The forward keeps the output until the next all-gather; the backward frees it here.
int32_t TrainingStep::fsdp2_copy_out(int32_t u, bool backward, Step& st) {
  if (fsdp2_all_gather_output_[u] < 0) fsdp2_all_gather(u, backward);
  const int32_t out = fsdp2_all_gather_output_[u];
  fsdp2_all_gather_output_[u] = -1;
  const int32_t b = writer_.new_buffer("fsdp2_unsharded:" + context_.units.names[u] + (backward ? ":backward" : ""),
                                       unit_padded_bytes_[u], Category::Weight);
  st.writes.push_back(b);
  add_unique(st.reads, out);
  if (!backward) fsdp2_forward_all_gather_ = out;
  return b;
}

// The root's post-forward frees the last all-gather output of the forward.
void TrainingStep::fsdp2_root_post_forward() {
  if (fsdp2_forward_all_gather_ < 0) return;
  program().steps.push_back({"fsdp2_post_forward:root", "free", Phase::Forward, {fsdp2_forward_all_gather_}, {}, 0});
  fsdp2_forward_all_gather_ = -1;
}

// Before the backward of the model's last op, the root's pre-backward prefetches the last block; before the
// backward of a unit's last op, its pre-backward copies it out and prefetches the unit before it. A unit none of
// whose outputs needs a grad has no pre-backward hook (FSDPState._register_pre_backward_hook).
void TrainingStep::fsdp2_pre_backward(int32_t op) {
  const WrapUnits& w = context_.units;
  const int32_t ops = static_cast<int32_t>(context_.ops.size());
  if (op == ops - 1 && unit_gathered_forward_[0] >= 0) {
    const int32_t last = fsdp_next_in_backward(ops);
    if (last > 0) fsdp2_all_gather(last, /*backward=*/true);
  }
  const int32_t u = w.unit_of_op[op];
  if (u == 0 || w.last_op[u] != op || !fsdp_unit_sharded(u) || !fsdp_has_backward(u)) return;
  Step st{"fsdp2_pre_backward:" + w.names[u], "all_gather_copy_out", Phase::Backward, {}, {}, 0};
  fsdp_gathered(u, /*backward=*/true, st);
  program().steps.push_back(std::move(st));
  const int32_t next = fsdp_next_in_backward(w.first_op[u]);
  if (next > 0 && unit_gathered_backward_[next] < 0 && fsdp2_all_gather_output_[next] < 0) fsdp2_all_gather(next, /*backward=*/true);
}

// After the backward of the first op reading a block's parameters, its post-backward; the root's after the
// model's first op, at the end of backward.
void TrainingStep::fsdp2_post_backward(int32_t op) {
  for (size_t u = 1; u < context_.units.count(); ++u)
    if (unit_first_param_op_[u] == op) fsdp2_reduce(static_cast<int32_t>(u));
  if (op == 0) fsdp2_reduce(0);
}

void TrainingStep::fsdp2_reduce(int32_t u) {
  if (!fsdp_unit_sharded(u)) return;
  const std::string& name = context_.units.names[u];
  const int32_t unsharded =
      kept_after_forward(context_.units, options_.fsdp_wrap, u) && unit_gathered_forward_[u] >= 0 ? unit_gathered_forward_[u] : unit_gathered_backward_[u];
  std::vector<int32_t> grads;
  for (int32_t p : context_.module_parameters)
    if (layout().shard_group[p] == u && fsdp_pending_grad_[p] >= 0) add_unique(grads, fsdp_pending_grad_[p]);
  if (unsharded < 0 && grads.empty()) return;  // not gathered for a backward, no grad: nothing to do
  Step reshard{"fsdp2_post_backward:" + name, "reshard", Phase::Backward, {}, {}, 0};
  if (unsharded >= 0) reshard.reads.push_back(unsharded);
  if (fsdp2_reduce_scatter_input_ >= 0) reshard.reads.push_back(fsdp2_reduce_scatter_input_);
  fsdp2_reduce_scatter_input_ = -1;
  program().steps.push_back(std::move(reshard));
  if (grads.empty()) return;
  const int32_t input = writer_.new_buffer("fsdp2_reduce_scatter_input:" + name, unit_bytes_[u], Category::ActivationGrad);
  program().steps.push_back({"fsdp2_reduce_scatter_copy_in:" + name, "chunk_cat", Phase::Backward, grads, {input}, 0});
  Step rs{"fsdp2_reduce_scatter:" + name, "reduce_scatter", Phase::Backward, {input}, {}, 0};
  fsdp2_reduce_scatter_input_ = input;
  if (fsdp_cpu_offload()) {  // the reduce output (and its orig_dtype copy) copied to the host grad shards, freed
    int32_t last = writer_.new_buffer("fsdp2_reduce_output:" + name, fsdp2_reduce_output_bytes_[u], Category::ActivationGrad);
    rs.writes.push_back(last);
    program().steps.push_back(std::move(rs));
    if (fsdp2_reduce_output_bytes_[u] != unit_grad_shard_bytes_[u]) {
      const int32_t cast = writer_.new_buffer("fsdp2_reduce_output_orig:" + name, unit_grad_shard_bytes_[u], Category::ActivationGrad);
      program().steps.push_back({"fsdp2_reduce_output_cast:" + name, "_to_copy", Phase::Backward, {last}, {cast}, 0});
      last = cast;
    }
    program().steps.push_back({"fsdp2_grad_offload:" + name, "_to_copy", Phase::Backward, {last}, {}, 0});
    return;
  }
  if (fsdp2_reduce_output_bytes_[u] > 0) {  // the reduce_dtype output, then its float32 copy: the grad shard
    const int32_t output = writer_.new_buffer("fsdp2_reduce_output:" + name, fsdp2_reduce_output_bytes_[u], Category::ActivationGrad);
    rs.writes.push_back(output);
    program().steps.push_back(std::move(rs));
    rs = Step{"fsdp2_reduce_output_cast:" + name, "_to_copy", Phase::Backward, {output}, {}, 0};
  }
  fsdp_new_grad_shard(u, rs);
  program().steps.push_back(std::move(rs));
}

}  // namespace memplan
