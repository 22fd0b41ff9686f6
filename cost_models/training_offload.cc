// --offload-activations, the training step's side: which tensors torchtune's pack hook sees, in the order it sees
// them, and which backward node unpacks each; the pass over the program is activation_offload.cc.
#include <set>
#include <string>

#include "cost_models/training_step.h"

namespace memplan {

// Op `i` has just been emitted in the forward (`mode`), keeping `saved`; `step_before` is the last step before it.
//  - Save: autograd packs each saved tensor as the op's node is made, at the op's step. The output head is left out:
//    get_act_offloading_ctx_manager runs model.output under a NoOpManager, whose hooks replace the offloading ones.
//  - NoSave, the first op of a checkpointed segment: the checkpoint saves the segment's inputs
//    (CheckpointFunction.forward's ctx.save_for_backward, or non-reentrant checkpoint's _NoopSaveInputs) before its
//    function runs, so the pack hook sees them then; the ops inside save nothing.
void TrainingStep::record_packs(int32_t i, ForwardMode mode, const std::vector<int32_t>& saved, int32_t step_before) {
  const int32_t step = static_cast<int32_t>(program().steps.size()) - 1;
  if (mode == ForwardMode::Save) {
    int32_t x = -1, w = -1;
    if (i + 1 == static_cast<int32_t>(context_.ops.size()) && head_operands(i, x, w)) return;
    for (int32_t b : saved) packs_.push_back({b, step, i});
    return;
  }
  const int32_t segment = segment_of_op_[i];
  if (mode != ForwardMode::NoSave || segment < 0 || (i > 0 && segment_of_op_[i - 1] == segment)) return;
  std::set<int32_t> made_inside;
  for (size_t j = i; j < context_.ops.size() && segment_of_op_[j] == segment; ++j)
    made_inside.insert(context_.ops[j].outputs.begin(), context_.ops[j].outputs.end());
  std::vector<int32_t> inputs;
  for (size_t j = i; j < context_.ops.size() && segment_of_op_[j] == segment; ++j)
    for (int32_t t : context_.ops[j].inputs) {
      const int32_t b = forward_buffer_[t];
      if (made_inside.count(t) || b < 0 || program().buffers[b].resident) continue;
      add_unique(inputs, b);
    }
  const int32_t node = static_cast<int32_t>(context_.ops.size()) + segment;
  for (int32_t b : inputs) packs_.push_back({b, step_before >= 0 ? step_before : step, node});
}

void TrainingStep::record_unpack_node(int32_t node, int32_t first_step) {
  unpack_nodes_[node] = {first_step, static_cast<int32_t>(program().steps.size()) - 1};
}

void TrainingStep::apply_offload() {
  const OffloadFacts f = offload_activations(program(), packs_, unpack_nodes_);
  result_.offloaded_host_bytes = f.host_bytes;
  result_.notes.push_back(
      "Activation offloading (--offload-activations, torchtune's OffloadActivations with streams): " +
      std::to_string(f.offloaded) + " saved tensor(s) of 1024 bytes or more copied to " + std::to_string(f.host_bytes) +
      " bytes of pinned host memory (not in the figures), " + std::to_string(f.kept) +
      " kept on the GPU (smaller, or parameters); the output head's are not offloaded. Each GPU copy lives until a "
      "tensor offloaded 5 packs later (or the first backward node), and each one brought back in backward until the "
      "next backward node that unpacks an offloaded tensor ends.");
}

}  // namespace memplan
