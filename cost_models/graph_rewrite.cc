#include "cost_models/graph_rewrite.h"

#include "cost_models/op_fusion_match.h"

namespace memplan {
namespace {

using fusion::in;
using fusion::op_is;
using fusion::out0;

bool float_initializer(const Graph& g, int32_t t) {
  return t >= 0 && g.tensors[t].kind == TensorKind::Weight && g.tensors[t].shape.size() == 2 &&
         dtype_is_float(g.tensors[t].dtype);
}

}  // namespace

std::optional<LinearSite> linear_site(const Graph& g, int32_t node) {
  LinearSite t;
  const Node& n = g.nodes[node];
  if (n.outputs.empty() || n.outputs[0] < 0 || n.inputs.size() < 2) return std::nullopt;
  if (op_is(g, node, "MatMul")) {
    if (auto m = fusion::match_linear(g, node)) {
      t.weight = m->roles.weight;
      t.last_node = *m->nodes.rbegin();  // the bias Add follows the MatMul in node order
      if (m->roles.bias < 0) t.last_node = node;
    } else if (float_initializer(g, in(g, node, 1))) {
      t.weight = in(g, node, 1);
      t.last_node = node;
    } else {
      return std::nullopt;
    }
  } else if (op_is(g, node, "Gemm") && float_initializer(g, in(g, node, 1))) {
    t.weight = in(g, node, 1);
    t.last_node = node;
  } else {
    return std::nullopt;
  }
  if (!float_initializer(g, t.weight)) return std::nullopt;
  t.x = in(g, node, 0);
  const Tensor& x = g.tensors[t.x];
  const Tensor& y = g.tensors[out0(g, t.last_node)];
  if (x.shape.empty() || y.shape.empty()) return std::nullopt;
  t.in_features = x.shape.back();
  t.out_features = y.shape.back();
  return t;
}

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

GraphRewriter::GraphRewriter(Graph& g, std::vector<bool>& float32, std::vector<bool>* grown)
    : g_(g), float32_(float32), grown_(grown), before_(g.nodes.size()), after_(g.nodes.size()) {
  float32_.resize(g.tensors.size(), false);
  if (grown_) grown_->resize(g.tensors.size(), false);
}

int32_t GraphRewriter::cast(int32_t from, DType to, int32_t node, const char* suffix, bool run_after) {
  const std::string name = g_.nodes[node].name + suffix;
  const int32_t out = add_activation(g_, name + "_output_0", to, g_.tensors[from].shape);
  float32_.push_back(false);
  if (grown_) grown_->push_back(false);
  (run_after ? after_ : before_)[node].push_back(cast_node(name, from, out, to, g_.nodes[node].opset));
  return out;
}

void GraphRewriter::redirect(int32_t from, int32_t to, const std::vector<int32_t>& readers) {
  for (int32_t r : readers)
    for (int32_t& t : g_.nodes[r].inputs)
      if (t == from) t = to;
}

void GraphRewriter::finish() {
  std::vector<Node> nodes;
  nodes.reserve(g_.nodes.size());
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    for (Node& n : before_[i]) nodes.push_back(std::move(n));
    nodes.push_back(std::move(g_.nodes[i]));
    for (Node& n : after_[i]) nodes.push_back(std::move(n));
  }
  g_.nodes = std::move(nodes);
  relink(g_);
}

}  // namespace memplan
