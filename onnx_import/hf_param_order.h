// The order of a config.json graph's parameters: transformers' model.parameters() order, i.e. the order in which each
// module's __init__ registers its submodules and parameters (torch.nn.Module.named_parameters: a module's own
// parameters, then its children in registration order, recursively). FSDP's flat parameter and DeepSpeed ZeRO's flat
// groups and partition boundaries follow that order (cost_models/training_fsdp.cc flattening_order,
// cost_models/deepspeed_zero.cc), and torch.onnx.export (torch 1.13) writes the initializers in the module's
// state-dict order, the same order with each module's buffers after its parameters. Internal to onnx_import
// (onnx_import/llama_graph.cc).
#pragma once

#include "onnx/onnx_pb.h"
#include "onnx_import/hf_config.h"

namespace memplan {

// Reorders `g`'s initializers (the builder's parameters, before constant folding) into that order, stably. Throws
// InternalError on a parameter name whose place the table in hf_param_order.cc does not give.
void order_as_registered(const DecoderConfig& c, onnx::GraphProto& g);

}  // namespace memplan
