// Checkpoint boundary candidates: op outputs that separate the forward graph, i.e. every path from the
// model's input to its outputs passes through the op that produces them (Chen et al. 2016; a
// checkpointed segment then needs only that one tensor from before it).
#pragma once

#include <cstdint>
#include <vector>

#include "cost_models/op_fusion.h"
#include "onnx_import/graph.h"

namespace memplan {

struct Separator {
  int32_t op = -1;      // index into the op list
  int32_t tensor = -1;  // the op's output that the rest of the graph reads
};

// `ops` in execution order; `on_main_path[i]` says whether op i depends (transitively) on the primary
// input (graph input 0). Ops off the main path (attention-mask preprocessing, position ids and their
// embeddings) compute side values that checkpointed segments receive as extra arguments, as
// HuggingFace models pass attention_mask to each checkpointed layer; they are not vertices here.
// The separators are the dominators of a virtual sink (fed by every graph output) in the DAG of main
// ops rooted at a virtual source (feeding every op that reads the primary input), computed with
// boost::lengauer_tarjan_dominator_tree. Returned in execution order, the last op excluded.
std::vector<Separator> find_separators(const Graph& g, const std::vector<FusedOp>& ops,
                                       const std::vector<bool>& on_main_path);

// Per op: whether it depends on graph input 0 through the op list.
std::vector<bool> main_path_ops(const Graph& g, const std::vector<FusedOp>& ops);

}  // namespace memplan
