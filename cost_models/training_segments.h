// The checkpointed segments a training step runs with (training_step.h's TrainingStep takes them): how the forward
// emits an op in or out of a segment, the segments' plan, and plan_segments (training_checkpoints.cc), which
// chooses them from --checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/training_context.h"

namespace memplan {

// Save: a normal forward op, autograd keeps what its backward needs. NoSave: inside a checkpointed segment,
// nothing kept. Recompute: the segment run again in backward, keeping what its backward needs.
enum class ForwardMode { Save, NoSave, Recompute };

// The checkpointed segments of a step. `end_ops` (ascending op indices) end them. The first segment starts at the
// first op (sqrt, every:K, auto: checkpoint_sequential; layers when the first block reads the model's input) or,
// `from_first_boundary` (at:, layers), after the first boundary.
struct SegmentPlan {
  std::vector<int32_t> end_ops;
  bool from_first_boundary = false;
  // Per segment index: whether it is checkpointed (empty: all). selective:N leaves the other blocks alone.
  std::vector<bool> checkpointed;
  // selective:op: torchtitan's per-op policy saves some ops' outputs inside each segment (selective_checkpoint.h).
  bool per_op = false;
  // Reentrant checkpoint (torch 1.13's default, transformers'): CheckpointFunction.backward holds the recomputed
  // outputs and their grads until the segment's backward ends. torchtitan's ptd_checkpoint_wrapper is non-reentrant
  // (CheckpointImpl.NO_REENTRANT): the recomputation keeps only what the recomputed ops' backward saves.
  bool reentrant = true;
  // Non-reentrant: the recomputation ends at the segment's last op that saves a tensor (CheckpointOptions::early_stop).
  bool early_stop = false;
};

// The segments --checkpoint asks for (training_checkpoints.cc); `chosen` gets the chosen separators' indices, `notes`
// what auto could not fit.
SegmentPlan plan_segments(const TrainingContext& context, std::vector<int32_t>& chosen, std::vector<std::string>& notes);

}  // namespace memplan
