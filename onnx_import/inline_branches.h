// Inlining the If branches shape inference took, so the cost models cost what runs.
//
// The importer shapes subgraph bodies but the cost models see only the top-level graph, where an If is one
// node: the memory of its branch (the branch's weights, its activations) would go uncounted, although in
// exports such as Silero VAD the whole model sits inside If branches. Once infer_shapes has decided each If
// (its condition known, or a branch assumed: InferenceResult::if_branches), the top-level graph's Ifs are
// replaced by their branch's nodes, recursively for Ifs inside inlined branches, and the model is shaped again.
// Internal to onnx_import/.
#pragma once

#include <map>
#include <string>

namespace onnx {
class ModelProto;
}

namespace memplan {

// Rewrites `model` in place: each top-level If found in `taken` (keyed by the node's name as messages give it)
// becomes its branch's nodes, with the branch's initializers and value_info moved to the top level and one
// Identity per If output (the branch's output -> the If's output). Inlined nodes are named
// "<If name>/<then_branch|else_branch>/<node name>". A branch-local name that the top level already uses is
// renamed with that prefix. Returns whether anything was inlined.
bool inline_taken_branches(onnx::ModelProto& model, const std::map<std::string, bool>& taken);

}  // namespace memplan
