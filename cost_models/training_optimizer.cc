// Training, what the optimizer keeps and does: grads that persist between micro-batches, DDP buckets,
// optimizer states, and the temporaries of the update itself (torch/optim/*.py).
#include "cost_models/bnb_optimizer.h"
#include "cost_models/runtime_constants.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {

// Grads that exist before the step: with gradient accumulation the grads of earlier micro-batches
// (this program is a later micro-batch plus the optimizer step); with DDP gradient_as_bucket_view the
// grads are views of the buckets, allocated when DDP is constructed; with torch 1.x's zero_grad() the
// zeroed grads of the previous step. DDP's own buckets otherwise hold a second copy of every grad
// (torch/nn/parallel/distributed.py, reducer.cpp).
void TrainingStep::add_persistent_grads() {
  const bool resident_grads = options_.grad_accum > 1 || options_.grads_kept_between_steps ||
                              (options_.shard == Sharding::Ddp && options_.gradient_as_bucket_view);
  if (flat_shards()) {
    // Under FSDP1's no_sync() the earlier micro-batches leave unsharded grads, not grad shards (training_fsdp_mp.cc).
    if (fsdp_no_sync()) add_fsdp_no_sync_grads();
    if (fsdp_no_sync() ? options_.grads_kept_between_steps : resident_grads) add_fsdp_resident_grads();
    return;
  }
  if (deepspeed()) return;  // training_deepspeed.cc: the accumulated grads are all_grad_tensors
  if (resident_grads) {
    for (int32_t p : context_.params) {
      const uint64_t bytes = layout().grad_sharded[p] ? shard(bytes_of(p)) : bytes_of(p);
      const int32_t b = writer_.new_buffer("grad:" + graph_.tensors[p].name, bytes, Category::Gradient);
      program().buffers[b].resident = true;
      param_grad_buffer_[p] = b;
      result_.grad_bytes = checked_add(result_.grad_bytes, bytes, "gradient bytes");
    }
  }
  if (options_.shard == Sharding::Ddp && !options_.gradient_as_bucket_view) add_ddp_buckets();
}

// Buckets fill in reverse parameter order; the first is capped at 1 MiB
// (dist._DEFAULT_FIRST_BUCKET_BYTES), the rest at bucket_cap_mb = 25 MiB.
void TrainingStep::add_ddp_buckets() {
  uint64_t cap = 1024 * 1024, filled = 0;
  int index = 0;
  auto flush = [&] {
    if (filled == 0) return;
    const int32_t b = writer_.new_buffer("ddp_bucket_" + std::to_string(index++), filled, Category::Gradient);
    program().buffers[b].resident = true;
    filled = 0;
    cap = kDdpBucketBytes;
  };
  for (auto it = context_.params.rbegin(); it != context_.params.rend(); ++it) {
    const uint64_t bytes = bytes_of(*it);
    if (filled > 0 && filled + bytes > cap) flush();
    filled = checked_add(filled, bytes, "DDP bucket bytes");
  }
  flush();
}

int TrainingStep::states_per_param() const {
  switch (options_.optimizer) {
    case Optimizer::Sgd: return 0;
    case Optimizer::Momentum: return 1;
    case Optimizer::Adam:
    case Optimizer::AdamW: return options_.optimizer_flags.amsgrad ? 3 : 2;
    case Optimizer::AdamW8bit:
    case Optimizer::PagedAdamW:
    case Optimizer::PagedAdamW8bit: return 2;
  }
  return 0;
}

// The grad-sized copy the update makes before using the grads: `-grad` for maximize, `grad + wd * param`
// for L2 weight decay (Adam, SGD; AdamW decays the parameters in place). torch 1.13's foreach Adam adds
// the decay into the grads in place (torch._foreach_add_), so there only maximize copies.
bool TrainingStep::update_copies_grads() const {
  const OptimizerFlags& f = options_.optimizer_flags;
  if (options_.optimizer_impl == OptimizerImpl::Fused || is_bitsandbytes(options_.optimizer)) return false;
  const bool foreach_adam_1_13 = options_.optimizer_impl == OptimizerImpl::ForeachTorch1 &&
                                 (options_.optimizer == Optimizer::Adam || options_.optimizer == Optimizer::AdamW);
  const bool l2 = f.weight_decay && options_.optimizer != Optimizer::AdamW && !foreach_adam_1_13;
  return f.maximize || l2;
}

int32_t TrainingStep::new_grad_copy(const UpdateTarget& u) {
  return writer_.new_buffer("grad_copy:" + u.name, program().buffers[u.grad].bytes, Category::Workspace);
}

uint64_t TrainingStep::state_bytes(int32_t p) const { return layout().states_sharded[p] ? shard(bytes_of(p)) : bytes_of(p); }

std::vector<int32_t> TrainingStep::new_states(const std::vector<UpdateTarget>& targets, bool resident) {
  if (is_bitsandbytes(options_.optimizer)) return new_bitsandbytes_states(targets, resident);
  static const char* names[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  std::vector<int32_t> ids;
  for (const UpdateTarget& u : targets)
    for (int s = 0; s < states_per_param(); ++s) {
      const std::string what = options_.optimizer == Optimizer::Momentum ? "momentum_buffer" : names[s];
      const int32_t b = writer_.new_buffer(what + ":" + u.name, u.bytes, Category::OptimizerState);
      program().buffers[b].resident = resident;
      program().buffers[b].live_at_end = !resident;
      result_.optimizer_state_bytes = checked_add(result_.optimizer_state_bytes, u.bytes, "optimizer state bytes");
      ids.push_back(b);
    }
  return ids;
}

// bitsandbytes (bnb_optimizer.h): each parameter's state1/state2 (uint8 with absmax1/absmax2, or float32), the
// paged ones outside the program, and the two quantization maps once (8-bit).
std::vector<int32_t> TrainingStep::new_bitsandbytes_states(const std::vector<UpdateTarget>& targets, bool resident) {
  std::vector<int32_t> ids;
  auto add = [&](const std::string& name, uint64_t bytes) {
    const int32_t b = writer_.new_buffer(name, bytes, Category::OptimizerState);
    program().buffers[b].resident = resident;
    program().buffers[b].live_at_end = !resident;
    result_.optimizer_state_bytes = checked_add(result_.optimizer_state_bytes, bytes, "optimizer state bytes");
    ids.push_back(b);
  };
  bool any_eight_bit = false;
  for (const UpdateTarget& u : targets) {
    any_eight_bit = any_eight_bit || eight_bit_states(options_.optimizer, u.elements);
    for (const BnbState& s : bitsandbytes_states(options_.optimizer, u.elements)) {
      if (s.paged) result_.paged_state_bytes = checked_add(result_.paged_state_bytes, s.bytes, "paged state bytes");
      else add(s.name + ":" + u.name, s.bytes);
    }
  }
  if (any_eight_bit && !bnb_maps_made_) {  // fill_qmap: once per optimizer, on its first 8-bit parameter
    for (const char* map : {"qmap:dynamic", "qmap:udynamic"}) add(map, kBnbQmapBytes);
    bnb_maps_made_ = true;
  }
  return ids;
}

void TrainingStep::add_optimizer_states_if_steady() {
  if (options_.steady_state) new_states(update_targets(), /*resident=*/true);
}

// ---- optimizer ----
// Under --fsdp-cpu-offload the optimizer steps the host shards with the host grads: nothing on the GPU.
void TrainingStep::emit_optimizer() {
  if (fsdp_cpu_offload()) return;
  if (deepspeed()) ds_optimizer();
  else if (!options_.optimizer_in_backward) emit_update(update_targets(), "optimizer:step", "optimizer:init_state");
}

// --optimizer-in-backward (torchtune's optimizer_in_bwd, torchtune/training/memory.py
// register_optim_in_bwd_hooks): one optimizer per parameter, stepped by the parameter's post-accumulate-grad hook
// (torch.Tensor.register_post_accumulate_grad_hook, PyTorch >= 2.1) and followed by its zero_grad()
// (set_to_none): a parameter's update runs as soon as the backward of the last op reading it has made its grad,
// and the grad is freed there. Called after op i's backward.
void TrainingStep::update_params_completed_at(int32_t i) {
  for (int32_t p : params_completed_at_[i]) {
    const int32_t grad = param_grad_buffer_[p];
    if (grad < 0) continue;  // no grad reached it: the hook never fires
    const std::string name = "optimizer:" + graph_.tensors[p].name;
    emit_update({param_target(p)}, name, name + ":init_state");
    program().buffers[grad].live_at_end = false;  // zero_grad(set_to_none=True)
    param_grad_buffer_[p] = -1;
  }
}

// The update of `targets` as one optimizer step: states made on the first iteration, the implementation's
// temporaries.
void TrainingStep::emit_update(const std::vector<UpdateTarget>& targets, const std::string& name,
                               const std::string& init_name) {
  if (!options_.steady_state && states_per_param() > 0) {
    Step init{init_name, "zeros_like", Phase::Optimizer, {}, new_states(targets, /*resident=*/false), 0};
    program().steps.push_back(std::move(init));
  }
  Step st{name, std::string(optimizer_name()), Phase::Optimizer, {}, {}, 0};
  for (const UpdateTarget& u : targets) add_unique(st.reads, u.grad);
  if (is_bitsandbytes(options_.optimizer)) {  // one kernel per parameter, in place: no temporaries
    program().steps.push_back(std::move(st));
    return;
  }
  const bool adam = options_.optimizer == Optimizer::Adam || options_.optimizer == Optimizer::AdamW;
  const bool copies_grads = update_copies_grads();
  if (options_.optimizer_impl == OptimizerImpl::SingleTensor && (adam || copies_grads)) {
    // _single_tensor_adam / _single_tensor_sgd, one parameter at a time: the grad copy (`grad =
    // grad.add(param, alpha=weight_decay)`, `-grad`) stays referenced through the parameter's update, and
    // Adam's (exp_avg_sq.sqrt() / bias_correction2_sqrt) holds the sqrt and the quotient at once; all are
    // freed before the next parameter.
    program().steps.push_back(std::move(st));
    for (const UpdateTarget& u : targets) {
      if (u.grad < 0) continue;
      Step one{"optimizer:" + u.name, std::string(optimizer_name()), Phase::Optimizer, {u.grad}, {}, 0};
      if (copies_grads) one.writes.push_back(new_grad_copy(u));
      if (adam) {
        one.writes.push_back(writer_.new_buffer("exp_avg_sq_sqrt:" + u.name, u.bytes, Category::Workspace));
        one.writes.push_back(writer_.new_buffer("denom:" + u.name, u.bytes, Category::Workspace));
      }
      program().steps.push_back(std::move(one));
    }
    return;
  }
  if (copies_grads && options_.optimizer_impl == OptimizerImpl::ForeachTorch1 && adam) {
    // torch 1.13's _multi_tensor_adam keeps the negated grads (`grads`) to the end of the update.
    for (const UpdateTarget& u : targets)
      if (u.grad >= 0) st.writes.push_back(new_grad_copy(u));
  } else if (copies_grads) {
    // _multi_tensor_adam / _multi_tensor_sgd: torch._foreach_neg / torch._foreach_add make the copied set,
    // which Adam deletes (`del device_grads`) before it allocates the sqrt set: a step of its own.
    Step copy{"optimizer:grad_copy", std::string(optimizer_name()), Phase::Optimizer, st.reads, {}, 0};
    for (const UpdateTarget& u : targets)
      if (u.grad >= 0) copy.writes.push_back(new_grad_copy(u));
    program().steps.push_back(std::move(copy));
  }
  if (adam && options_.optimizer_impl != OptimizerImpl::Fused) {
    // _multi_tensor_adam: torch._foreach_sqrt(exp_avg_sqs) allocates one tensor per parameter of the
    // device/dtype group, all alive together; torch 1.13 then adds eps out of place (a second set).
    const int sets = options_.optimizer_impl == OptimizerImpl::ForeachTorch1 ? 2 : 1;
    for (int set = 0; set < sets; ++set)
      for (const UpdateTarget& u : targets)
        if (u.grad >= 0)
          st.writes.push_back(writer_.new_buffer((set == 0 ? "exp_avg_sq_sqrt:" : "denom:") + u.name, u.bytes,
                                                 Category::Workspace));
  }
  program().steps.push_back(std::move(st));
}

const char* TrainingStep::optimizer_name() const {
  switch (options_.optimizer) {
    case Optimizer::Sgd: return "sgd";
    case Optimizer::Momentum: return "sgd_momentum";
    case Optimizer::Adam: return "adam";
    case Optimizer::AdamW: return "adamw";
    case Optimizer::AdamW8bit: return "adamw8bit";
    case Optimizer::PagedAdamW: return "paged_adamw";
    case Optimizer::PagedAdamW8bit: return "paged_adamw8bit";
  }
  return "sgd";
}

}  // namespace memplan
