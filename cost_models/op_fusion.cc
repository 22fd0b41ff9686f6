#include "cost_models/op_fusion.h"

#include <algorithm>
#include <optional>
#include <set>

#include "cost_models/graph_facts.h"

namespace memplan {
namespace {

// A candidate match: the nodes it covers plus the role operands.
struct Match {
  OpKind kind = OpKind::Node;
  std::set<int32_t> nodes;
  FusedOp roles;
};

int32_t producer_of(const Graph& g, int32_t t) { return t < 0 ? -1 : g.tensors[t].producer; }

bool op_is(const Graph& g, int32_t node, const char* op) { return node >= 0 && g.nodes[node].op_type == op; }

int32_t in(const Graph& g, int32_t node, size_t i) {
  const auto& ins = g.nodes[node].inputs;
  return i < ins.size() ? ins[i] : -1;
}

int32_t out0(const Graph& g, int32_t node) { return g.nodes[node].outputs.empty() ? -1 : g.nodes[node].outputs[0]; }

// Tensors read from outside the node set (first-use order) and tensors read after it or by the graph.
void region_interface(const Graph& g, const std::set<int32_t>& nodes, std::vector<int32_t>& inputs,
                      std::vector<int32_t>& outputs) {
  std::set<int32_t> produced;
  for (int32_t n : nodes)
    for (int32_t o : g.nodes[n].outputs)
      if (o >= 0) produced.insert(o);
  for (int32_t n : nodes)
    for (int32_t i : g.nodes[n].inputs)
      if (i >= 0 && !produced.count(i) && std::find(inputs.begin(), inputs.end(), i) == inputs.end())
        inputs.push_back(i);
  for (int32_t o : produced) {
    bool outside = is_graph_output(g, o);
    for (int32_t c : g.tensors[o].consumers)
      if (!nodes.count(c)) outside = true;
    if (outside) outputs.push_back(o);
  }
}

// A fused op must hand exactly one tensor to the rest of the graph, produced by its last node, so that
// running it at that node's position changes no one else's inputs.
bool single_exit(const Graph& g, const std::set<int32_t>& nodes) {
  std::vector<int32_t> ins, outs;
  region_interface(g, nodes, ins, outs);
  return outs.size() == 1 && producer_of(g, outs[0]) == *nodes.rbegin();
}

// ---- GELU (erf and tanh forms) ----

const std::set<std::string>& gelu_ops() {
  static const std::set<std::string> ops{"Div", "Mul", "Add", "Sub", "Pow", "Erf", "Tanh"};
  return ops;
}

// The nodes reachable from x through GELU's elementwise ops whose every input is x, a scalar
// constant or a tensor already in the region.
std::set<int32_t> grow_elementwise_region(const Graph& g, int32_t x) {
  std::set<int32_t> nodes;
  std::set<int32_t> tensors{x};
  bool grew = true;
  while (grew && nodes.size() < 12) {
    grew = false;
    for (int32_t t : std::vector<int32_t>(tensors.begin(), tensors.end())) {
      for (int32_t c : g.tensors[t].consumers) {
        if (nodes.count(c) || !gelu_ops().count(g.nodes[c].op_type)) continue;
        bool closed = true;
        for (int32_t i : g.nodes[c].inputs)
          if (i >= 0 && !tensors.count(i) && !is_scalar_constant(g, i)) closed = false;
        if (!closed) continue;
        nodes.insert(c);
        for (int32_t o : g.nodes[c].outputs)
          if (o >= 0) tensors.insert(o);
        grew = true;
      }
    }
  }
  return nodes;
}

std::optional<Match> match_gelu(const Graph& g, int32_t anchor) {
  const std::string& op = g.nodes[anchor].op_type;
  if (op != "Erf" && op != "Tanh") return std::nullopt;
  // Walk back from the Erf/Tanh through GELU's elementwise ops; any tensor on the way may be the one
  // the decomposition starts from (nearest first: the bias add of a Linear is walked past, not into).
  std::vector<int32_t> candidates;
  std::vector<std::pair<int32_t, int>> frontier{{in(g, anchor, 0), 0}};
  for (size_t next = 0; next < frontier.size(); ++next) {
    auto [t, depth] = frontier[next];
    if (t < 0 || is_scalar_constant(g, t) || is_constant(g, t)) continue;
    if (std::find(candidates.begin(), candidates.end(), t) != candidates.end()) continue;
    candidates.push_back(t);
    const int32_t p = producer_of(g, t);
    if (p >= 0 && depth < 4 && gelu_ops().count(g.nodes[p].op_type) && !op_is(g, p, "Erf") && !op_is(g, p, "Tanh"))
      for (int32_t i : g.nodes[p].inputs) frontier.push_back({i, depth + 1});
  }
  for (int32_t x : candidates) {
    std::set<int32_t> nodes = grow_elementwise_region(g, x);
    int transcendental = 0;
    for (int32_t n : nodes)
      if (op_is(g, n, "Erf") || op_is(g, n, "Tanh")) ++transcendental;
    if (!nodes.count(anchor) || transcendental != 1 || nodes.size() < 4 || !single_exit(g, nodes)) continue;
    Match m;
    m.kind = OpKind::Gelu;
    m.nodes = nodes;
    m.roles.x = x;
    return m;
  }
  return std::nullopt;
}

// ---- SiLU: Sigmoid(x) then Mul(x, sigmoid) ----

std::optional<Match> match_silu(const Graph& g, int32_t sig) {
  if (!op_is(g, sig, "Sigmoid")) return std::nullopt;
  const int32_t x = in(g, sig, 0);
  const int32_t mul = sole_consumer(g, out0(g, sig));
  if (!op_is(g, mul, "Mul")) return std::nullopt;
  const int32_t a = in(g, mul, 0), b = in(g, mul, 1);
  if (!((a == x && b == out0(g, sig)) || (b == x && a == out0(g, sig)))) return std::nullopt;
  Match m;
  m.kind = OpKind::Silu;
  m.nodes = {sig, mul};
  m.roles.x = x;
  return m;
}

// ---- LayerNorm before opset 17 (torch.onnx symbolic_opset9.layer_norm) ----

std::optional<Match> match_layer_norm(const Graph& g, int32_t mean_node) {
  if (!op_is(g, mean_node, "ReduceMean")) return std::nullopt;
  const int32_t x = in(g, mean_node, 0);
  const int32_t mean = out0(g, mean_node);
  const int32_t sub = sole_consumer(g, mean);
  if (!op_is(g, sub, "Sub") || in(g, sub, 0) != x || in(g, sub, 1) != mean) return std::nullopt;
  const int32_t centered = out0(g, sub);
  int32_t square = -1, div = -1;
  for (int32_t c : g.tensors[centered].consumers) {
    if (op_is(g, c, "Pow") && in(g, c, 0) == centered) square = c;
    else if (op_is(g, c, "Mul") && in(g, c, 0) == centered && in(g, c, 1) == centered) square = c;
    else if (op_is(g, c, "Div") && in(g, c, 0) == centered) div = c;
    else return std::nullopt;
  }
  if (square < 0 || div < 0) return std::nullopt;
  const int32_t var_node = sole_consumer(g, out0(g, square));
  if (!op_is(g, var_node, "ReduceMean")) return std::nullopt;
  const int32_t eps = sole_consumer(g, out0(g, var_node));
  if (!op_is(g, eps, "Add")) return std::nullopt;
  const int32_t sqrt = sole_consumer(g, out0(g, eps));
  if (!op_is(g, sqrt, "Sqrt") || sole_consumer(g, out0(g, sqrt)) != div || in(g, div, 1) != out0(g, sqrt)) return std::nullopt;
  Match m;
  m.kind = OpKind::LayerNorm;
  m.nodes = {mean_node, sub, square, var_node, eps, sqrt, div};
  m.roles.x = x;
  // The optional affine part: Mul by gamma, then Add beta (both parameters, not scalars).
  auto param_operand = [&](int32_t node, int32_t data) {
    const int32_t a = in(g, node, 0), b = in(g, node, 1);
    const int32_t other = a == data ? b : (b == data ? a : -1);
    return other >= 0 && is_constant(g, other) && !is_scalar_constant(g, other) ? other : -1;
  };
  const int32_t mul = sole_consumer(g, out0(g, div));
  if (op_is(g, mul, "Mul") && param_operand(mul, out0(g, div)) >= 0) {
    m.nodes.insert(mul);
    m.roles.weight = param_operand(mul, out0(g, div));
    const int32_t add = sole_consumer(g, out0(g, mul));
    if (op_is(g, add, "Add") && param_operand(add, out0(g, mul)) >= 0) {
      m.nodes.insert(add);
      m.roles.bias = param_operand(add, out0(g, mul));
    }
  }
  if (!single_exit(g, m.nodes)) return std::nullopt;
  return m;
}

// ---- Linear: F.linear(x, W, b) as the exporter writes it ----
// With constant folding (inference exports) the weight is pre-transposed into a new initializer:
// MatMul(x, Wt) then Add(bias). Without it (training exports keep every parameter as the module holds
// it), torch.onnx writes F.linear's weight.t() as a Transpose node: Transpose(W, perm [1, 0]) -> MatMul
// (-> Add bias). PyTorch runs either as one addmm / mm (aten/src/ATen/native/Linear.cpp: linear), whose
// output is in the compute type (low precision under autocast) and whose autograd saves x and W.

// The parameter a MatMul's right operand is: an initializer, or F.linear's Transpose of one (-1 if neither).
// `transpose` is set to the Transpose node when there is one.
int32_t linear_weight(const Graph& g, int32_t mm, int32_t& transpose) {
  transpose = -1;
  const int32_t w = in(g, mm, 1);
  if (is_constant(g, w)) return g.tensors[w].shape.size() == 2 ? w : -1;
  const int32_t t = producer_of(g, w);
  if (!op_is(g, t, "Transpose") || sole_consumer(g, w) != mm) return -1;
  const int32_t param = in(g, t, 0);
  auto perm = g.nodes[t].attributes.find("perm");
  const bool swaps = perm == g.nodes[t].attributes.end() || perm->second.ints == std::vector<int64_t>{1, 0};
  if (!is_constant(g, param) || g.tensors[param].shape.size() != 2 || !swaps) return -1;
  transpose = t;
  return param;
}

std::optional<Match> match_linear(const Graph& g, int32_t mm) {
  if (!op_is(g, mm, "MatMul")) return std::nullopt;
  int32_t transpose = -1;
  const int32_t w = linear_weight(g, mm, transpose);
  if (w < 0) return std::nullopt;
  const int64_t out_features = g.tensors[in(g, mm, 1)].shape.back();
  Match m;
  m.kind = OpKind::Linear;
  m.nodes = {mm};
  if (transpose >= 0) m.nodes.insert(transpose);
  m.roles.x = in(g, mm, 0);
  m.roles.weight = w;
  const int32_t add = sole_consumer(g, out0(g, mm));
  if (op_is(g, add, "Add")) {
    const int32_t bias = in(g, add, 0) == out0(g, mm) ? in(g, add, 1) : in(g, add, 0);
    if (is_constant(g, bias) && g.tensors[bias].shape.size() == 1 && g.tensors[bias].shape[0] == out_features) {
      m.nodes.insert(add);
      m.roles.bias = bias;
    }
  }
  // A MatMul on an initializer without a bias is already the mm PyTorch runs; only F.linear's Transpose
  // or a bias make it a different op.
  if (transpose < 0 && m.roles.bias < 0) return std::nullopt;
  return m;
}

// ---- Attention: MatMul(q, k), scale, mask, Softmax, Dropout, MatMul(p, v) ----

std::optional<Match> match_attention(const Graph& g, int32_t softmax) {
  if (!op_is(g, softmax, "Softmax")) return std::nullopt;
  Match m;
  m.kind = OpKind::Attention;
  m.nodes.insert(softmax);
  int32_t cur = in(g, softmax, 0);
  int32_t qk = -1;
  for (int depth = 0; depth < 5 && cur >= 0; ++depth) {
    const int32_t p = producer_of(g, cur);
    if (p < 0 || count_consumers(g, cur) != 1 || is_graph_output(g, cur)) return std::nullopt;
    const std::string& op = g.nodes[p].op_type;
    if (op == "MatMul") { qk = p; break; }
    if (op == "Cast") { m.nodes.insert(p); cur = in(g, p, 0); continue; }
    if (op == "Div" || op == "Mul" || op == "Add" || op == "Sub") {
      const int32_t a = in(g, p, 0), b = in(g, p, 1);
      m.nodes.insert(p);
      if (is_scalar_constant(g, b)) { cur = a; continue; }
      if (is_scalar_constant(g, a)) { cur = b; continue; }
      // A mask: the operand with the result's full shape is the scores.
      const auto& shape = g.tensors[out0(g, p)].shape;
      const bool a_full = g.tensors[a].shape == shape;
      m.roles.mask = a_full ? b : a;
      cur = a_full ? a : b;
      continue;
    }
    if (op == "Where") {  // masked_fill: Where(mask, fill, scores)
      m.nodes.insert(p);
      m.roles.mask = in(g, p, 0);
      cur = is_scalar_constant(g, in(g, p, 2)) ? in(g, p, 1) : in(g, p, 2);
      continue;
    }
    return std::nullopt;
  }
  if (qk < 0) return std::nullopt;
  m.nodes.insert(qk);
  m.roles.q = in(g, qk, 0);
  m.roles.k = in(g, qk, 1);
  cur = out0(g, softmax);
  int32_t next = sole_consumer(g, cur);
  while (op_is(g, next, "Dropout") || op_is(g, next, "Cast")) {
    if (op_is(g, next, "Dropout")) {
      m.roles.attention_dropout = true;
      const auto& outs = g.nodes[next].outputs;
      if (outs.size() > 1 && outs[1] >= 0 && !g.tensors[outs[1]].consumers.empty()) return std::nullopt;
    }
    m.nodes.insert(next);
    cur = out0(g, next);
    next = sole_consumer(g, cur);
  }
  if (!op_is(g, next, "MatMul") || in(g, next, 0) != cur) return std::nullopt;
  m.nodes.insert(next);
  m.roles.v = in(g, next, 1);
  if (!single_exit(g, m.nodes)) return std::nullopt;
  return m;
}

}  // namespace

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Node: return "node";
    case OpKind::Gelu: return "gelu";
    case OpKind::Silu: return "silu";
    case OpKind::LayerNorm: return "layer_norm";
    case OpKind::Linear: return "linear";
    case OpKind::Attention: return "attention";
  }
  return "node";
}

std::vector<FusedOp> fuse_ops(const Graph& g, const FusionOptions& options) {
  const int32_t n = static_cast<int32_t>(g.nodes.size());
  std::vector<int32_t> owner(n, -1);
  std::vector<Match> matches;
  auto try_all = [&](bool enabled, auto matcher) {
    if (!enabled) return;
    for (int32_t i = 0; i < n; ++i) {
      if (owner[i] >= 0) continue;
      std::optional<Match> m = matcher(g, i);
      if (!m) continue;
      bool free = true;
      for (int32_t node : m->nodes)
        if (owner[node] >= 0) free = false;
      if (!free) continue;
      for (int32_t node : m->nodes) owner[node] = static_cast<int32_t>(matches.size());
      matches.push_back(std::move(*m));
    }
  };
  try_all(options.layer_norm, match_layer_norm);
  try_all(options.gelu, match_gelu);
  try_all(options.silu, match_silu);
  try_all(options.attention, match_attention);
  try_all(options.linear_bias, match_linear);

  std::vector<FusedOp> ops;
  for (int32_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    if (owner[i] < 0) {
      FusedOp op;
      op.name = node.name;
      op.op = node.op_type;
      op.nodes = {i};
      for (int32_t t : node.inputs)
        if (t >= 0 && std::find(op.inputs.begin(), op.inputs.end(), t) == op.inputs.end()) op.inputs.push_back(t);
      for (int32_t t : node.outputs)
        if (t >= 0) op.outputs.push_back(t);
      ops.push_back(std::move(op));
      continue;
    }
    const Match& m = matches[owner[i]];
    if (*m.nodes.rbegin() != i) continue;  // a fused op runs at its last node
    FusedOp op = m.roles;
    op.kind = m.kind;
    op.name = node.name;
    op.op = op_kind_name(m.kind);
    op.nodes.assign(m.nodes.begin(), m.nodes.end());
    region_interface(g, m.nodes, op.inputs, op.outputs);
    ops.push_back(std::move(op));
  }
  return ops;
}

}  // namespace memplan
