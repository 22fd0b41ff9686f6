// Pass 4 of the layout (tensor_layout.h), the pipeline partition: one stage of --pp as a graph of its own, with
// dense ids, and its training context carried over to those ids. The training step then runs on the stage as on
// any model: nothing in it knows about stages, and no table indexed by op or tensor can keep the whole graph's
// numbering (the bug class of tp_gathered, which was indexed by op position and not renumbered with a stage).
//
// The stage graph holds
//   - the nodes of the stage's ops, in the whole graph's order, and the tensors they read and write;
//   - the nodes no op runs (shape arithmetic: Shape, Size, host values) that read a tensor the stage computes, so
//     that each of its tensors has the readers it has in the whole graph (an in-place op needs to be the sole
//     reader, eager_semantics.h), and the Constant nodes that make a tensor it reads (a Python scalar);
//   - the embedding a tied head reads (training_context.h, tied_to);
//   - as graph inputs, after the model's own: the activations it receives from earlier stages (a p2p receive,
//     `received`); as graph outputs, after the model's own: those it sends to later stages (`sent`).
// A shape value computed from another stage's tensors arrives as a tensor without a producer that is not an input:
// a host value, which no program step allocates. Tensor and node ids grow with the whole graph's (the program's
// buffers are made in that order); `original_tensor` and `original_node` map them back. Names are kept, so reports
// name what the whole graph names.
//
// The trainable set and passes 5 and 6 (frozen storage, ZeRO) were decided on the whole model, where a --trainable
// pattern or a missing frozen parameter is reported once, for the model; the stage context carries their results.
// --pp with FSDP and with checkpointing are refused (report/option_checks.cc): a stage has no wrapping units and no
// checkpoint candidates.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_models/training_context.h"
#include "onnx_import/graph.h"

namespace memplan {

struct StageGraph {
  Graph graph;
  std::vector<int32_t> original_tensor;  // stage tensor id -> the whole graph's
  std::vector<int32_t> original_node;    // stage node id -> the whole graph's
  std::vector<int32_t> original_op;      // stage op index -> the whole context's, ascending
  std::vector<int32_t> stage_tensor;     // whole graph's tensor id -> the stage's (-1: not in the stage)
  std::vector<int32_t> stage_node;       // whole graph's node id -> the stage's (-1: not in the stage)
  std::vector<int32_t> received;         // stage ids of the activations received from earlier stages, in first use
  std::vector<int32_t> sent;             // stage ids of the activations sent to later stages, in first use
};

// Stage `stage` of `whole` (a whole model's context) when op i of `whole` runs on stage `stage_of_op[i]`
// (non-decreasing).
StageGraph stage_graph(const TrainingContext& whole, const std::vector<int32_t>& stage_of_op, int stage);

// The stage's training context: every per-tensor, per-node and per-op fact of `whole` at the stage's ids. The
// result points to `stage.graph`, which must outlive it.
TrainingContext stage_context(const TrainingContext& whole, const StageGraph& stage);

}  // namespace memplan
