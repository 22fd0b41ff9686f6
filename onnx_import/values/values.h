// Value evaluators: what evaluate_values() (value_eval.h) runs per op, in the style of the shape rules
// (rules/rules.h). Each evaluator fills the contents of a node's first output from its inputs' known
// contents, or leaves them unknown; none throws for a value it cannot compute. The op semantics are ONNX's
// (onnx/docs/Operators.md); where ONNX leaves integer behaviour open, ONNX Runtime's CPU kernels decide.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "onnx_import/value_eval.h"

namespace onnx {
class AttributeProto;
}

namespace memplan::shape {

// The first attribute of `node` named `name`, or nullptr. (NodeContext::attr uses it too.)
const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, std::string_view name);

namespace values {

using Inputs = std::vector<const Value*>;

// One node's evaluation: its inputs (nullptr where omitted) and its first output, whose dtype and shape
// are already inferred, at most kMaxEvalElements elements, of an integer or real dtype, contents unknown.
struct EvalContext {
  const onnx::NodeProto& node;
  int opset;
  const Inputs& in;
  Value& out;

  int64_t attr_int(std::string_view name, int64_t def) const;
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name) const;
  bool known(size_t i) const { return i < in.size() && in[i] && in[i]->known(); }     // contents known
  bool present(size_t i) const { return i < in.size() && in[i]; }                    // not omitted
};

using Evaluator = void (*)(const EvalContext&);

// domain -> op_type -> evaluator; the default domain is "". Filled by the register_* functions below.
using EvalTable = std::map<std::string, std::map<std::string, Evaluator, std::less<>>, std::less<>>;

void register_arith_values(EvalTable& table);   // values/arith.cc: element-wise ops, comparisons, Where
void register_tensor_values(EvalTable& table);  // values/tensor_ops.cc: Shape, Gather, Concat, Slice, ...
void register_reduce_values(EvalTable& table);  // values/reduce.cc: ReduceSum/Prod/Max/Min/Mean

// The table with every evaluator registered; built once.
const EvalTable& value_table();

// ---------------------------------------------------------------------------------------------------
// Helpers the evaluators share (values/store.cc).

std::vector<int64_t> as_ints(const Value& v);  // every element through int_at
int64_t normalize_axis(int64_t axis, size_t rank);
std::optional<int64_t> checked_int(__int128 x);  // nullopt outside int64

// Store computed elements into `out` in the representation its dtype asks for: float32/16 rounded to the
// precision the dtype stores (so float32 shape arithmetic matches the runtime's), bool as 0/1, integers
// truncated; a real value that no int64 holds leaves `out` unknown.
void store_reals(Value& out, const std::vector<double>& xs);
void store_ints(Value& out, std::vector<int64_t> xs);
// Copies (or converts) `in`'s contents into `out` unchanged in order: Identity, Reshape, Squeeze, Cast...
void store_same(Value& out, const Value& in);
// Copies the elements picked by `source` (flat input index per output element) from `in` into `out`.
void store_gathered(Value& out, const Value& in, const std::vector<size_t>& source);

std::vector<uint64_t> strides_of(const std::vector<int64_t>& shape);  // row-major, in elements
// Whether `in` broadcasts to `out`'s shape (numpy rules, onnx/docs/Broadcasting.md).
bool broadcastable(const Value& in, const Value& out);
// For each element of `out_shape`, the flat index of the element of `in_shape` that broadcasting reads.
std::vector<size_t> broadcast_map(const std::vector<int64_t>& in_shape, const std::vector<int64_t>& out_shape);
// For each element of an output of `out_shape`, the flat input index of coordinate c:
// sum over axes a of index(a, c[a]) * strides[a]. Slice, Tile and Transpose are this with different `index`.
template <typename AxisIndex>
std::vector<size_t> gather_map(const std::vector<int64_t>& out_shape, const std::vector<uint64_t>& strides,
                               AxisIndex index) {
  uint64_t n = 1;
  for (int64_t d : out_shape) n *= static_cast<uint64_t>(d);
  std::vector<size_t> source(n);
  std::vector<int64_t> coord(out_shape.size(), 0);
  for (uint64_t flat = 0; flat < n; ++flat) {
    size_t idx = 0;
    for (size_t a = 0; a < coord.size(); ++a) idx += static_cast<size_t>(index(a, coord[a])) * strides[a];
    source[flat] = idx;
    for (size_t a = coord.size(); a-- > 0;) {
      if (++coord[a] < out_shape[a]) break;
      coord[a] = 0;
    }
  }
  return source;
}

}  // namespace values
}  // namespace memplan::shape
