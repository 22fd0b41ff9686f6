// `estimate`'s view of a decoder with a KV cache (cost_models/kv_cache.h finds the cache): its prefill and
// decode steps apart, each estimated with the cache's tensors held outside the allocator.
#pragma once

#include <cstdint>
#include <optional>

#include "cost_models/kv_cache.h"
#include "onnx_import/graph.h"
#include "onnx_import/import.h"
#include "onnx_import/model_session.h"
#include "report/estimate.h"

namespace memplan {

// For `estimate`: the phases of `graph` (the session's model shaped with `user`) when it is a decoder with a KV
// cache found unambiguously, each step estimated with the cache's tensors held outside the allocator
// (InferenceOptions::held_outside; what serve assumes, the cache in vLLM's blocks): the prefill of the bound new
// tokens with nothing cached, and the decode of one new token after the bound cached tokens, at the bound batch
// (the cache inputs' leading axis); nullopt otherwise, without an error: the estimate itself stands.
// `weights_bytes`: the estimate's weights.
std::optional<KvPhases> estimate_kv_phases(ModelSession& model, const Bindings& user, const Graph& graph,
                                           const EstimateOptions& options, uint64_t weights_bytes);

}  // namespace memplan
