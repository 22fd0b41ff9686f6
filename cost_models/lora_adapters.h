// LoRA, what-if (--lora-rank R --lora-targets REGEX): the training graph a PEFT LoRA model runs, built
// from a plain base export. Each targeted Linear (a MatMul or Gemm whose weight initializer's name the
// regex finds, recognised as op fusion recognises F.linear) gets the ops of PEFT's lora.Linear.forward
// (peft/tuners/lora/layer.py):
//     result = base_layer(x)
//     x = self._cast_input_dtype(x, lora_A.weight.dtype)      # a copy only when the dtypes differ
//     result = result + lora_B(lora_A(dropout(x))) * scaling
//     result = result.to(torch_result_dtype)                   # back to the base's type
// written as torch.onnx writes them (Transpose + MatMul per adapter Linear, a Constant scaling, Mul, Add),
// so every later rule (what autograd saves, backward, grads and optimizer states) is the one the cost
// model already applies to a PEFT export: nothing about adapters is costed twice. The base weights
// freeze; the adapters train (make_training_context). A mixture of experts' stacked [E, d1, d2] parameter the
// regex names gets PEFT's target_parameters instead (ParamWrapper: the module's deltas before its forward, held until
// it returns, and W + delta before the parameter's first reader, which every reader then reads; lora_adapters.cc
// Builder::parameter_delta, lora_parameters.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"
#include "onnx_import/graph.h"

namespace memplan {

// A tensor a Python frame still references after its graph readers: held until the last node named under `scope`
// (a module's forward, "/layers.0/mlp/experts/") returns.
struct ModuleHold {
  int32_t tensor = -1;
  std::string scope;
};

struct LoraGraph {
  Graph graph;                 // the base graph with the adapter ops inserted after each targeted Linear
  std::vector<bool> adapter;   // per tensor: an adapter parameter (lora_A / lora_B weight)
  std::vector<bool> float32;   // per tensor: stored in float32 whatever --precision says (see .cc)
  int adapted_layers = 0;      // Linear layers (lora.Linear)
  int adapted_parameters = 0;  // stacked experts' parameters (target_parameters, ParamWrapper)
  uint64_t adapter_parameters = 0;  // elements of every lora_A and lora_B
  // ParamWrapper's deltas, each referenced by its _LoraParameterProxy until the experts' forward returns.
  std::vector<ModuleHold> held_to_module_end;
};

// Validates the --lora-* options (InputError on a bad rank, a missing or unmatched regex) and builds
// the adapted graph. Call only when lora_requested(options).
LoraGraph add_lora_adapters(const Graph& base, const TrainingOptions& options);

// The module an adapter weight this file adds belongs to ("layers.0.q_proj" for
// "layers.0.q_proj.lora_A.weight"), or "" for any other name.
std::string lora_adapter_module(const std::string& name);

// "" without stacked parameters; else what target_parameters ran, for the LoRA note (training.cc).
std::string lora_parameters_note(const LoraGraph& lora);

inline bool lora_requested(const TrainingOptions& o) {
  return o.lora_rank != 0 || !o.lora_targets.empty() || o.lora_dropout != 0;
}

}  // namespace memplan
