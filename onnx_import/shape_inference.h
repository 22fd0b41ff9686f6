// Shape and dtype inference for every value of an ONNX model at the user's dimensions.
//
// Walks the top-level graph in a topological order; per node it applies memplan's own rule
// (onnx_import/rules/) when one exists, else ONNX 1.12's schema inference function fed with concrete
// input shapes and the known integer contents of shape tensors. Small integer tensors (Shape outputs,
// shape constants and the arithmetic on them) are evaluated, so Reshape/Expand/Tile/ConstantOfShape
// that consume them get concrete shapes. See docs/shape-inference.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "onnx_import/graph.h"
#include "onnx_import/import.h"

namespace onnx {
class ModelProto;
}

namespace memplan {

struct InferredValue {
  DType dtype = DType::Undefined;
  std::vector<int64_t> shape;                     // concrete; every entry >= 0
  std::optional<std::vector<int64_t>> int_value;  // known contents of small integer/bool tensors (row-major)
  std::optional<std::vector<double>> real_value;  // known contents of small floating-point tensors (row-major)
  // Sequences and optionals (Tensor::value_type, element_shapes): shape is empty, these list each tensor held.
  ValueType value_type = ValueType::Tensor;
  std::vector<std::vector<int64_t>> element_shapes;
  bool optional_of_sequence = false;  // an optional that holds (or would hold) a sequence
};

struct InferenceResult {
  // Every value of the top-level graph: inputs, initializers, node outputs (omitted optional outputs excluded).
  // Hashed, not ordered: a MoE config graph has 300,000 values with long common prefixes, each looked up once.
  std::unordered_map<std::string, InferredValue> values;
  // A topological order of model.graph().node() indices (the model's own order when it is one).
  std::vector<int32_t> order;
  // Symbolic dimension name -> value used (from --dim, or --batch for leading dims).
  std::map<std::string, int64_t> bound_dims;
  // Graph inputs whose contents --value gives (their values carry int_value/real_value), sorted.
  std::vector<std::string> bound_values;
  // Every If shaped, by its name in messages ("if_16k", "if_16k/else_branch/if_8k") -> whether the then branch
  // was taken (its condition known) or assumed. import_model inlines these branches (inline_branches.h).
  std::map<std::string, bool> if_branches;
  std::vector<std::string> warnings;
};

// Never opens a file: tensors whose payload was dropped or is external (data_location=EXTERNAL) are shaped
// from their dims and dtype and their values are treated as unknown.
// Throws InputError naming the node or tensor at fault (ShapeOverflow for byte sizes past 64 bits).
InferenceResult infer_shapes(const onnx::ModelProto& model, const Bindings& bindings);

}  // namespace memplan
