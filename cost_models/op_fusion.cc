#include "cost_models/op_fusion.h"

#include <algorithm>
#include <optional>
#include <set>

#include "cost_models/graph_facts.h"
#include "cost_models/op_fusion_match.h"

namespace memplan {
namespace fusion {

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

bool single_exit(const Graph& g, const std::set<int32_t>& nodes) {
  std::vector<int32_t> ins, outs;
  region_interface(g, nodes, ins, outs);
  return outs.size() == 1 && producer_of(g, outs[0]) == *nodes.rbegin();
}

// ---- GELU (erf and tanh forms) ----

namespace {

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

}  // namespace

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
    // GELU is x * Phi(x): x is read twice in the region, inside the Erf/Tanh's argument and by the product
    // (both of torch.onnx's forms, symbolic_opset9.gelu). A chain that reads it once is not a GELU: Gemma 2's
    // score soft-cap, cap * tanh(scores / cap) (transformers' modeling_gemma2.py), is three ops in eager.
    int reads_of_x = 0;
    for (int32_t c : g.tensors[x].consumers)
      if (nodes.count(c))
        for (int32_t i : g.nodes[c].inputs) reads_of_x += i == x;
    if (reads_of_x < 2) continue;
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

// ---- torch.rsqrt: Div(1, Sqrt(x)) ----

// torch.onnx writes torch.rsqrt(x) as Div(1, Sqrt(x)) (torch 1.13 symbolic_opset9.rsqrt: g.op("Div",
// _if_scalar_type_as(torch.ones(1), self), sqrt(g, self))); eager `1 / t` is t.reciprocal() * 1 (torch/_tensor.py
// __rdiv__), written Reciprocal, Mul, so the Div of a constant one by a Sqrt read by nothing else is an rsqrt. Eager
// PyTorch runs one kernel: its output is the only tensor, and autograd's RsqrtBackward0 saves only that result
// (tools/autograd/derivatives.yaml, rsqrt: `self: -0.5 * grad * result.pow(3).conj()`), never the Sqrt's.
std::optional<Match> match_rsqrt(const Graph& g, int32_t sqrt) {
  if (!op_is(g, sqrt, "Sqrt") || g.nodes[sqrt].inputs.size() != 1) return std::nullopt;
  const int32_t div = sole_consumer(g, out0(g, sqrt));
  if (!op_is(g, div, "Div") || g.nodes[div].inputs.size() != 2 || in(g, div, 1) != out0(g, sqrt)) return std::nullopt;
  const int32_t one = in(g, div, 0);
  if (one < 0 || !is_scalar_constant(g, one)) return std::nullopt;
  const auto& value = g.tensors[one].real_value;
  if (!value || value->size() != 1 || (*value)[0] != 1.0) return std::nullopt;
  Match m;
  m.kind = OpKind::Rsqrt;
  m.nodes = {sqrt, div};
  m.roles.x = in(g, sqrt, 0);
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

// ---- Tensor.index_add_ ----

// torch.onnx writes x.index_add_(0, index, source) (symbolic_opset11.index_add, through scatter_add) as
// Add(x, ScatterElements(ConstantOfShape(Shape(x)), Expand(index), Expand(source))): a zeros tensor of x's shape,
// the source scattered into it, and the sum. PyTorch adds the rows in place into x (a mixture of experts'
// accumulator, transformers' final_hidden_states.index_add_): no zeros, no scattered copy, no expanded operands
// (expand is a view). Matched at the Add; the Shape nodes that read the region's own tensors come with it.
std::optional<Match> match_index_add(const Graph& g, int32_t add) {
  if (!op_is(g, add, "Add") || g.nodes[add].inputs.size() != 2) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const int32_t scatter = producer_of(g, in(g, add, side));
    const int32_t x = in(g, add, 1 - side);
    if (!op_is(g, scatter, "ScatterElements") || x < 0) continue;
    const Node& s = g.nodes[scatter];
    if (s.inputs.size() != 3 || g.tensors[out0(g, scatter)].consumers.size() != 1) continue;
    if (g.tensors[out0(g, add)].shape != g.tensors[x].shape || g.tensors[out0(g, scatter)].shape != g.tensors[x].shape) continue;
    const int32_t zeros = producer_of(g, in(g, scatter, 0));
    if (!op_is(g, zeros, "ConstantOfShape") || g.tensors[out0(g, zeros)].consumers.size() != 1) continue;
    Match m;
    m.kind = OpKind::IndexAdd;
    m.nodes = {add, scatter, zeros};
    // The index and the source as index_add_ takes them: before the exporter's Expand to the scatter's shape.
    const auto operand = [&](int32_t t) {
      const int32_t e = producer_of(g, t);
      if (!op_is(g, e, "Expand")) return t;
      m.nodes.insert(e);
      return in(g, e, 0);
    };
    // index_add's index is one row number per source row, unsqueezed and expanded to the source's shape; a
    // scatter_add (the same nodes at opsets before 16) takes a full index and runs out of place, saving only it.
    if (!op_is(g, producer_of(g, in(g, scatter, 1)), "Expand")) continue;
    m.roles.index = operand(in(g, scatter, 1));
    int64_t index_rows = 1;
    for (int64_t d : g.tensors[m.roles.index].shape) index_rows *= d;
    const std::vector<int64_t>& expanded = g.tensors[in(g, scatter, 1)].shape;
    if (expanded.empty() || index_rows != expanded.front()) continue;
    m.roles.source = operand(in(g, scatter, 2));
    m.roles.x = x;
    // Shape nodes reading a tensor inside the region (the expanded source's shape, for the index's Expand).
    for (int32_t node : std::set<int32_t>(m.nodes))
      for (int32_t o : g.nodes[node].outputs)
        if (o >= 0 && node != add)
          for (int32_t c : g.tensors[o].consumers)
            if (op_is(g, c, "Shape")) m.nodes.insert(c);
    if (!single_exit(g, m.nodes)) continue;
    return m;
  }
  return std::nullopt;
}

}  // namespace fusion

namespace {
bool matmul_node(const FusedOp& op) {
  return op.kind == OpKind::Node && (op.op == "MatMul" || op.op == "Gemm") && !op.nodes.empty();
}
int32_t operand(const Graph& g, const FusedOp& op, size_t i) {
  const Node& n = g.nodes[op.nodes.back()];
  return i < n.inputs.size() ? n.inputs[i] : -1;
}
}  // namespace

int32_t linear_weight_of(const Graph& g, const FusedOp& op) {
  if (op.kind == OpKind::Linear) return op.weight;
  return matmul_node(op) ? operand(g, op, 1) : -1;
}

int32_t linear_input_of(const Graph& g, const FusedOp& op) {
  if (op.kind == OpKind::Linear) return op.x;
  return matmul_node(op) ? operand(g, op, 0) : -1;
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Node: return "node";
    case OpKind::Gelu: return "gelu";
    case OpKind::Silu: return "silu";
    case OpKind::LayerNorm: return "layer_norm";
    case OpKind::Linear: return "linear";
    case OpKind::Baddbmm: return "baddbmm";
    case OpKind::Attention: return "attention";
    case OpKind::IndexAdd: return "index_add";
    case OpKind::Rsqrt: return "rsqrt";
  }
  return "node";
}

std::vector<FusedOp> fuse_ops(const Graph& g, const FusionOptions& options) {
  const int32_t n = static_cast<int32_t>(g.nodes.size());
  std::vector<int32_t> owner(n, -1);
  std::vector<fusion::Match> matches;
  auto try_all = [&](bool enabled, auto matcher) {
    if (!enabled) return;
    for (int32_t i = 0; i < n; ++i) {
      if (owner[i] >= 0) continue;
      std::optional<fusion::Match> m = matcher(g, i);
      if (!m) continue;
      bool free = true;
      for (int32_t node : m->nodes)
        if (owner[node] >= 0) free = false;
      if (!free) continue;
      for (int32_t node : m->nodes) owner[node] = static_cast<int32_t>(matches.size());
      matches.push_back(std::move(*m));
    }
  };
  auto attention = [&] {
    try_all(options.attention, [&](const Graph& graph, int32_t softmax) {
      return fusion::match_attention(graph, softmax, options.attention_soft_cap);
    });
  };
  // With soft-caps the attention is matched first, so that the cap's Div, Tanh and Mul are the kernel's.
  if (options.attention_soft_cap) attention();
  try_all(options.layer_norm, fusion::match_layer_norm);
  try_all(options.gelu, fusion::match_gelu);
  try_all(options.silu, fusion::match_silu);
  try_all(options.rsqrt, fusion::match_rsqrt);
  if (!options.attention_soft_cap) attention();
  try_all(options.baddbmm, fusion::match_baddbmm);
  try_all(options.index_add, fusion::match_index_add);
  try_all(options.linear_bias, fusion::match_linear);

  std::vector<FusedOp> ops;
  ops.reserve(static_cast<size_t>(n));  // at most one a node: no regrowth over 250,000 of them
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
    const fusion::Match& m = matches[owner[i]];
    if (*m.nodes.rbegin() != i) continue;  // a fused op runs at its last node
    FusedOp op = m.roles;
    op.kind = m.kind;
    op.name = node.name;
    op.op = op_kind_name(m.kind);
    op.nodes.assign(m.nodes.begin(), m.nodes.end());
    fusion::region_interface(g, m.nodes, op.inputs, op.outputs);
    ops.push_back(std::move(op));
  }
  return ops;
}

std::vector<FusedOp> attention_blocks(const Graph& g) {
  FusionOptions only;
  only.attention = true;
  std::vector<FusedOp> out;
  for (FusedOp& op : fuse_ops(g, only))
    if (op.kind == OpKind::Attention) out.push_back(std::move(op));
  return out;
}

}  // namespace memplan
