// infer_shapes(): binds the graph inputs to the user's dimensions (inference/input_binding.cc), walks the
// top-level graph (inference/walker.cc) and collects every value's dtype, shape and known contents.
#include "onnx_import/shape_inference.h"

#include <onnx/onnx_pb.h>

#include "onnx_import/errors.h"
#include "onnx_import/inference/input_binding.h"
#include "onnx_import/inference/walker.h"

namespace memplan {
namespace {

using shape::ModelInfo;
using shape::Scope;
using shape::Value;
using shape::checked_bytes;

// At most this many warnings about declared shapes that differ from the inferred ones.
constexpr int kMaxMismatchWarnings = 10;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

void warn_declared_mismatches(const onnx::GraphProto& graph, const Scope& scope, const ModelInfo& model,
                              std::vector<std::string>& warnings) {
  int count = 0;
  for (const auto& o : graph.output()) {
    if (!o.type().has_tensor_type() || !o.type().tensor_type().has_shape()) continue;
    const Value* v = scope.find(o.name());
    if (!v) continue;
    const auto& dims = o.type().tensor_type().shape().dim();
    bool differs = dims.size() != static_cast<int>(v->shape.size());
    for (int a = 0; !differs && a < dims.size(); ++a) {
      if (dims[a].has_dim_value()) differs = dims[a].dim_value() != v->shape[a];
      else if (dims[a].has_dim_param())
        if (auto it = model.symbols.find(dims[a].dim_param()); it != model.symbols.end()) differs = it->second != v->shape[a];
    }
    if (differs && count++ < kMaxMismatchWarnings)
      warnings.push_back("graph output '" + o.name() + "': inferred shape " + shape_str(v->shape) +
                         " differs from the shape the model declares");
  }
}

}  // namespace

InferenceResult infer_shapes(const onnx::ModelProto& model, const Bindings& bindings) {
  InferenceResult result;
  ModelInfo info;
  for (const auto& op : model.opset_import()) info.opsets[std::string(normalize_domain(op.domain()))] = op.version();
  for (const auto& fn : model.functions()) info.functions[{fn.domain(), fn.name()}] = &fn;
  const onnx::GraphProto& graph = model.graph();

  Scope scope;
  for (const auto& vi : graph.value_info()) scope.declared[vi.name()] = &vi.type();
  for (const auto& vi : graph.output()) scope.declared[vi.name()] = &vi.type();
  shape::InputBinder binder(graph, bindings);
  for (auto& [name, v] : binder.bind(info.symbols)) {
    shape::checked_value_bytes(v, "graph input '" + name + "'");
    scope.values[name] = std::move(v);
  }
  for (const auto& init : graph.initializer())
    scope.values[init.name()] = shape::value_from_tensor(init, "initializer '" + init.name() + "'");
  for (const auto& sp : graph.sparse_initializer()) {
    Value v = shape::value_from_tensor(sp.values(), "sparse initializer '" + sp.values().name() + "'");
    v.shape.assign(sp.dims().begin(), sp.dims().end());
    v.ints.reset(), v.reals.reset();
    checked_bytes(v.dtype, v.shape, "sparse initializer '" + sp.values().name() + "'");
    scope.values[sp.values().name()] = std::move(v);
  }

  shape::Walker walker(info, result.warnings);
  result.order = walker.walk(graph, scope, "");
  result.if_branches = walker.branches();
  for (const auto& o : graph.output())
    if (!scope.find(o.name())) throw InputError("graph output '" + o.name() + "' is produced by no node");
  warn_declared_mismatches(graph, scope, info, result.warnings);

  result.bound_dims = info.symbols;
  for (const auto& [name, value] : bindings.input_values) result.bound_values.push_back(name);
  result.values.reserve(scope.values.size());
  while (!scope.values.empty()) {  // each name and value moved out, not copied
    auto node = scope.values.extract(scope.values.begin());
    Value& v = node.mapped();
    InferredValue out;
    out.dtype = v.dtype;
    out.value_type = v.kind;
    out.optional_of_sequence = v.optional_of_sequence;
    if (!v.is_tensor()) out.element_shapes = v.tensor_shapes();
    out.shape = std::move(v.shape);
    if (v.ints) out.int_value = std::move(v.ints);
    if (v.reals) out.real_value = std::move(v.reals);
    result.values.emplace(std::move(node.key()), std::move(out));
  }
  return result;
}

}  // namespace memplan
