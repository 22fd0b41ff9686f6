// Training under DeepSpeed ZeRO-3, the gradients and the step (training_deepspeed3.cc holds the modules, their
// partitions, fetches and releases): what a gradient bucket's reduce allocates and frees, the backward's epilogue,
// and DeepSpeedZeroOptimizer_Stage3.step over the float32 sub-groups. Sizes: deepspeed_zero3.h; the order of
// allocations and frees: deepspeed/runtime/zero/stage3.py at DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641,
// named per function.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cost_models/deepspeed_zero3.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

// __reduce_and_partition_ipg_grads (reduce_scatter true): __avg_scatter_grads -> reduce_scatter_coalesced's flat
// (transient), then partition_grads copies (or, accumulating, adds) each partition into grad_partitions_flat_buffer
// and sets param.grad = None: the bucket's grads, views of the bucket or (too large for it) their own storage, die.
void TrainingStep::ds3_reduce(Step& st) {
  std::vector<uint64_t> numel;
  std::vector<int32_t> grads;  // each one's own grad (-1: a view of the bucket), held until partition_grads drops it
  for (int32_t p : ds_bucket_params_) {
    numel.push_back(ds_elements(p));
    const int32_t grad = param_grad_buffer_[p];
    grads.push_back(grad);
    if (grad >= 0) {
      add_unique(st.reads, grad);
      program().buffers[grad].live_at_end = false;
      param_grad_buffer_[p] = -1;
    }
  }
  const uint64_t flat = zero3_reduce_scatter_elements(numel, options_.gpus);
  int32_t flat_buffer = -1;
  if (flat > 0) {
    flat_buffer = writer_.new_buffer("deepspeed:reduce_scatter_flat", checked_mul(flat, ds_grad_element_bytes_, "DeepSpeed bytes"),
                                     Category::Gradient);
    st.writes.push_back(flat_buffer);
  }
  if (ds3_offload())
    for (size_t k = 0; k < ds_bucket_params_.size(); ++k) ds3_offload_copy(ds_bucket_params_[k], flat_buffer, grads[k]);
  if (ds3_swap_optimizer()) ds3_nvme_swap_out_grads();
  if (ds3_grad_partitions_ >= 0 && !ds_bucket_params_.empty()) add_unique(st.reads, ds3_grad_partitions_);
  for (int32_t b : ds_buckets_) add_unique(st.reads, b);
  ds_bucket_params_.clear();
  ds_bucket_elements_ = 0;
}

// The backward's end: independent_gradient_partition_epilogue reduces what the bucket holds; then backward_epilogue's
// release_backward_leftovers releases the modules whose post-backward hook never fired.
void TrainingStep::ds3_end_backward() {
  Step st{"deepspeed:ipg_epilogue", "reduce", Phase::Backward, {}, {}, 0};
  ds3_reduce(st);
  program().steps.push_back(std::move(st));
  for (Step& copy : ds_after_reduce_) program().steps.push_back(std::move(copy));  // offload: partition_grads' copies
  ds_after_reduce_.clear();
  // The grads the report counts: the gradient partitions (add_param_grad counted each whole grad on its way).
  result_.grad_bytes = ds3_grad_partitions_ < 0 ? 0 : program().buffers[ds3_grad_partitions_].bytes;
  precondition(ds3_next_call_ == ds3_calls_.size(), "DeepSpeed ZeRO-3: a module call was not emitted at its op");
  std::vector<int32_t> left;
  for (size_t q = 0; q < ds3_whole_.size(); ++q) left.push_back(static_cast<int32_t>(q));
  ds3_release(left, "deepspeed:release_backward_leftovers", Phase::Backward);
}

// DeepSpeedZeroOptimizer_Stage3.step: with float16 parameters (self.dtype), first _overflow_check_and_loss_scale_update
// -> has_overflow(partition_gradients=True): torch.isinf(grad_partitions_flat_buffer).any(), then the same with isnan,
// each a bool of every partition element and its one-element any(), the first freed before the second (the dynamic
// loss scale's skipped step allocates nothing more: memplan counts the step that runs); then _get_norm_groups (get_grad_norm_direct: `g.double().norm(2)` per gradient
// partition, one at a time: the largest partition's float64 copy), then per sub-group _prepare_fp32_grad_for_sub_group
// (flatten(averaged_gradients), a copy in the grads' type, `.to(float32)`: the float32 grad, the copy freed; float32
// grads: `.to` returns the copy itself), _optimizer_step on the float32 sub-group,
// _reassign_or_swap_out_partitioned_parameters (copy_ into the bit16 partitions, in place; a no-op when they are the
// float32 sub-groups) and _release_sub_group (the float32 grad dropped).
void TrainingStep::ds3_optimizer() {
  if (ds3_offload()) {  // the step runs on the host (_optimizer_step: DeepSpeedCPUAdam), sub-group by sub-group
    for (size_t s = 0; s < ds3_sub_groups_.size(); ++s) ds3_nvme_step(s);
    return;
  }
  uint64_t largest = 0;
  for (size_t q = 0; q < ds3_tensor_.size(); ++q)
    if (context_.is_param[ds3_tensor_[q]]) largest = std::max(largest, zero3_partition_numel(ds3_numel_[q], options_.gpus));
  if (largest == 0) return;
  if (layout().dtype[context_.params.front()] == DType::Float16 && ds3_grad_partitions_ >= 0) {
    uint64_t elements = 0;  // every trainable partition: the sub-groups cut them
    for (uint64_t e : ds3_sub_groups_) elements = checked_add(elements, e, "DeepSpeed bytes");
    Step check{"deepspeed:has_overflow", "isinf", Phase::Optimizer, {ds3_grad_partitions_}, {}, 0};
    check.writes.push_back(writer_.new_buffer("deepspeed:isinf", elements, Category::Workspace));
    check.writes.push_back(writer_.new_buffer("deepspeed:isinf_any", 1, Category::Workspace));
    program().steps.push_back(std::move(check));
  }
  Step norm{"deepspeed:get_grad_norm_direct", "norm", Phase::Optimizer, {ds3_grad_partitions_}, {}, 0};
  norm.writes.push_back(writer_.new_buffer("deepspeed:grad_partition_double", checked_mul(largest, 8, "DeepSpeed bytes"), Category::Workspace));
  program().steps.push_back(std::move(norm));
  for (size_t s = 0; s < ds3_sub_groups_.size(); ++s) {
    const std::string tag = std::to_string(s);
    Step flat{"deepspeed:flatten_averaged_gradients:" + tag, "cat", Phase::Optimizer, {ds3_grad_partitions_}, {}, 0};
    const int32_t copy = writer_.new_buffer("deepspeed:flat_grads:" + tag, checked_mul(ds3_sub_groups_[s], ds_grad_element_bytes_, "DeepSpeed bytes"),
                                            Category::Workspace);
    flat.writes.push_back(copy);
    program().steps.push_back(std::move(flat));
    UpdateTarget u = ds3_targets()[s];
    u.grad = copy;
    if (ds_grad_element_bytes_ != 4) {
      u.grad = writer_.new_buffer("deepspeed:fp32_grad:" + tag, checked_mul(ds3_sub_groups_[s], 4, "DeepSpeed bytes"),
                                  Category::Gradient);
      program().steps.push_back(Step{"deepspeed:to_float32:" + tag, "to", Phase::Optimizer, {copy}, {u.grad}, 0});
    }
    emit_update({u}, "optimizer:step:" + tag, "optimizer:init_state:" + tag);
  }
  if (ds_fp32_ >= 0)
    program().steps.push_back(Step{"deepspeed:reassign_partitioned_parameters", "copy_", Phase::Optimizer, {ds_fp32_}, {}, 0});
}

// One update target per float32 sub-group (its states: exp_avg, exp_avg_sq of its size, initialize_optimizer_states).
std::vector<TrainingStep::UpdateTarget> TrainingStep::ds3_targets() const {
  std::vector<UpdateTarget> out;
  if (ds3_offload()) return out;  // their states are on the host
  for (size_t s = 0; s < ds3_sub_groups_.size(); ++s)
    out.push_back({"deepspeed:fp32_sub_group_" + std::to_string(s), -1, checked_mul(ds3_sub_groups_[s], 4, "DeepSpeed bytes"),
                   ds3_sub_groups_[s]});
  return out;
}

}  // namespace memplan
