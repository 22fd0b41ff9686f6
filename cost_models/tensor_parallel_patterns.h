// Which weight-reading MatMuls stay whole on every tensor-parallel GPU, recognised by what reads their output:
// a mixture of experts' router and a shared expert's gate, multi-head latent attention's down-projections.
// Internal to the tensor-parallel plan (cost_models/tensor_parallel.cc).
#pragma once

#include "onnx_import/graph.h"

namespace memplan {

// A mixture of experts' router (its logits read by a Softmax, through a Cast, by a TopK; or DeepseekV3TopkRouter's
// Sigmoid, bias Add and group Reshape to the TopKs) or a shared expert's one-feature gate (read by a Sigmoid).
bool is_replicated_gate(const Graph& g, const Node& n);

// q_a_proj or kv_a_proj_with_mqa of multi-head latent attention: the latent it makes is normalized over its
// features (Pow then ReduceMean over the last axis, after kv_a_proj_with_mqa's Split). The caller checks that the
// input is replicated.
bool is_replicated_latent(const Graph& g, const Node& n);

}  // namespace memplan
