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
//    (what precedes the first and follows the last runs normally);
//  - layers: block_boundaries below, which needs the blocks.
std::vector<int32_t> choose_boundaries(const Graph& g, const std::vector<Separator>& candidates,
                                       const CheckpointOptions& options);

// layers: each repeated block one checkpointed segment, as transformers' gradient_checkpointing_enable checkpoints
// each decoder layer (LlamaModel.forward: self._gradient_checkpointing_func(decoder_layer.__call__, ...), and
// GradientCheckpointingLayer.__call__ in later releases) and torchtune's recipes wrap each
// TransformerSelfAttentionLayer (training.set_activation_checkpointing). `blocks` are the blocks' names in forward
// order (wrap_units.h: layers.0, layers.1, ...); a block's nodes are the exporter's scope /<name>/. The boundaries,
// as indices into `candidates`: the separator the first block reads from outside it (none when it reads the model's
// input: its segment then starts at the first op), then each block's output (the separator its nodes give out).
// InputError, naming the block, when a block has not exactly one such separator.
struct BlockBoundaries {
  std::vector<int32_t> chosen;
  bool from_first_boundary = true;  // the first boundary enters the first block (TrainingStep)
};
BlockBoundaries block_boundaries(const Graph& g, const std::vector<Separator>& candidates,
                                      const std::vector<std::string>& blocks);

// every:K with the last boundary forced at candidate `last`: last, last-K, last-2K, ... (ascending).
std::vector<int32_t> every_k_ending_at(int32_t last, int32_t k);

}  // namespace memplan
