// Float32 islands (fp32_islands.h): RMSNorm's and eager attention's softmax, found as torch.onnx writes them.
#include "cost_models/fp32_islands.h"

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

// x.to(torch.float32) for the nodes `readers`: the export's own Cast when it kept one (pinned), else one inserted
// before `node`. Returns the type x had before, which the cast back restores.
DType float32_input(Graph& g, GraphRewriter& r, int32_t x, int32_t node, const std::vector<int32_t>& readers) {
  if (float_cast(g, producer_of(g, x))) {
    r.pin(x);
    return g.tensors[in(g, producer_of(g, x), 0)].dtype;
  }
  const int32_t x32 = r.cast(x, DType::Float32, node, "/upcast", /*run_after=*/false);
  r.redirect(x, x32, readers);
  r.pin(x32);
  return g.tensors[x].dtype;
}

// h.to(input_dtype) after `node`, for every reader of h (and as the graph output it was).
void cast_back(Graph& g, GraphRewriter& r, int32_t h, int32_t node, DType input_type) {
  const std::vector<int32_t> readers = g.tensors[h].consumers;
  const int32_t back = r.cast(h, input_type, node, "/downcast", /*run_after=*/true);
  r.redirect(h, back, readers);
  for (int32_t& o : g.outputs)
    if (o == h) o = back;
}

// A Cast to float32 (Tensor.type(torch.float32) as torch.onnx writes it).
bool float32_cast(const Graph& g, int32_t node) {
  return float_cast(g, node) && g.tensors[out0(g, node)].dtype == DType::Float32;
}

// DeepSeek's gate: F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)) as torch.onnx writes
// it, the tokens' Cast and the weight's Cast read by the MatMul (the weight's through F.linear's Transpose).
bool float32_gate(const Graph& g, int32_t mm) {
  if (!op_is(g, mm, "MatMul") || g.nodes[mm].inputs.size() != 2 || out0(g, mm) < 0) return false;
  const int32_t cx = producer_of(g, in(g, mm, 0)), t = producer_of(g, in(g, mm, 1));
  if (!float32_cast(g, cx) || !op_is(g, t, "Transpose")) return false;
  const int32_t cw = producer_of(g, in(g, t, 0));
  return float32_cast(g, cw) && float_weight(g, in(g, cw, 0));
}

// A linear layer's output on a float weight (a gate: Mixtral's, Qwen-MoE's).
bool linear_logits(const Graph& g, int32_t t) {
  const int32_t mm = producer_of(g, t);
  int32_t transpose = -1;
  return op_is(g, mm, "MatMul") && g.nodes[mm].inputs.size() == 2 &&
         float_weight(g, fusion::linear_weight(g, mm, transpose));
}

// A router's logits, or the top-k of them: a gate's (a linear layer's, MatMul or Gemm), DeepSeek's float32 gate's, or
// torch.topk of a gate's (GptOssTopKRouter takes its softmax over the k values). An attention's scores are none of
// these (their MatMul reads the keys).
bool router_logits(const Graph& g, int32_t t) {
  int32_t p = producer_of(g, t);
  if (op_is(g, p, "TopK")) p = producer_of(g, in(g, p, 0));
  if (p < 0) return false;
  const int32_t logits = out0(g, p);
  if (op_is(g, p, "Gemm")) return float_weight(g, in(g, p, 1));
  return linear_logits(g, logits) || float32_gate(g, p);
}

// A tensor made from a float parameter by reshapes and broadcasts only (gpt_oss's sinks: sinks.reshape(1, -1, 1, 1)
// .expand(...)).
bool from_parameter(const Graph& g, int32_t t) {
  for (int hops = 0; hops < 4 && t >= 0; ++hops) {
    if (float_weight(g, t)) return true;
    const int32_t p = producer_of(g, t);
    if (!op_is(g, p, "Reshape") && !op_is(g, p, "Expand") && !op_is(g, p, "Unsqueeze")) return false;
    t = in(g, p, 0);
  }
  return false;
}

// Attention with sinks as GptOss's eager_attention_forward writes it: softmax(combined_logits - max, dtype=
// combined_logits.dtype) over the scores concatenated with a learned column, in the scores' own type (transformers
// models/gpt_oss/modeling_gpt_oss.py, eager_attention_forward).
bool sink_attention_logits(const Graph& g, int32_t t) {
  const int32_t sub = producer_of(g, t);
  if (!op_is(g, sub, "Sub")) return false;
  const int32_t concat = producer_of(g, in(g, sub, 0));
  if (!op_is(g, concat, "Concat")) return false;
  for (int32_t operand : g.nodes[concat].inputs)
    if (from_parameter(g, operand)) return true;
  return false;
}

// Pins `start` and every float tensor it reaches up to the next float Cast (the router's `.type(hidden_states.dtype)`
// or `.to(hidden_states.dtype)`: the region ends there), with the float zeros (ConstantOfShape) the region's scatters
// and index_add_s start from. `seen` spans the graph's tensors, shared by the regions of one graph.
void pin_float_region(const Graph& g, int32_t start, std::vector<bool>& float32, std::vector<bool>& seen) {
  std::vector<int32_t> stack{start};
  while (!stack.empty()) {
    const int32_t v = stack.back();
    stack.pop_back();
    if (v < 0 || seen[v] || !dtype_is_float(g.tensors[v].dtype)) continue;
    seen[v] = float32[v] = true;
    for (int32_t c : g.tensors[v].consumers) {
      if (float_cast(g, c)) continue;
      for (int32_t operand : g.nodes[c].inputs)
        if (op_is(g, producer_of(g, operand), "ConstantOfShape") && dtype_is_float(g.tensors[operand].dtype))
          float32[operand] = true;  // torch.zeros_like(..., dtype=topk_weights.dtype), zeros_like(group_scores)
      for (int32_t o : g.nodes[c].outputs) stack.push_back(o);
    }
  }
}

// The Softmax of F.softmax(router_logits, dim=1, dtype=torch.float) followed by torch.topk, as torch.onnx writes it
// (symbolic_opset9.py softmax: the Softmax, then a Cast to the dtype): the logits a linear layer's (the gate), the
// Softmax read only by the Cast, the Cast's result by a TopK. Returns the Cast node, or -1.
int32_t softmax_router_cast(const Graph& g, int32_t softmax) {
  if (!op_is(g, softmax, "Softmax") || out0(g, softmax) < 0) return -1;
  if (!linear_logits(g, in(g, softmax, 0))) return -1;  // DeepSeek's gate's logits are float32 already
  const int32_t cast = sole_consumer(g, out0(g, softmax));
  if (!float_cast(g, cast)) return -1;
  for (int32_t c : g.tensors[out0(g, cast)].consumers)
    if (op_is(g, c, "TopK")) return cast;
  return -1;
}

}  // namespace

int pin_float32_routers(const Graph& g, bool autocast, std::vector<bool>& float32) {
  int routers = 0;
  std::vector<bool> seen(g.tensors.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int32_t mm = static_cast<int32_t>(i);
    if (!float32_gate(g, mm)) continue;
    const int32_t t = producer_of(g, in(g, mm, 1));
    for (int32_t copy : {in(g, mm, 0), in(g, t, 0), out0(g, t)}) float32[copy] = true;  // the casts, the transpose
    ++routers;
    if (autocast) continue;
    pin_float_region(g, out0(g, mm), float32, seen);
    // DeepseekV2MoEGate's .softmax(dim=-1, dtype=torch.float32): the Softmax's Cast is to float32, not the cast back
    // that ends the region (in a float32 export both are Casts to float); the scores go on in float32 after it.
    const int32_t softmax = sole_consumer(g, out0(g, mm));
    const int32_t cast = op_is(g, softmax, "Softmax") ? sole_consumer(g, out0(g, softmax)) : -1;
    if (float_cast(g, cast)) pin_float_region(g, out0(g, cast), float32, seen);
  }
  return routers;
}

// A scan of its own, so that training copies a graph for the rewrite only when it has such a router.
bool has_softmax_router(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (softmax_router_cast(g, static_cast<int32_t>(i)) >= 0) return true;
  return false;
}

std::string softmax_router_note(int routers) {
  return std::to_string(routers) + " routers run F.softmax(router_logits, dtype=torch.float) (Mixtral, Qwen-MoE): a "
         "float32 copy of the logits, a float32 softmax kept for backward, float32 top-k weights cast back once.";
}

int add_float32_softmax_routers(Graph& g, std::vector<bool>& float32, std::vector<bool>* grown) {
  std::vector<std::pair<int32_t, int32_t>> routers;  // (Softmax, its Cast)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int32_t s = static_cast<int32_t>(i);
    const int32_t cast = softmax_router_cast(g, s);
    if (cast >= 0) routers.emplace_back(s, cast);
  }
  if (routers.empty()) return 0;
  std::vector<int32_t> weights;  // the Casts' results (tensor ids outlive the rewrite; node indices do not)
  GraphRewriter r(g, float32, grown);
  for (const auto& [s, cast] : routers) {
    float32_input(g, r, in(g, s, 0), s, {s});  // input.toType(dtype): read by the softmax only, freed after it
    r.pin(out0(g, s));                         // _softmax's float32 result, which SoftmaxBackward keeps
    weights.push_back(out0(g, cast));
  }
  r.finish();
  std::vector<bool> seen(g.tensors.size(), false);
  for (int32_t w : weights) pin_float_region(g, w, float32, seen);
  return static_cast<int>(routers.size());
}

std::string float32_router_note(int routers, bool autocast) {
  return std::to_string(routers) +
         (autocast ? " routers cast the tokens and the gate's weight to float32 (DeepseekV3TopkRouter, "
                     "DeepseekV2MoEGate); autocast runs F.linear on half copies of both."
                   : " routers run in float32 (DeepseekV3TopkRouter, DeepseekV2MoEGate: the tokens and the gate's "
                     "weight cast to float32, the scores and top-k weights float32), the experts' weighted outputs "
                     "float32 until cast back to the model's type (DeepseekV3MoE.moe after its float32 accumulator, "
                     "DeepSeek-V2 each expert's).");
}

IslandCounts add_fp32_islands(Graph& g, const Upcast& upcast, bool half, bool eager_attention,
                              std::vector<bool>& float32, std::vector<bool>* grown) {
  IslandCounts counts;
  GraphRewriter r(g, float32, grown);
  const size_t base_nodes = g.nodes.size();
  for (size_t i = 0; i < base_nodes && half && upcast.rms_norm; ++i) {
    const std::optional<Norm> n = match_rms_norm(g, static_cast<int32_t>(i));
    if (!n) continue;
    const DType input_type = float32_input(g, r, n->x, n->pow, {n->pow, n->scaled});
    for (int32_t t : n->inner) r.pin(t);
    if (n->down_existing < 0) cast_back(g, r, out0(g, n->down_after), n->down_after, input_type);
    ++counts.rms_norms;
  }
  for (size_t i = 0; i < base_nodes && half && upcast.softmax && eager_attention; ++i) {
    const int32_t s = static_cast<int32_t>(i);
    // A router's softmax is not attention's (add_float32_softmax_routers and pin_float32_routers model the float32
    // ones; gpt_oss's runs in the model's type), nor does an attention with sinks run in float32.
    if (!op_is(g, s, "Softmax") || in(g, s, 0) < 0 || out0(g, s) < 0) continue;
    if (router_logits(g, in(g, s, 0)) || sink_attention_logits(g, in(g, s, 0))) continue;
    const int32_t probs = out0(g, s);
    const DType input_type = float32_input(g, r, in(g, s, 0), s, {s});
    r.pin(probs);
    if (!float_cast(g, sole_consumer(g, probs))) cast_back(g, r, probs, s, input_type);
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
