// Which weight-reading MatMuls stay whole on every tensor-parallel GPU, recognised by what reads their output:
// a mixture of experts' router and a shared expert's gate, multi-head latent attention's down-projections.
// Internal to the tensor-parallel plan (cost_models/tensor_parallel.cc); the stacked experts' chunked gate and up
// below are find_moe_blocks' too (cost_models/engine_kernels_moe.cc). Which weight an aten::_grouped_mm reads as
// its stacked experts is graph_facts.h's grouped_mm_experts, which --ep's FSDP2 sharding asks as well.
#pragma once

#include <utility>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// A mixture of experts' router (its logits read by a Softmax, through a Cast, by a TopK; or DeepseekV3TopkRouter's
// Sigmoid, bias Add and group Reshape to the TopKs) or a shared expert's one-feature gate (read by a Sigmoid).
bool is_replicated_gate(const Graph& g, const Node& n);

// q_a_proj or kv_a_proj_with_mqa of multi-head latent attention: the latent it makes is normalized over its
// features (Pow then ReduceMean over the last axis, after kv_a_proj_with_mqa's Split). The caller checks that the
// input is replicated.
bool is_replicated_latent(const Graph& g, const Node& n);

// True when `t` (a stacked projection's output [S, 2I]) is read by a Split into two: gate and up chunked
// (MixtralExperts' gate_up_proj.chunk(2, dim=-1)), each expert's two projections in one weight.
bool chunked_gate_up(const Graph& g, int32_t t);

// The stacked biases [E, out] added to a stacked projection's output `t` [S, out] by rows, Add(t, Gather(bias,
// expert_ids)) (GptOssExperts' gate_up_proj_bias[expert_ids_g]): each (bias weight, the gathered rows [S, out]).
std::vector<std::pair<int32_t, int32_t>> stacked_biases(const Graph& g, int32_t t);

}  // namespace memplan
