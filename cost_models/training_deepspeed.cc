// Training under DeepSpeed ZeRO-1/2 (--deepspeed): DeepSpeedZeroOptimizer's own GPU buffers around the step, rank 0's
// share. The sizes are cost_models/deepspeed_zero.h's; the order of their allocations and frees is
// deepspeed/runtime/zero/stage_1_and_2.py at DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641, named per function.
// The model's parameters are views of the flat bit16 group (_update_model_bit16_weights): the group's padding is the
// only weight memory added. The grads no longer stay as .grad: each is moved into the contiguous bucket, rank 0's
// share is kept in grads_in_partition, and the step runs on a float32 flat partition.
#include <algorithm>

#include "cost_models/deepspeed_zero.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

uint64_t TrainingStep::ds_elements(int32_t p) const {
  return bytes_of(p) / dtype_bytes(layout().dtype[p], 1).value_or(1);
}

// DeepSpeedZeroOptimizer.__init__: the flat bit16 group (its padding beyond the parameters), the float32 partition
// (weights_partition, self.device: the GPU unless offload_optimizer), and under offload the GPU staging buffer
// temp_grad_buffer_for_gpu_offload (largest_param_numel, self.dtype). Gradient accumulation: the grads of the
// earlier micro-batches, kept in all_grad_tensors (independent_gradient_partition_epilogue) as views of an earlier
// grads_in_partition, which _release_ipg_buffers drops but the views keep alive.
void TrainingStep::ds_add_resident() {
  ds_config_ = options_.deepspeed;
  resolve_deepspeed_auto(ds_config_, graph_);
  const DeepSpeedZero& z = ds_config_;
  std::vector<uint64_t> elements;
  ds_index_.assign(graph_.tensors.size(), -1);
  for (int32_t p : context_.params) {
    if (layout().dtype[p] != layout().dtype[context_.params.front()])
      throw InputError("--deepspeed: the trainable parameters of model '" + graph_.model_path +
                       "' are of more than one type; DeepSpeed flattens one type per group, not modelled");
    ds_index_[p] = static_cast<int32_t>(elements.size());
    elements.push_back(ds_elements(p));
  }
  ds_ = zero_partition(elements, options_.gpus, z.round_robin_gradients);
  ds_grad_element_bytes_ = context_.params.empty() ? 0 : dtype_bytes(layout().dtype[context_.params.front()], 1).value_or(0);
  if (z.stage == 3) return ds3_add_resident();  // training_deepspeed3.cc
  auto resident = [&](const std::string& name, uint64_t bytes, Category category) {
    const int32_t b = writer_.new_buffer(name, bytes, category);
    program().buffers[b].resident = true;
    return b;
  };
  const uint64_t padding = checked_mul(ds_.aligned - ds_.params, ds_grad_element_bytes_, "DeepSpeed bytes");
  if (padding > 0) {
    resident("deepspeed:flat_group_padding", padding, Category::Weight);
    result_.param_bytes = checked_add(result_.param_bytes, padding, "parameter bytes");
  }
  result_.notes.push_back(deepspeed_note(z, ds_, options_.gpus, ds_grad_element_bytes_));
  if (z.offload_optimizer == DeepSpeedOffload::Cpu) {
    resident("deepspeed:temp_grad_buffer_for_gpu_offload", checked_mul(ds_.largest_param, ds_grad_element_bytes_, "DeepSpeed bytes"),
             Category::Workspace);
    result_.deepspeed_host_bytes =
        deepspeed_host_bytes(z, ds_, ds_grad_element_bytes_, states_per_param(), options_.grad_accum);
    return;
  }
  const uint64_t fp32 = checked_mul(ds_.partition, 4, "DeepSpeed bytes");
  ds_fp32_ = resident("deepspeed:single_partition_of_fp32_groups", fp32, Category::OptimizerState);
  result_.optimizer_state_bytes = checked_add(result_.optimizer_state_bytes, fp32, "optimizer state bytes");
  if (options_.grad_accum > 1) {
    const uint64_t bytes = checked_mul(ds_.grads_in_partition, ds_grad_element_bytes_, "DeepSpeed bytes");
    ds_accumulated_ = resident("deepspeed:all_grad_tensors", bytes, Category::Gradient);
    result_.grad_bytes = checked_add(result_.grad_bytes, bytes, "gradient bytes");
  }
}

// setup_buckets, on the first grad hook of the backward: the contiguous gradient bucket(s) of reduce_bucket_size
// elements of self.dtype, freed by _release_ipg_buffers at the backward's epilogue.
void TrainingStep::ds_begin_backward() {
  if (ds3()) return;  // stage 3 allocates its bucket at __init__ (training_deepspeed3.cc)
  const uint64_t bytes = checked_mul(ds_config_.reduce_bucket_size, ds_grad_element_bytes_, "DeepSpeed bytes");
  Step st{"deepspeed:setup_buckets", "empty", Phase::Backward, {}, {}, 0};
  for (int i = 0; i < ipg_buffer_count(ds_config_); ++i) {
    ds_buckets_.push_back(writer_.new_buffer("deepspeed:ipg_buffer_" + std::to_string(i), bytes, Category::Gradient));
    st.writes.push_back(ds_buckets_.back());
  }
  program().steps.push_back(std::move(st));
}

// reduce_ipg_grads: the bucket's parameters in rank 0's partition are copied into grads_in_partition
// (copy_grads_in_partition allocates it whole on its first call); a parameter too large for the bucket was reduced
// from its own grad, which ZeRO-2 then frees (clear_grad_attribute, or the copy's re-pointing), and ZeRO-1 keeps
// outside the partition until the step (free_grad_in_param_list). Under offload_optimizer cpu, copy_grads_in_partition
// copies the partition's grads to the host instead (async_inplace_copy_grad_to_fp32_buffer_from_gpu), after its
// norm and overflow check (zero_grad_transients): those steps wait in ds_after_reduce_ for the caller to place
// right after the reduce. With gradient accumulation the earlier micro-batches' grads are on the host
// (async_accumulate_grad_in_cpu_via_gpu adds them into this one's through temp_grad_buffer_for_gpu_offload, in
// place): the GPU holds nothing more than without accumulation.
void TrainingStep::ds_reduce(Step& st) {
  if (ds3()) return ds3_reduce(st);
  const bool offload = ds_config_.offload_optimizer == DeepSpeedOffload::Cpu;
  for (int32_t p : ds_bucket_params_) {
    const bool in = ds_.in_partition[ds_index_[p]];
    if (in && offload) ds_offload_copy(p, param_grad_buffer_[p]);
    if (in && ds_grads_ < 0 && !offload) {
      ds_grads_ = writer_.new_buffer("deepspeed:grads_in_partition",
                                     checked_mul(ds_.grads_in_partition, ds_grad_element_bytes_, "DeepSpeed bytes"),
                                     Category::Gradient);
      st.writes.push_back(ds_grads_);
    }
    if (in && ds_grads_ >= 0) add_unique(st.reads, ds_grads_);
    const int32_t grad = param_grad_buffer_[p];
    if (grad < 0) continue;
    add_unique(st.reads, grad);
    if (ds_config_.stage == 1 && !in) {
      ds_kept_grads_.push_back(grad);
    } else {
      program().buffers[grad].live_at_end = false;
    }
    param_grad_buffer_[p] = -1;
  }
  for (int32_t b : ds_buckets_) add_unique(st.reads, b);
  ds_bucket_params_.clear();
  ds_bucket_elements_ = 0;
}

// reduce_independent_p_g_buckets_and_remove_grads, one parameter's hook: a full bucket is reduced first; the grad is
// copied into the bucket and becomes a view of it (the autograd grad is freed), unless it alone exceeds
// reduce_bucket_size (extra_large_param_to_reduce: reduced from its own storage at the next reduce).
void TrainingStep::ds_hook(int32_t p, Phase phase) {
  const int32_t grad = param_grad_buffer_[p];
  if (grad < 0) return;  // no grad reached it
  const uint64_t n = ds_elements(p);
  Step st{"deepspeed:grad_hook:" + graph_.tensors[p].name, "copy_", phase, {grad}, {}, 0};
  if (ds_bucket_elements_ + n > ds_config_.reduce_bucket_size && !ds_bucket_params_.empty()) {
    ds_reduce(st);
    if (!ds_after_reduce_.empty()) {  // the reduce and its offload copies come before this grad's copy
      st.name = "deepspeed:reduce_ipg_grads";
      st.op = "reduce";
      program().steps.push_back(std::move(st));
      for (Step& copy : ds_after_reduce_) {
        add_unique(copy.reads, grad);
        program().steps.push_back(std::move(copy));
      }
      ds_after_reduce_.clear();
      st = Step{"deepspeed:grad_hook:" + graph_.tensors[p].name, "copy_", phase, {grad}, {}, 0};
    }
  }
  for (int32_t b : ds_buckets_) add_unique(st.reads, b);
  if (n <= ds_config_.reduce_bucket_size) {
    program().buffers[grad].live_at_end = false;
    param_grad_buffer_[p] = -1;
  }
  ds_bucket_params_.push_back(p);
  ds_bucket_elements_ += n;
  program().steps.push_back(std::move(st));
}

// After op i's backward: the hooks of the parameters whose grads it completed. ZeRO-2 and 3, and ZeRO-1 with
// overlap_comm, reduce in the hooks (process_gradients; stage3.py reduce_independent_p_g_buckets_and_remove_grads);
// ZeRO-1 without it reduces after backward (reduce_gradients).
void TrainingStep::ds_after_backward(int32_t i) {
  if (ds_config_.stage == 1 && !ds_config_.overlap_comm) return;
  for (int32_t p : params_completed_at_[i]) ds_hook(p, Phase::Backward);
}

// The backward's end: ZeRO-1 without overlap_comm runs every parameter's reduce now, in group order
// (DeepSpeedZeroOptimizer.reduce_gradients); then independent_gradient_partition_epilogue reduces what the bucket
// holds, adds this micro-batch's grads into the earlier ones' (gradient accumulation: the new grads_in_partition
// is released there) and releases the buckets.
void TrainingStep::ds_end_backward() {
  if (ds3()) return ds3_end_backward();
  if (ds_config_.stage == 1 && !ds_config_.overlap_comm)
    for (int32_t p : context_.params) ds_hook(p, Phase::Backward);
  Step st{"deepspeed:ipg_epilogue", "reduce", Phase::Backward, {}, {}, 0};
  ds_reduce(st);
  // ZeRO-2 keeps only grads_in_partition (with accumulation, the earlier micro-batches' too): the grads the report
  // counts; ZeRO-1's whole grads lived to here and stay counted as such.
  const uint64_t partition_grads = ds_grads_ < 0 ? 0 : program().buffers[ds_grads_].bytes;
  if (ds_config_.stage == 2)
    result_.grad_bytes = checked_add(partition_grads, ds_accumulated_ < 0 ? 0 : program().buffers[ds_accumulated_].bytes,
                                     "gradient bytes");
  if (ds_accumulated_ >= 0) {
    add_unique(st.reads, ds_accumulated_);
    ds_grads_ = ds_accumulated_;
  }
  program().steps.push_back(std::move(st));
  for (Step& copy : ds_after_reduce_) program().steps.push_back(std::move(copy));
  ds_after_reduce_.clear();
}

// copy_grads_in_partition at the accumulation boundary under offload_optimizer cpu, for parameter p of rank 0's
// partition (its grad a view of the bucket, or `grad` when it was reduced from its own storage): the norm's float64
// copy of its slice, the overflow check over its whole grad, the float32 cast of its slice (zero_grad_transients),
// one after the other while the buckets are alive.
void TrainingStep::ds_offload_copy(int32_t p, int32_t grad) {
  const int i = ds_index_[p];
  const ZeroGradTransients t = zero_grad_transients(ds_elements(p), ds_.elements_in_partition[i],
                                                    layout().dtype[p] == DType::Float32, /*offload=*/true);
  const std::string& name = graph_.tensors[p].name;
  auto transient = [&](const std::string& function, const char* op, uint64_t bytes) {
    if (bytes == 0) return;
    Step st{"deepspeed:" + function + ":" + name, op, Phase::Backward, {}, {}, 0};
    for (int32_t b : ds_buckets_) st.reads.push_back(b);
    if (grad >= 0) add_unique(st.reads, grad);
    st.writes.push_back(writer_.new_buffer("deepspeed:" + function + ":" + name, bytes, Category::Workspace));
    ds_after_reduce_.push_back(std::move(st));
  };
  transient("set_norm_for_param_grad_in_gpu", "norm", t.norm_double);
  transient("_has_inf_or_nan", "isinf", t.overflow_check);
  transient("async_inplace_copy_grad_to_fp32_buffer_from_gpu", "to", t.fp32_cast);
}

// DeepSpeedZeroOptimizer.step without offload: the partition's grads flattened (flatten(averaged_gradients[i])), that
// copy cast to the float32 partition's type (single_grad_partition), the bit16 grads freed, the optimizer stepped on
// the float32 partition (its states the partition's size), the float32 grad dropped, and the partitions gathered
// into the flat group in place (all_gather_into_tensor_dp_groups). Under offload the step runs on the host.
void TrainingStep::ds_optimizer() {
  if (ds3()) return ds3_optimizer();
  if (ds_config_.offload_optimizer == DeepSpeedOffload::Cpu) return;
  // A transient over parameter p's slice of the partition, one at a time: a step reading the grads (the partition's,
  // ZeRO-1's kept ones) that makes a buffer of `bytes` named after it.
  auto slice_step = [&](const std::string& function, const char* op, int32_t p, uint64_t bytes) {
    Step st{"deepspeed:" + function + ":" + graph_.tensors[p].name, op, Phase::Optimizer, {}, {}, 0};
    if (ds_grads_ >= 0) st.reads.push_back(ds_grads_);
    for (int32_t g : ds_kept_grads_) st.reads.push_back(g);
    st.writes.push_back(writer_.new_buffer(st.name, bytes, Category::Workspace));
    return st;
  };
  // check_overflow first when the engine asks for it (DeepSpeedZero::check_grad_overflow):
  // has_overflow_partitioned_grads_serial runs _has_inf_or_nan on each slice of the partition in turn, adding each
  // answer into invalid_grad_count (torch.zeros([1]) float32, alive through the loop).
  int32_t count = -1;
  if (ds_config_.check_grad_overflow)
    for (size_t i : ds_.flat_order) {
      const int32_t p = context_.params[i];
      const uint64_t bytes =
          zero_overflow_check_bytes(ds_.elements_in_partition[i], layout().dtype[p] == DType::Float32);
      if (bytes == 0) continue;
      Step check = slice_step("_has_inf_or_nan", "isinf", p, bytes);
      if (count < 0) check.writes.push_back(count = writer_.new_buffer("deepspeed:invalid_grad_count", 4, Category::Workspace));
      else check.reads.push_back(count);
      program().steps.push_back(std::move(check));
    }
  // scaled_global_norm (get_grad_norm_direct: each partition slice's float64 copy in turn), then
  // free_grad_in_param_list drops ZeRO-1's grads outside the partition.
  for (size_t i : ds_.flat_order) {
    const int32_t p = context_.params[i];
    const uint64_t bytes = zero_grad_transients(ds_elements(p), ds_.elements_in_partition[i], true, false).norm_double;
    if (bytes > 0) program().steps.push_back(slice_step("get_grad_norm_direct", "norm", p, bytes));
  }
  for (int32_t g : ds_kept_grads_) program().buffers[g].live_at_end = false;
  Step flat{"deepspeed:flatten_grad_partition", "cat", Phase::Optimizer, {}, {}, 0};
  if (ds_grads_ >= 0) flat.reads.push_back(ds_grads_);
  const int32_t flat_grads = writer_.new_buffer("deepspeed:flat_grad_partition",
                                                checked_mul(ds_.partition, ds_grad_element_bytes_, "DeepSpeed bytes"),
                                                Category::Workspace);
  flat.writes.push_back(flat_grads);
  program().steps.push_back(flat);
  Step cast{"deepspeed:single_grad_partition", "to", Phase::Optimizer, flat.reads, {}, 0};
  cast.reads.push_back(flat_grads);
  const int32_t fp32_grad = writer_.new_buffer("deepspeed:single_grad_partition", checked_mul(ds_.partition, 4, "DeepSpeed bytes"),
                                               Category::Gradient);
  cast.writes.push_back(fp32_grad);
  program().steps.push_back(std::move(cast));
  emit_update({ds_target(fp32_grad)}, "optimizer:step", "optimizer:init_state");
  program().steps.push_back(Step{"deepspeed:all_gather_dp_groups", "all_gather_into_tensor", Phase::Optimizer, {ds_fp32_}, {}, 0});
}

TrainingStep::UpdateTarget TrainingStep::ds_target(int32_t grad) const {
  return {"deepspeed:fp32_partition", grad, checked_mul(ds_.partition, 4, "DeepSpeed bytes"), ds_.partition};
}

}  // namespace memplan
