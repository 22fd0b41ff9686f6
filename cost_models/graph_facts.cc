#include "cost_models/graph_facts.h"

#include <algorithm>
#include <set>
#include <string>

#include "onnx_import/checked.h"

namespace memplan {

bool is_aten(const Node& n, const std::string& op) {
  if (n.op_type != "ATen" || n.domain != "org.pytorch.aten") return false;
  const auto it = n.attributes.find("operator");
  return it != n.attributes.end() && it->second.s == op;
}

namespace {

bool is_initializer(const Graph& g, int32_t t) {
  // A Weight is an initializer by construction (onnx_import/graph_builder.cc gives the kind to initializers only,
  // cost_models/lora_adapters.cc adds its weights to the initializers): no search for the parameters, which the
  // training step's builder asks about at every op of every program it builds.
  if (g.tensors[t].kind == TensorKind::Weight) return true;
  // Nor for a node's output (no initializer has a producer), which MatMul's second operand is everywhere in
  // attention and a mixture of experts: the search below is over every initializer (18,867 in Qwen3-30B-A3B).
  if (g.tensors[t].producer >= 0) return false;
  return std::find(g.initializers.begin(), g.initializers.end(), t) != g.initializers.end();
}

bool is_integer_like(DType t) {
  switch (t) {
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64:
    case DType::UInt8: case DType::UInt16: case DType::UInt32: case DType::UInt64: case DType::Bool:
      return true;
    default:
      return false;
  }
}

// Shape arithmetic works on a handful of values (a rank's worth); anything larger is data.
constexpr uint64_t kMaxShapeElements = 64;

// Integer ops the exporters use to compute shapes (torch.onnx's size()/view() lowering).
const std::set<std::string>& shape_arithmetic_ops() {
  static const std::set<std::string> ops{
      "Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Cast", "Add", "Sub", "Mul", "Div",
      "Equal", "Where", "Reshape", "Identity", "ReduceProd", "Max", "Min", "Neg", "Floor", "Ceil",
      "Not", "And", "Or", "Less", "Greater", "Mod", "Abs"};
  return ops;
}

}  // namespace

bool is_constant(const Graph& g, int32_t t) {
  if (t < 0) return false;
  const Tensor& tensor = g.tensors[t];
  if (tensor.kind == TensorKind::Constant) return true;
  if (tensor.producer >= 0) return g.nodes[tensor.producer].op_type == "Constant";
  return is_initializer(g, t);
}

bool is_python_scalar(const Graph& g, int32_t t) {
  if (t < 0) return false;
  const Tensor& tensor = g.tensors[t];
  return tensor.producer >= 0 && g.nodes[tensor.producer].op_type == "Constant" && tensor.elements() <= 1 &&
         !is_graph_output(g, t);
}

bool is_scalar_constant(const Graph& g, int32_t t) {
  return is_constant(g, t) && g.tensors[t].elements() <= 1;
}

bool is_graph_output(const Graph& g, int32_t t) {
  return std::find(g.outputs.begin(), g.outputs.end(), t) != g.outputs.end();
}

std::vector<bool> shape_tensors(const Graph& g) {
  std::vector<bool> shape(g.tensors.size(), false);
  auto small_int_constant = [&](int32_t t) {
    const Tensor& x = g.tensors[t];
    return is_constant(g, t) && is_integer_like(x.dtype) && x.elements() <= kMaxShapeElements;
  };
  for (const Node& node : g.nodes) {  // graph order is topological, so one pass suffices
    bool all_inputs_shape = true;
    bool any_input = false;
    for (int32_t in : node.inputs) {
      if (in < 0) continue;
      any_input = true;
      if (!shape[in] && !small_int_constant(in)) all_inputs_shape = false;
    }
    bool marks = false;
    if (node.op_type == "Shape" || node.op_type == "Size") {
      marks = true;
    } else if (node.op_type == "Constant") {
      marks = false;  // constants become shape values only through the ops that use them
    } else if (any_input && all_inputs_shape && shape_arithmetic_ops().count(node.op_type)) {
      marks = true;
      for (int32_t out : node.outputs)
        if (out >= 0 && (!is_integer_like(g.tensors[out].dtype) || g.tensors[out].elements() > kMaxShapeElements))
          marks = false;
    }
    if (!marks) continue;
    for (int32_t out : node.outputs)
      if (out >= 0 && !is_graph_output(g, out)) shape[out] = true;
  }
  return shape;
}

DType storage_dtype(DType original, DType float_dtype) {
  if (float_dtype == DType::Float32) return original;
  switch (original) {
    case DType::Float32: case DType::Float64: case DType::Float16: case DType::BFloat16:
      return float_dtype;
    default:
      return original;
  }
}

uint64_t bytes_as(const Tensor& t, DType dtype) {
  const uint64_t n = t.elements();
  const int bits = dtype_bits(dtype);
  // The message is made only when the product overflows: this runs for every tensor of every program built.
  uint64_t bytes = 0;
  if (bits % 8 == 0 && !__builtin_mul_overflow(n, static_cast<uint64_t>(bits / 8), &bytes)) return bytes;
  if (bits % 8 == 0) return checked_mul(n, static_cast<uint64_t>(bits / 8), ("byte size of tensor '" + t.name + "'").c_str());
  return n / 2 + n % 2;  // 4-bit types: two per byte (onnx.proto INT4/UINT4)
}

int count_consumers(const Graph& g, int32_t t) {
  std::set<int32_t> distinct(g.tensors[t].consumers.begin(), g.tensors[t].consumers.end());
  return static_cast<int>(distinct.size());
}

int32_t sole_consumer(const Graph& g, int32_t t) {
  if (t < 0 || is_graph_output(g, t)) return -1;
  const auto& c = g.tensors[t].consumers;
  if (c.size() != 1) return -1;
  return c[0];
}

bool is_shape_operand(const std::string& op, size_t index) {
  if (index == 0) return op == "ConstantOfShape";
  return op == "Reshape" || op == "Slice" || op == "Expand" || op == "Unsqueeze" || op == "Squeeze" ||
         op == "Split" || op == "Tile" || op == "Pad" || op == "ReduceMean" || op == "ReduceSum" ||
         op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd" || op == "Resize" || op == "Upsample" ||
         op == "TopK" || op == "CumSum" || op == "Range" || op == "OneHot";
}

bool constant_only_in_shape_math(const Graph& g, int32_t t, const std::vector<bool>& shape) {
  const Tensor& x = g.tensors[t];
  if (!is_constant(g, t) || dtype_is_float(x.dtype) || x.elements() > kMaxShapeElements || is_graph_output(g, t))
    return false;
  for (int32_t c : x.consumers) {
    const Node& n = g.nodes[c];
    bool all_outputs_shape = !n.outputs.empty();
    for (int32_t o : n.outputs)
      if (o >= 0 && !shape[o]) all_outputs_shape = false;
    if (n.op_type == "Constant" || all_outputs_shape) continue;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] == t && !is_shape_operand(n.op_type, i)) return false;
  }
  return true;
}

std::vector<int32_t> tied_embedding_copies(const Graph& g) {
  std::vector<int32_t> tied(g.tensors.size(), -1);
  std::vector<int32_t> tables;  // initializers read as a Gather's table
  for (const Node& n : g.nodes)
    if (n.op_type == "Gather" && !n.inputs.empty() && n.inputs[0] >= 0 && is_initializer(g, n.inputs[0]) &&
        g.tensors[n.inputs[0]].shape.size() == 2)
      tables.push_back(n.inputs[0]);
  for (const Node& n : g.nodes) {
    if (n.op_type != "MatMul" || n.inputs.size() < 2 || n.outputs.empty() || n.outputs[0] < 0) continue;
    const int32_t w = n.inputs[1];
    if (w < 0 || !is_initializer(g, w) || g.tensors[w].shape.size() != 2) continue;
    int32_t result = n.outputs[0];
    const int32_t next = sole_consumer(g, result);
    if (!is_graph_output(g, result) && next >= 0 && g.nodes[next].op_type == "Add" && !g.nodes[next].outputs.empty() &&
        g.nodes[next].outputs[0] >= 0)
      result = g.nodes[next].outputs[0];
    if (!is_graph_output(g, result)) continue;
    const auto& ws = g.tensors[w].shape;
    for (int32_t table : tables) {
      const auto& ts = g.tensors[table].shape;
      if (table != w && ts[0] == ws[1] && ts[1] == ws[0] && g.tensors[table].dtype == g.tensors[w].dtype) {
        tied[w] = table;
        break;
      }
    }
  }
  return tied;
}

int32_t matmul_weight(const Graph& g, int32_t operand) {
  auto rank2_weight = [&](int32_t t) {
    return t >= 0 && g.tensors[t].kind == TensorKind::Weight && g.tensors[t].producer < 0 &&
           g.tensors[t].shape.size() == 2;
  };
  if (operand < 0 || g.tensors[operand].shape.size() != 2) return -1;
  if (rank2_weight(operand)) return operand;
  const int32_t p = g.tensors[operand].producer;
  if (p < 0 || g.nodes[p].op_type != "Transpose" || g.nodes[p].inputs.empty()) return -1;
  return rank2_weight(g.nodes[p].inputs[0]) ? g.nodes[p].inputs[0] : -1;
}

int32_t untransposed_experts_operand(const Graph& g, int32_t operand) {
  const int32_t p = operand < 0 ? -1 : g.tensors[operand].producer;
  if (p < 0 || g.nodes[p].op_type != "Transpose" || g.nodes[p].inputs.empty()) return operand;
  const auto perm = g.nodes[p].attributes.find("perm");
  if (perm == g.nodes[p].attributes.end() || perm->second.ints != std::vector<int64_t>{0, 2, 1}) return operand;
  return g.nodes[p].inputs[0];
}

int32_t stacked_expert_weight(const Graph& g, int32_t operand) {
  auto stacked = [&](int32_t t) {
    return t >= 0 && g.tensors[t].kind == TensorKind::Weight && g.tensors[t].producer < 0 &&
           g.tensors[t].shape.size() == 3;
  };
  if (operand < 0) return -1;
  if (stacked(operand)) return operand;
  const int32_t source = untransposed_experts_operand(g, operand);
  return source != operand && stacked(source) ? source : -1;
}

int32_t grouped_mm_experts(const Graph& g, const Node& n) {
  return is_aten(n, "_grouped_mm") && n.inputs.size() >= 2 ? stacked_expert_weight(g, n.inputs[1]) : -1;
}

std::vector<int32_t> held_tied_copies(const Graph& g, bool by_shape) {
  std::vector<int32_t> tied = by_shape ? tied_embedding_copies(g) : std::vector<int32_t>(g.tensors.size(), -1);
  for (const auto& [copy, param] : g.recorded_tied_copies) tied[copy] = param;
  return tied;
}

std::vector<std::string> scope_paths(const std::string& name) {
  std::vector<std::string> out, parts;
  if (name.empty() || name[0] != '/') return out;
  out.push_back("");
  parts.push_back("");
  const size_t end = name.rfind('/');
  for (size_t pos = 1; pos < end;) {
    const size_t next = name.find('/', pos);
    const std::string part = name.substr(pos, next - pos);
    size_t base = parts.size() - 1;
    while (base > 0 && part.rfind(parts[base] + ".", 0) == 0) --base;
    out.push_back(out[base].empty() ? part : out[base] + "." + part);
    parts.push_back(part);
    pos = next + 1;
  }
  return out;
}

}  // namespace memplan
