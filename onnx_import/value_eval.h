// Values as shape inference sees them, and the evaluation of small shape computations on them.
//
// Exported transformers compute their Reshape/Expand targets at run time: Shape -> Gather -> Unsqueeze ->
// Concat -> Reshape. To give those consumers concrete shapes, the contents of small tensors (at most
// kMaxEvalElements elements) are carried along and the ops that build shapes are evaluated on them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace onnx {
class NodeProto;
class TensorProto;
}  // namespace onnx

namespace memplan::shape {

// Contents are tracked only for tensors at most this large: shape vectors, scalars, small index tensors.
inline constexpr uint64_t kMaxEvalElements = 1024;

struct Value {
  DType dtype = DType::Undefined;             // a sequence's or optional's: its tensors' element type
  std::vector<int64_t> shape;                 // concrete, every entry >= 0 (empty for a sequence or optional)
  std::optional<std::vector<int64_t>> ints;   // known contents of integer and bool tensors (bool as 0/1)
  std::optional<std::vector<double>> reals;   // known contents of floating-point tensors
  // Sequence and optional values (onnx.proto, TypeProto.sequence_type / optional_type). A sequence's `items`
  // are its tensors in order; an optional's are none (it holds no value) or one, the tensor or sequence it
  // holds. `optional_of_sequence` says which an optional holds (or would hold, when empty).
  ValueType kind = ValueType::Tensor;
  std::vector<Value> items;
  bool optional_of_sequence = false;

  bool known() const { return ints.has_value() || reals.has_value(); }
  bool is_tensor() const { return kind == ValueType::Tensor; }
  uint64_t elements() const;  // product of shape; callers have checked it fits (see checked_value_bytes)
  // The shape of every tensor the value holds: {shape} for a tensor, the items' for a sequence, the held
  // value's for an optional ({} when empty).
  std::vector<std::vector<int64_t>> tensor_shapes() const;
};

// "a tensor", "a sequence", "an optional": for messages.
std::string kind_text(const Value& v);
// Whether two values have the same kind, dtype and shapes (contents ignored), items included.
bool same_type(const Value& a, const Value& b);
// The value with its contents dropped (items too): what a Loop body sees of a carried value.
Value type_only(const Value& v);

// Contents are kept in Value::ints for dtype_is_integer() types (graph.h), in Value::reals for these:
bool is_real(DType t);  // float32, float16, bfloat16, float64

// The byte size of a shape, or nullopt when a dim is negative or the size does not fit in 64 bits.
std::optional<uint64_t> bytes_of(DType dtype, const std::vector<int64_t>& shape);
// The element count and byte size of a shape, overflow-checked; `what` names the tensor in the error.
uint64_t checked_elements(const std::vector<int64_t>& shape, const std::string& what);
uint64_t checked_bytes(DType dtype, const std::vector<int64_t>& shape, const std::string& what);
// A value's bytes: a tensor's, or the sum over the tensors a sequence or optional holds; overflow-checked.
uint64_t checked_value_bytes(const Value& v, const std::string& what);

// A tensor's dtype, dims and (when its payload is present and small) contents. Never opens external data.
// Throws InputError naming `what` for an unknown dtype or a negative dim.
Value value_from_tensor(const onnx::TensorProto& tensor, const std::string& what);

// Element i of a known value as int64 / double, whichever representation it holds.
int64_t int_at(const Value& v, size_t i);
double real_at(const Value& v, size_t i);

// Fills outputs[k].ints/reals for the ops listed in docs/shape-inference.md when every input it reads has
// known contents and the output is small. The op's evaluator comes from one table (values/values.h). `outputs` already carry their inferred dtype and shape.
// Inputs are nullptr where omitted. Never throws for values it cannot compute: they stay unknown.
void evaluate_values(const onnx::NodeProto& node, int opset, const std::vector<const Value*>& inputs,
                     std::vector<Value>& outputs);

}  // namespace memplan::shape
