// Choosing checkpoint boundaries among the separators (cost_models/separators.h) for --checkpoint
// sqrt | every:K | at:T1,T2,... (auto searches with the program builder, cost_models/training.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"
#include "cost_models/separators.h"

namespace memplan {

// Indices into `candidates` of the chosen boundaries, ascending.
//  - sqrt: ceil(sqrt(c + 1)) segments of about equal candidate count (Chen et al. 2016);
//  - every:K: candidates K-1, 2K-1, ... (every K-th separator);
//  - at: the named tensors, each of which must be a candidate (InputError otherwise, listing them);
//    the segments run between consecutive named tensors, as `checkpoint(segment, T_i)` calls would
//    (what precedes the first and follows the last runs normally).
std::vector<int32_t> choose_boundaries(const Graph& g, const std::vector<Separator>& candidates,
                                       const CheckpointOptions& options);

// every:K with the last boundary forced at candidate `last`: last, last-K, last-2K, ... (ascending).
std::vector<int32_t> every_k_ending_at(int32_t last, int32_t k);

}  // namespace memplan
