// DeepSpeed ZeRO-3 with --checkpoint layers: each checkpointed decoder layer's recomputation in backward gathers its
// parameters again, through the same module hooks. What is modelled is torch.utils.checkpoint's reentrant checkpoint
// as transformers applies it (PreTrainedModel.gradient_checkpointing_enable: use_reentrant True by default, and the
// layer's __call__ is what is checkpointed, "because __call__ attaches all the hooks of the module"), not DeepSpeed's
// own deepspeed.checkpointing (runtime/activation_checkpointing/checkpointing.py: partition_activations, contiguous
// buffers), which the HF Trainer does not use. Sources: torch/utils/checkpoint.py CheckpointFunction; DeepSpeed at
// edaa7221267243c7be7fb49c5d5f5c4fb97b4641, deepspeed/runtime/zero/parameter_offload.py and
// partitioned_param_coordinator.py. docs/cost-models.md, "DeepSpeed ZeRO-3", Checkpointing.
//  - CheckpointFunction.forward runs the layer under torch.no_grad(): its modules' pre-forward hooks fetch and their
//    post-forward hooks release as in any forward (PreBackwardFunctionForModule on no-grad outputs leaves no node).
//  - CheckpointFunction.backward runs the layer again under torch.enable_grad() (pre_sub_module_forward_function:
//    fetch_sub_module(forward=True), then release_sub_module(forward=True) after each module), then
//    torch.autograd.backward on the recomputed outputs, whose nodes carry the modules' pre- and post-backward hooks.
//    So in backward, a checkpointed layer's module calls are its recomputation in forward order, then its backward.
//  - The trace: reset_step turns INVALID into RECORD before the first step, which records every call, the
//    recomputations' included, and into COMPLETE before the second; trace_prologue invalidates only a call that
//    differs from the recorded one at its step id. Every step checkpoints the same layers in the same order, so from
//    the second step on the complete trace holds the recomputations and __params_to_release, max_reuse_distance and
//    the prefetch queue read them like any other call. memplan models that steady state.
//  - The IPG epilogue (independent_gradient_partition_epilogue) still runs once, at the end of the outer backward:
//    the engine registers a hook on the forward's outputs (runtime/utils.py register_output_backward_hooks) whose
//    first call, at the start of the outer backward, runs engine._backward_prologue, which queues the post-backward
//    callback on that graph task (base_optimizer.py queue_post_backward_callback); later gradient hooks, inside a
//    recomputation's nested backward too, find it queued. So a frozen head (the first hook inside the last layer)
//    changes nothing.
//  - A frozen parameter in a checkpointed layer: _fetch_sub_module_impl also attributes a frozen parameter gathered
//    in a recomputation (in_checkpoint_recompute) to the latest backward module not yet released
//    (update_recompute_parameters), whose backward release then releases it too. Under the reentrant checkpoint that
//    module is one enclosing the layers (the layer's own modules ran their forward under no_grad, so none of them
//    has a pre-backward hook in the outer graph): it is released at the backward's end, and the attribution adds
//    nothing to param.ds_active_sub_modules, so the parameter's own module releases it as it releases a trainable
//    one (__params_to_release reads the trace, not requires_grad), before that. The fetch trace is the same.
#include <algorithm>

#include "cost_models/training_step.h"
#include "onnx_import/errors.h"

namespace memplan {

// The backward part of the fetch trace (zero3_releases reads it): each module whose outputs need grad, the latest
// last op first; before the backward at op i, each checkpointed segment ending at or after i is recomputed first
// (training.cc recomputes at the segment's last op, then runs its pre-backward hook): its modules' fetches, in
// forward order. A segment whose modules never reach backward is recomputed all the same (at its end op).
void TrainingStep::ds3_backward_trace(const std::vector<int32_t>& order, std::vector<std::vector<int32_t>>& trace) {
  const CheckpointMode mode = options_.checkpoint.mode;
  precondition(mode == CheckpointMode::None || mode == CheckpointMode::Layers,
               "DeepSpeed ZeRO-3 with a --checkpoint mode other than layers (report/deepspeed_config.cc check_stage3)");
  const std::string where = "--deepspeed at stage 3 with --checkpoint layers, model '" + graph_.model_path + "': ";
  for (int32_t m : order) {
    const Ds3Module& mod = ds3_modules_[m];
    const int32_t s = segment_of_op_[mod.first_op];
    for (int32_t i = mod.first_op; i <= mod.last_op; ++i)
      if (segment_of_op_[i] != s)
        throw InputError(where + "module '" + mod.name + "'s ops are partly inside a checkpointed block: not modelled "
                         "(a checkpoint wraps whole module calls)");
  }
  std::vector<int32_t> ends;  // the checkpointed segments' last ops, latest first
  for (auto it = segment_end_ops_.rbegin(); it != segment_end_ops_.rend(); ++it)
    if (segment_of_op_[*it] >= 0) ends.push_back(*it);
  size_t next = 0;
  auto recompute_from = [&](int32_t op) {  // the segments ending at or after op, not recomputed yet
    for (; next < ends.size() && ends[next] >= op; ++next)
      for (int32_t m : order)
        if (segment_of_op_[ds3_modules_[m].first_op] == segment_of_op_[ends[next]]) {
          ds3_modules_[m].recompute_at = static_cast<int32_t>(trace.size());
          trace.push_back(ds3_modules_[m].params);
        }
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Ds3Module& m = ds3_modules_[*it];
    const bool output_grad = outputs_need_grad(m.first_op, m.last_op, [](int32_t) { return true; });
    bool input_grad = false;
    for (int32_t t : context_.ops[m.first_op].inputs) input_grad = input_grad || (!ds3_param(t) && context_.requires_grad[t]);
    if (!output_grad) continue;
    recompute_from(m.last_op);
    m.backward_at = static_cast<int32_t>(trace.size());
    m.post_backward = input_grad;
    trace.push_back(m.params);
  }
  recompute_from(-1);
}

// release_sub_module(forward=True) after a recomputed module's last op.
void TrainingStep::ds3_after_recompute(int32_t i) {
  if (ds3_prefetch()) return ds3_run_calls(kDs3AfterRecompute, i);
  for (int32_t k : ds3_ending_at_[i]) {
    const Ds3Module& m = ds3_modules_[k];
    if (m.recompute_at >= 0)
      ds3_release(ds3_releases_[m.recompute_at], "deepspeed:release_recompute:" + m.name, Phase::Backward);
  }
}

}  // namespace memplan
