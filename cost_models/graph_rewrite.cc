#include "cost_models/graph_rewrite.h"

namespace memplan {

int32_t add_activation(Graph& g, const std::string& name, DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.kind = TensorKind::Activation;
  g.tensors.push_back(std::move(t));
  return static_cast<int32_t>(g.tensors.size()) - 1;
}

Node cast_node(const std::string& name, int32_t from, int32_t out, DType to, int opset) {
  Node n;
  n.name = name;
  n.op_type = "Cast";
  n.opset = opset;
  n.inputs = {from};
  n.outputs = {out};
  n.attributes["to"].type = Attribute::Type::Int;
  n.attributes["to"].i = dtype_to_onnx(to);
  return n;
}

void relink(Graph& g) {
  for (Tensor& t : g.tensors) {
    t.producer = -1;
    t.consumers.clear();
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int32_t t : g.nodes[i].inputs)
      if (t >= 0) g.tensors[t].consumers.push_back(static_cast<int32_t>(i));
    for (int32_t t : g.nodes[i].outputs)
      if (t >= 0) g.tensors[t].producer = static_cast<int32_t>(i);
  }
}

}  // namespace memplan
