// Wrapping units: the groups of parameters FSDP flattens into one FlatParameter each, and pipeline
// parallelism assigns to stages. The default rule is FSDP's transformer_auto_wrap_policy over the repeated
// block class (torch/distributed/fsdp/wrap.py): one unit per repeated block, found from the initializer
// names `<prefix>.<N>.` (N an integer, the prefix seen with at least two distinct N, each block holding
// submodules: layers.0, h.11, encoder.layer.3, blocks.7), everything else in the root unit (embeddings,
// final norm, head).
// --fsdp-wrap REGEX replaces the rule: the first capture group of a search in a parameter's name names its
// unit; a name it does not match stays in the root.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/op_fusion.h"
#include "onnx_import/graph.h"

namespace memplan {

struct WrapUnits {
  std::vector<std::string> names;       // unit index -> name; 0 is the root unit ("root")
  std::vector<int32_t> unit_of_tensor;  // per tensor: the unit of a parameter (-1: not a parameter)
  std::vector<int32_t> unit_of_op;      // per executed op: the unit of the parameters it reads; an op
                                        // reading none belongs to the unit of the op before it (root first)
  std::vector<int32_t> first_op, last_op;  // per unit: its first and last op in forward order (-1: none)
  size_t count() const { return names.size(); }
};

// `parameters`: the tensors that are module parameters (trained or frozen), in initializer order.
// `regex`: --fsdp-wrap, or empty for the default rule. Throws InputError when the regex is invalid or
// matches no parameter of model `g`.
WrapUnits find_wrap_units(const Graph& g, const std::vector<FusedOp>& ops, const std::vector<int32_t>& parameters,
                          const std::string& regex);

}  // namespace memplan
