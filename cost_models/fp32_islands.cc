// Float32 islands (fp32_islands.h): RMSNorm's and eager attention's softmax, found as torch.onnx writes them.
#include "cost_models/fp32_islands.h"

#include <map>
#include <string>

#include "cost_models/graph_facts.h"
#include "cost_models/graph_rewrite.h"
#include "cost_models/op_fusion_match.h"

namespace memplan {
namespace {

using fusion::in;
using fusion::op_is;
using fusion::out0;
using fusion::producer_of;

bool constant_equal(const Graph& g, int32_t t, double v) {
  if (t < 0 || !is_scalar_constant(g, t)) return false;
  const auto& r = g.tensors[t].real_value;
  return r && r->size() == 1 && (*r)[0] == v;
}

bool float_weight(const Graph& g, int32_t t) {
  return t >= 0 && g.tensors[t].kind == TensorKind::Weight && dtype_is_float(g.tensors[t].dtype);
}

// A float Cast node (Tensor.to(dtype) as torch.onnx writes it).
bool float_cast(const Graph& g, int32_t node) {
  return op_is(g, node, "Cast") && !g.nodes[node].outputs.empty() && out0(g, node) >= 0 &&
         dtype_is_float(g.tensors[out0(g, node)].dtype);
}

// The other operand of a binary node that reads `t`.
int32_t other_operand(const Graph& g, int32_t node, int32_t t) {
  return in(g, node, 0) == t ? in(g, node, 1) : in(g, node, 1) == t ? in(g, node, 0) : -1;
}

// An RMSNorm as torch.onnx writes LlamaRMSNorm (rsqrt as 1 / Sqrt, or x / Sqrt) or Gemma's, anchored at its Pow.
struct Norm {
  int32_t x = -1;           // the normalised input (a Cast's output when the export kept `.to(torch.float32)`)
  bool up_cast = false;     // x is that Cast's output: pin it, insert nothing
  int32_t pow = -1, scaled = -1;   // x.pow(2) and x * rsqrt(...): the nodes reading x
  std::vector<int32_t> inner;      // the tensors between them, and the scaled result
  int32_t down_after = -1;         // the node after which the cast back to the input's type runs
  int32_t down_existing = -1;      // a Cast node already there (the export kept `.to(input_dtype)`)
};

std::optional<Norm> match_rms_norm(const Graph& g, int32_t pow) {
  if (!op_is(g, pow, "Pow") || !constant_equal(g, in(g, pow, 1), 2.0)) return std::nullopt;
  Norm n;
  n.x = in(g, pow, 0);
  n.pow = pow;
  const int32_t mean = sole_consumer(g, out0(g, pow));
  if (!op_is(g, mean, "ReduceMean")) return std::nullopt;
  const int32_t add = sole_consumer(g, out0(g, mean));
  if (!op_is(g, add, "Add")) return std::nullopt;
  const int32_t sqrt = sole_consumer(g, out0(g, add));
  if (!op_is(g, sqrt, "Sqrt")) return std::nullopt;
  n.inner = {out0(g, pow), out0(g, mean), out0(g, add), out0(g, sqrt)};
  int32_t next = sole_consumer(g, out0(g, sqrt));
  if (op_is(g, next, "Div") && in(g, next, 0) == n.x && in(g, next, 1) == out0(g, sqrt)) {
    n.scaled = next;  // x / sqrt(...)
  } else {
    const bool reciprocal = op_is(g, next, "Reciprocal") ||
                            (op_is(g, next, "Div") && constant_equal(g, in(g, next, 0), 1.0) && in(g, next, 1) == out0(g, sqrt));
    if (!reciprocal) return std::nullopt;
    n.inner.push_back(out0(g, next));
    n.scaled = sole_consumer(g, out0(g, next));
    if (!op_is(g, n.scaled, "Mul") || other_operand(g, n.scaled, out0(g, next)) != n.x) return std::nullopt;
  }
  n.inner.push_back(out0(g, n.scaled));
  n.up_cast = float_cast(g, producer_of(g, n.x));
  // Llama: weight * h.to(input_dtype); the export may keep that cast.
  int32_t after = sole_consumer(g, out0(g, n.scaled));
  if (float_cast(g, after)) {
    n.down_existing = after;
    after = sole_consumer(g, out0(g, after));
  }
  if (!op_is(g, after, "Mul")) return std::nullopt;
  const int32_t w = other_operand(g, after, n.down_existing >= 0 ? out0(g, n.down_existing) : out0(g, n.scaled));
  if (float_weight(g, w)) {
    n.down_after = n.scaled;
    return n;
  }
  // Gemma: (h * (1.0 + weight.float())).type_as(x): the weight's sum and the product in float32, then the cast.
  const int32_t plus = producer_of(g, w);
  const bool gemma_weight = op_is(g, plus, "Add") && (float_weight(g, in(g, plus, 0)) || float_weight(g, in(g, plus, 1)));
  if (n.down_existing >= 0 || !gemma_weight) return std::nullopt;
  n.inner.push_back(w);
  n.inner.push_back(out0(g, after));
  n.down_after = after;
  const int32_t cast = sole_consumer(g, out0(g, after));
  if (float_cast(g, cast)) n.down_existing = cast;
  return n;
}

}  // namespace

IslandCounts add_fp32_islands(Graph& g, const Upcast& upcast, bool half, bool eager_attention,
                              std::vector<bool>& float32, std::vector<bool>* grown) {
  IslandCounts counts;
  GraphRewriter r(g, float32, grown);
  const size_t base_nodes = g.nodes.size();
  for (size_t i = 0; i < base_nodes && half && upcast.rms_norm; ++i) {
    const std::optional<Norm> n = match_rms_norm(g, static_cast<int32_t>(i));
    if (!n) continue;
    const DType input_type = n->up_cast ? g.tensors[in(g, producer_of(g, n->x), 0)].dtype : g.tensors[n->x].dtype;
    int32_t x32 = n->x;
    if (!n->up_cast) {
      x32 = r.cast(n->x, DType::Float32, n->pow, "/upcast", /*run_after=*/false);
      r.redirect(n->x, x32, {n->pow, n->scaled});
    }
    r.pin(x32);
    for (int32_t t : n->inner) r.pin(t);
    if (n->down_existing < 0) {
      const int32_t h = out0(g, n->down_after);
      const std::vector<int32_t> readers = g.tensors[h].consumers;
      const int32_t back = r.cast(h, input_type, n->down_after, "/downcast", /*run_after=*/true);
      r.redirect(h, back, readers);
      for (int32_t& o : g.outputs)
        if (o == h) o = back;
    }
    ++counts.rms_norms;
  }
  for (size_t i = 0; i < base_nodes && half && upcast.softmax && eager_attention; ++i) {
    const int32_t s = static_cast<int32_t>(i);
    if (!op_is(g, s, "Softmax") || in(g, s, 0) < 0 || out0(g, s) < 0) continue;
    const int32_t scores = in(g, s, 0), probs = out0(g, s);
    const bool up_cast = float_cast(g, producer_of(g, scores));
    const DType input_type = up_cast ? g.tensors[in(g, producer_of(g, scores), 0)].dtype : g.tensors[scores].dtype;
    if (up_cast) {
      r.pin(scores);
    } else {
      const int32_t up = r.cast(scores, DType::Float32, s, "/upcast", /*run_after=*/false);
      r.redirect(scores, up, {s});
      r.pin(up);
    }
    r.pin(probs);
    if (!float_cast(g, sole_consumer(g, probs))) {
      const std::vector<int32_t> readers = g.tensors[probs].consumers;
      const int32_t back = r.cast(probs, input_type, s, "/downcast", /*run_after=*/true);
      r.redirect(probs, back, readers);
    }
    ++counts.softmaxes;
  }
  // logits = logits.float(): the model returns the float32 copy, the head's result dies at the cast.
  if (upcast.logits && !g.outputs.empty()) {
    const int32_t out = g.outputs.back();
    const int32_t head = producer_of(g, out);
    if (head >= 0 && dtype_is_float(g.tensors[out].dtype)) {
      const int32_t copy = r.cast(out, DType::Float32, head, "/logits_float", /*run_after=*/true);
      r.redirect(out, copy, g.tensors[out].consumers);
      r.pin(copy);
      g.tensors[copy].kind = TensorKind::Output;
      g.tensors[out].kind = TensorKind::Activation;
      g.outputs.back() = copy;
      counts.logits = true;
    }
  }
  r.finish();
  return counts;
}

}  // namespace memplan
