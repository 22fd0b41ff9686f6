// describe_model(): what a model file declares, from its proto alone.
#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "onnx_import/graph_builder.h"
#include "onnx_import/name_index.h"

namespace memplan {
namespace {

// Inputs of ops that take a float tensor which is not a learned parameter, so a float initializer used only
// in these slots is a buffer (not counted among parameters):
//   BatchNormalization 3, 4: running mean and variance (torch registers them as buffers, not parameters:
//     torch/nn/modules/batchnorm.py, register_buffer("running_mean"...)); ONNX operator spec input order.
//   Clip 1, 2: min and max (ReLU6 exports them since opset 11).
//   Resize 1, 2 and Upsample 1: roi and scales.   Pad 2: constant_value.   Dropout 1: ratio.
//   Quantization parameters (scales and zero points), the ONNX specs' input orders: QuantizeLinear /
//   DequantizeLinear 1, 2; QLinearMatMul and QLinearConv 1, 2, 4, 5, 6, 7. In com.microsoft
//   (onnxruntime docs/ContribOperators.md): MatMulNBits 2, 3; QGemm 1, 2, 4, 5, 7, 8;
//   DynamicQuantizeMatMul 2, 3; MatMulIntegerToFloat 2, 3, 4, 5; QuantizeLinear / DequantizeLinear 1, 2.
bool is_non_learnable_slot(std::string_view domain, std::string_view op, int slot) {
  const bool qdq = op == "QuantizeLinear" || op == "DequantizeLinear";
  if (domain == "com.microsoft") {
    if (qdq) return slot == 1 || slot == 2;
    if (op == "MatMulNBits" || op == "DynamicQuantizeMatMul") return slot == 2 || slot == 3;
    if (op == "QGemm") return slot == 1 || slot == 2 || slot == 4 || slot == 5 || slot == 7 || slot == 8;
    if (op == "MatMulIntegerToFloat") return slot >= 2 && slot <= 5;
    return false;
  }
  if (!domain.empty()) return false;
  if (op == "BatchNormalization") return slot == 3 || slot == 4;
  if (op == "Clip" || op == "Resize" || qdq) return slot == 1 || slot == 2;
  if (op == "QLinearMatMul" || op == "QLinearConv") return slot == 1 || slot == 2 || (slot >= 4 && slot <= 7);
  if (op == "Upsample" || op == "Dropout") return slot == 1;
  if (op == "Pad") return slot == 2;
  return false;
}

// Counts, per tensor name, its uses and its uses in non-learnable slots, through subgraphs too (a branch
// of an If may use an outer initializer by name).
// Keys are views into the model's names.
using UseCounts = NameIndex;
void count_uses(const onnx::GraphProto& graph, UseCounts& uses, UseCounts& non_learnable_uses) {
  for (const onnx::NodeProto& node : graph.node()) {
    const std::string_view domain = normalize_domain(node.domain());
    for (int i = 0; i < node.input_size(); ++i) {
      if (node.input(i).empty()) continue;
      ++uses[node.input(i)];
      if (is_non_learnable_slot(domain, node.op_type(), i)) ++non_learnable_uses[node.input(i)];
    }
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.has_g()) count_uses(attr.g(), uses, non_learnable_uses);
      for (const onnx::GraphProto& g : attr.graphs()) count_uses(g, uses, non_learnable_uses);
    }
  }
}

DType tensor_dtype(const std::string& path, int32_t code, const std::string& what) {
  const std::optional<DType> t = dtype_from_onnx(code);
  if (!t) throw InputError(path + ": " + what + " has unknown data type " + std::to_string(code));
  return *t;
}

Tensor stored_tensor(const std::string& path, const std::string& name, int32_t data_type,
                     const google::protobuf::RepeatedField<int64_t>& dims) {
  Tensor t;
  t.name = name;
  t.dtype = tensor_dtype(path, data_type, "tensor '" + name + "'");
  t.shape.assign(dims.begin(), dims.end());
  t.producer = -1;
  t.bytes();  // throws ShapeOverflow naming the tensor when its size does not fit 64 bits
  return t;
}

// The value a Constant node holds (onnx/defs/generator/defs.cc, Constant-13: exactly one of these).
std::optional<Tensor> constant_value(const std::string& path, const onnx::NodeProto& node) {
  if (node.output_size() < 1 || node.output(0).empty()) return std::nullopt;
  const std::string& out = node.output(0);
  for (const onnx::AttributeProto& a : node.attribute()) {
    Tensor t;
    t.name = out;
    if (a.name() == "value" && a.has_t()) {
      t = stored_tensor(path, out, a.t().data_type(), a.t().dims());
    } else if (a.name() == "sparse_value" && a.has_sparse_tensor()) {
      t = stored_tensor(path, out, a.sparse_tensor().values().data_type(), a.sparse_tensor().dims());
    } else if (a.name() == "value_float") {
      t.dtype = DType::Float32;
    } else if (a.name() == "value_int") {
      t.dtype = DType::Int64;
    } else if (a.name() == "value_string") {
      t.dtype = DType::String;
    } else if (a.name() == "value_floats") {
      t.dtype = DType::Float32;
      t.shape = {a.floats_size()};
    } else if (a.name() == "value_ints") {
      t.dtype = DType::Int64;
      t.shape = {a.ints_size()};
    } else if (a.name() == "value_strings") {
      t.dtype = DType::String;
      t.shape = {a.strings_size()};
    } else {
      continue;
    }
    t.kind = TensorKind::Constant;
    return t;
  }
  return std::nullopt;
}

DeclaredValue declared_value(const onnx::ValueInfoProto& v) {
  DeclaredValue d;
  d.name = v.name();
  if (!v.type().has_tensor_type()) return d;
  const onnx::TypeProto::Tensor& tt = v.type().tensor_type();
  d.dtype = dtype_from_onnx(tt.elem_type()).value_or(DType::Undefined);
  d.has_shape = tt.has_shape();
  for (const onnx::TensorShapeProto::Dimension& dim : tt.shape().dim()) {
    if (dim.has_dim_value()) d.dims.push_back(std::to_string(dim.dim_value()));
    else if (dim.has_dim_param() && !dim.dim_param().empty()) d.dims.push_back(dim.dim_param());
    else d.dims.push_back("?");
  }
  return d;
}

std::string qualified_op(const onnx::NodeProto& node) {
  const std::string domain(normalize_domain(node.domain()));
  return domain.empty() ? node.op_type() : domain + "." + node.op_type();
}

void add_initializers(const std::string& path, const onnx::GraphProto& graph, ModelOverview& o) {
  UseCounts uses(size_t(graph.node_size()) * 2), non_learnable_uses;
  count_uses(graph, uses, non_learnable_uses);
  std::set<std::string> seen;
  auto add = [&](Tensor t) {
    if (!seen.insert(t.name).second)
      throw InputError(path + ": initializer '" + t.name + "' is defined twice");
    const bool is_float = dtype_is_float(t.dtype);
    t.kind = is_float ? TensorKind::Weight : TensorKind::Constant;
    const int32_t *u = uses.find(t.name), *f = non_learnable_uses.find(t.name);
    const int n = u ? *u : 0;
    const int fixed = f ? *f : 0;
    t.trainable = is_float && !(n > 0 && fixed == n);
    o.initializers.push_back(std::move(t));
  };
  for (const onnx::TensorProto& init : graph.initializer())
    add(stored_tensor(path, init.name(), init.data_type(), init.dims()));
  for (const onnx::SparseTensorProto& sparse : graph.sparse_initializer())
    add(stored_tensor(path, sparse.values().name(), sparse.values().data_type(), sparse.dims()));
}

}  // namespace

ModelOverview describe_model(const std::string& path, const ReadModel& model) {
  const onnx::ModelProto& m = model.proto;
  const onnx::GraphProto& g = m.graph();
  ModelOverview o;
  o.model_path = path;
  o.file_bytes = model.file_bytes;
  o.producer = m.producer_name();
  if (!m.producer_version().empty()) o.producer += (o.producer.empty() ? "" : " ") + m.producer_version();
  o.ir_version = m.ir_version();
  for (const onnx::OperatorSetIdProto& op : m.opset_import()) o.opsets[std::string(normalize_domain(op.domain()))] = op.version();
  o.warnings = model.warnings;

  o.node_count = static_cast<uint64_t>(g.node_size());
  std::set<std::string> custom;
  for (const onnx::NodeProto& node : g.node()) {
    ++o.op_histogram[qualified_op(node)];
    const std::string_view domain = normalize_domain(node.domain());
    if (!domain.empty() && domain != "ai.onnx.ml") custom.insert(qualified_op(node));
    if (domain.empty() && node.op_type() == "Constant")
      if (std::optional<Tensor> t = constant_value(path, node)) o.constant_values.push_back(std::move(*t));
  }
  o.custom_ops.assign(custom.begin(), custom.end());

  add_initializers(path, g, o);
  std::set<std::string> initializer_names;
  for (const Tensor& t : o.initializers) initializer_names.insert(t.name);
  for (const onnx::ValueInfoProto& v : g.input())
    if (!initializer_names.count(v.name())) o.inputs.push_back(declared_value(v));
  for (const onnx::ValueInfoProto& v : g.output()) o.outputs.push_back(declared_value(v));
  return o;
}

void StoredTally::add(const Tensor& t) {
  const uint64_t n = t.elements();
  const uint64_t b = t.bytes();
  for (Tally* tally : {&total, &by_dtype[t.dtype]}) {
    tally->tensors += 1;
    tally->elements = checked_add(tally->elements, n, "element count");
    tally->bytes = checked_add(tally->bytes, b, "byte count");
  }
}

StoredSummary summarize_stored(const ModelOverview& overview) {
  StoredSummary s;
  for (const Tensor& t : overview.initializers) (t.trainable ? s.parameters : s.buffers).add(t);
  for (const Tensor& t : overview.constant_values) {
    s.buffers.add(t);
    s.constant_values.add(t);
  }
  return s;
}

}  // namespace memplan
