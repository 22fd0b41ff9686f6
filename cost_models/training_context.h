// Everything about a training step that does not depend on the checkpoint boundaries: the ops PyTorch
// runs, each tensor's storage type under the chosen precision, which tensors need a grad, and the
// autograd rule of every op. Computed once; the program builder may then run many times (auto
// checkpointing searches over boundary sets).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/autograd_rules.h"
#include "cost_models/cost_model.h"
#include "cost_models/eager_semantics.h"
#include "cost_models/lora_adapters.h"
#include "cost_models/op_fusion.h"
#include "cost_models/separators.h"
#include "cost_models/tensor_layout.h"
#include "cost_models/tensor_parallel.h"
#include "cost_models/wrap_units.h"

namespace memplan {

struct TrainingContext {
  const Graph* graph = nullptr;
  ExecutionOptions execution;
  RuntimeModel runtime;                 // runtime_model(execution, /*training=*/true)
  TrainingOptions options;
  std::vector<FusedOp> ops;             // executed ops, in order (shape computations and Constants removed)
  std::vector<uint64_t> op_flops;       // forward FLOPs per op
  std::vector<bool> shape;              // per tensor: a shape computation (no GPU memory)
  TensorLayout layout;                  // per tensor: what one GPU holds of it, and in what form (tensor_layout.h)
  std::vector<bool> requires_grad;      // per tensor
  std::vector<bool> is_param;           // per tensor: a trainable parameter read by some op
  std::vector<int32_t> params;          // trainable parameters, in initializer order
  std::vector<int32_t> module_parameters;  // the module's parameters, trained or frozen, in initializer order
  std::vector<int32_t> tied_to;         // per tensor: the parameter a folded tied-embedding copy is (-1: none)
  std::vector<AutogradRule> rules;      // per op
  std::vector<Separator> separators;    // checkpoint boundary candidates
  // Per op: tensors a Python frame still references through it, past their graph readers (PEFT's ParamWrapper
  // deltas until the experts' forward returns: lora_adapters.h), read again at its end.
  std::vector<std::vector<int32_t>> held_through;
  WrapUnits units;                      // --shard fsdp: FSDP's wrapping units (empty otherwise)
  // A pipeline stage's context (stage_graph.h: `graph` is the stage's own): the graph inputs it receives from
  // earlier stages and the graph outputs it sends to later ones, and the activations of earlier in-flight
  // micro-batches it still holds (one resident block each).
  std::vector<int32_t> received, sent;
  std::vector<uint64_t> in_flight_bytes;
  std::vector<std::string> notes;       // assumptions found while building the context
};

// `lora`: the adapted graph `g` is (add_lora_adapters), or null. With it the adapters train and a base parameter
// trains only if --trainable names it. `float32`: per tensor of `g`, stored in float32 whatever the precision says
// (pass 1's pins: PEFT's adapters, the framework's float32 islands); null: none.
TrainingContext make_training_context(const Graph& g, const ExecutionOptions& execution, const TrainingOptions& options,
                                      const LoraGraph* lora = nullptr, const std::vector<bool>* float32 = nullptr);

// --ep N's note (training_ep.cc): what rank 0's graph holds, what FSDP2 does with the experts, what is not counted.
std::string expert_parallel_note(const TrainingOptions& options);

}  // namespace memplan
