// What PyTorch autograd keeps for each op's backward, and how each op's input grads come to exist,
// mapped from the ONNX op (or recognised fused op) to the aten op it was exported from
// (tools/autograd/derivatives.yaml).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/op_fusion.h"
#include "onnx_import/graph.h"

namespace memplan {

// A scratch buffer an op's backward allocates and frees (exact requested bytes). What the forward creates
// beyond its outputs and autograd saves (masks, indices, statistics) is forward_extras() in eager_semantics.h.
struct SavedExtra {
  std::string suffix;  // appended to the op's name: ":mask", ":indices", ":mean", ...
  uint64_t bytes = 0;
};

struct AutogradRule {
  std::vector<int32_t> saved_tensors;   // graph tensors (inputs or outputs) kept for backward
  // Scratch the backward allocates and frees inside the step (flash attention's dq accumulator).
  std::vector<SavedExtra> backward_temporaries;
  // Input tensors whose grad is a view of the output's grad (reshape/transpose/squeeze backward,
  // add's pass-through, concat's narrow): no allocation. Every other input grad is a fresh tensor.
  std::vector<int32_t> passthrough_inputs;
};

// `requires_grad` per tensor: linear/matmul/mul save an operand only when the other needs a grad.
// `dtype`: each tensor's storage type (a Cast to the type its input has is Tensor.to returning self).
// `mean_saves_input`: ReduceMean keeps its input (torch 1.13, TrainingOptions::mean_saves_input).
AutogradRule autograd_rule(const Graph& g, const FusedOp& op, const std::vector<bool>& requires_grad,
                           const std::vector<DType>& dtype, bool mean_saves_input);

// torch.autocast's op lists (aten/src/ATen/autocast_mode.cpp): ops that run in the low-precision
// type, ops forced to float32, and everything else (keeps/promotes its inputs' type).
enum class AutocastClass { LowPrecision, Float32, Promote };
AutocastClass autocast_class(const FusedOp& op);

}  // namespace memplan
