// The matrix-product patterns of op fusion (op_fusion.h): F.linear in its exported spellings, and
// scaled-dot-product attention.
#include "cost_models/op_fusion_match.h"

#include <algorithm>
#include <optional>
#include <set>

#include "cost_models/graph_facts.h"

namespace memplan::fusion {

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

// ---- baddbmm: torch.baddbmm(self, batch1, batch2, beta=1, alpha=1) ----
// torch.onnx writes it (torch/onnx/symbolic_opset9.py, baddbmm) as
//   Add(Mul(MatMul(batch1, batch2), Cast(alpha)), Mul(self, Cast(beta)))
// and torch 1.x's nn.MultiheadAttention adds its attention mask this way (torch/nn/functional.py,
// _scaled_dot_product_attention: `torch.baddbmm(attn_mask, q, k.transpose(-2, -1))`). PyTorch runs one
// batched gemm that writes the output once, in the low type under autocast (baddbmm is on autocast's
// lower-precision list, aten/src/ATen/autocast_mode.cpp), and autograd saves batch1 and batch2
// (tools/autograd/derivatives.yaml, baddbmm): neither the product nor the scaled operands ever exist.

namespace {

// The data operand of Mul(data, scalar), where the scalar is a Python number as the exporter passes it to
// baddbmm (a scalar constant, or a Cast of one); adds the Mul and the Cast to `nodes`. -1 if not that.
int32_t unscaled(const Graph& g, int32_t t, std::set<int32_t>& nodes) {
  const int32_t mul = producer_of(g, t);
  if (!op_is(g, mul, "Mul") || sole_consumer(g, t) < 0) return -1;
  for (size_t data : {0u, 1u}) {
    const int32_t scalar = in(g, mul, 1 - data);
    const int32_t cast = producer_of(g, scalar);
    const bool cast_of_scalar = op_is(g, cast, "Cast") && is_scalar_constant(g, in(g, cast, 0)) &&
                                sole_consumer(g, scalar) == mul;
    if (!is_scalar_constant(g, scalar) && !cast_of_scalar) continue;
    nodes.insert(mul);
    if (cast_of_scalar) nodes.insert(cast);
    return in(g, mul, data);
  }
  return -1;
}

}  // namespace

std::optional<Match> match_baddbmm(const Graph& g, int32_t add) {
  if (!op_is(g, add, "Add")) return std::nullopt;
  for (size_t side : {0u, 1u}) {
    Match m;
    m.kind = OpKind::Baddbmm;
    const int32_t product = unscaled(g, in(g, add, side), m.nodes);
    const int32_t mm = producer_of(g, product);
    if (!op_is(g, mm, "MatMul") || sole_consumer(g, product) < 0) continue;
    const int32_t self = unscaled(g, in(g, add, 1 - side), m.nodes);
    const int32_t batch1 = in(g, mm, 0), batch2 = in(g, mm, 1);
    if (self < 0 || batch1 < 0 || batch2 < 0) continue;
    if (g.tensors[batch1].shape.size() != 3 || g.tensors[batch2].shape.size() != 3) continue;  // bmm operands
    m.nodes.insert(mm);
    m.nodes.insert(add);
    m.roles.x = batch1;
    m.roles.weight = batch2;
    m.roles.bias = self;
    if (!single_exit(g, m.nodes)) continue;
    return m;
  }
  return std::nullopt;
}

// ---- Attention: MatMul(q, k), scale, mask, Softmax, Dropout, MatMul(p, v) ----

std::optional<Match> match_attention(const Graph& g, int32_t softmax, bool soft_cap) {
  if (!op_is(g, softmax, "Softmax")) return std::nullopt;
  Match m;
  m.kind = OpKind::Attention;
  m.nodes.insert(softmax);
  int32_t cur = in(g, softmax, 0);
  int32_t qk = -1;
  bool sinks = false;
  // A soft-cap adds its Div, Tanh and Mul between the scale and the mask (Gemma 2: MatMul, Mul, Div, Tanh, Mul,
  // Add, Softmax).
  for (int depth = 0; depth < (soft_cap ? 7 : 5) && cur >= 0; ++depth) {
    const int32_t p = producer_of(g, cur);
    if (p < 0 || count_consumers(g, cur) != 1 || is_graph_output(g, cur)) return std::nullopt;
    const std::string& op = g.nodes[p].op_type;
    if (op == "MatMul") { qk = p; break; }
    if (op == "Cast" || (soft_cap && op == "Tanh")) { m.nodes.insert(p); cur = in(g, p, 0); continue; }
    // gpt_oss's attention sinks, which the engine kernels take too (vLLM's Attention(sinks=...)): the scores
    // concatenated with the sinks' column, minus their row maximum (eager_attention_forward); the Softmax's output
    // is sliced back to the keys before the MatMul with v.
    if (soft_cap && op == "Sub") {
      const int32_t combined = in(g, p, 0), max = producer_of(g, in(g, p, 1)), concat = producer_of(g, combined);
      if (op_is(g, max, "ReduceMax") && in(g, max, 0) == combined && op_is(g, concat, "Concat") &&
          count_consumers(g, combined) == 2 && count_consumers(g, in(g, p, 1)) == 1 && !is_graph_output(g, combined)) {
        m.nodes.insert(p), m.nodes.insert(max), m.nodes.insert(concat);
        sinks = true;
        cur = in(g, concat, 0);
        continue;
      }
    }
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
  while (op_is(g, next, "Dropout") || op_is(g, next, "Cast") || (sinks && op_is(g, next, "Slice"))) {
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

}  // namespace memplan::fusion
