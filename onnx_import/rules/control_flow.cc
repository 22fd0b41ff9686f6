// If, Loop and Scan (onnx/defs/controlflow): their bodies are inferred by the walker with the outer scope
// visible; the node's outputs follow from the body's.
#include <onnx/onnx_pb.h>

#include <algorithm>

#include "onnx_import/errors.h"
#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

// Loops whose carried values change shape every iteration are re-inferred once per iteration up to this
// many iterations (shapes must then be followed exactly); beyond it memplan refuses the loop.
constexpr int64_t kMaxUnrolledIterations = 256;

const onnx::GraphProto& graph_attr(const NodeContext& ctx, const char* name) {
  const auto* a = ctx.attr(name);
  if (!a || !a->has_g()) ctx.fail(std::string("has no '") + name + "' subgraph");
  return a->g();
}

uint64_t total_bytes(const std::vector<Value>& values, const std::string& what) {
  uint64_t sum = 0;
  for (const auto& v : values) sum += checked_value_bytes(v, what);
  return sum;
}

// Sequences and optionals keep their items' types (a Loop may carry a growing sequence).
Value shape_only(const Value& v) { return type_only(v); }

Value scalar(DType t) {
  Value v;
  v.dtype = t;
  return v;
}

void set_outputs_from(NodeContext& ctx, const std::vector<Value>& outs) {
  if (outs.size() < ctx.num_outputs()) ctx.fail("the branch produces fewer outputs than the node has");
  for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, outs[i]);
}

// If: a computable condition selects its branch. Otherwise both are inferred: a branch that cannot be
// shaped at these inputs (it never runs at them, e.g. an LSTM fed a tensor of the other branch's rank) is
// dropped and the other assumed; when both shape, the one whose outputs are larger is taken, since memplan
// estimates the worst case. Either way a warning names the node and the branch assumed.
bool if_rule(NodeContext& ctx) {
  const auto& then_g = graph_attr(ctx, "then_branch");
  const auto& else_g = graph_attr(ctx, "else_branch");
  if (const auto cond = ctx.input_ints(0); cond && cond->size() == 1) {
    const bool taken = (*cond)[0] != 0;
    auto r = ctx.subgraphs().run(taken ? then_g : else_g, {}, ctx.name() + (taken ? "/then_branch" : "/else_branch"));
    set_outputs_from(ctx, r.outputs);
    ctx.subgraphs().record_branch(ctx.name(), taken);
    return true;
  }
  std::string then_error, else_error;
  auto t = ctx.subgraphs().try_run(then_g, {}, ctx.name() + "/then_branch", then_error);
  auto e = ctx.subgraphs().try_run(else_g, {}, ctx.name() + "/else_branch", else_error);
  const std::string unknown = "the condition is not known statically (bind the inputs it reads with --value to choose); ";
  if (!t && !e)
    ctx.fail(unknown + "neither branch can be shaped at these inputs: then_branch: " + then_error +
             "; else_branch: " + else_error);
  if (!t || !e) {
    ctx.warn(unknown + "the " + std::string(t ? "else" : "then") + " branch cannot be shaped at these inputs (" +
             (t ? else_error : then_error) + "), so the " + (t ? "then" : "else") + " branch is assumed");
    set_outputs_from(ctx, t ? t->outputs : e->outputs);
    ctx.subgraphs().record_branch(ctx.name(), t.has_value());
    return true;
  }
  const uint64_t tb = total_bytes(t->outputs, "an output of " + ctx.name() + "/then_branch");
  const uint64_t eb = total_bytes(e->outputs, "an output of " + ctx.name() + "/else_branch");
  const bool take_then = tb >= eb;
  ctx.warn(unknown + "both branches were analysed and the " + std::string(take_then ? "then" : "else") +
           " branch, whose outputs are larger (" + std::to_string(std::max(tb, eb)) + " bytes), is assumed");
  set_outputs_from(ctx, take_then ? t->outputs : e->outputs);
  ctx.subgraphs().record_branch(ctx.name(), take_then);
  return true;
}

// Runs a Loop body once per iteration with the iteration number and the carried contents known, for
// bodies whose shapes depend on them (e.g. Slice(x, i, i + 1)). Stops early when the body's condition
// is known to turn false. Scan outputs must keep one shape across iterations.
void unroll_loop(NodeContext& ctx, const onnx::GraphProto& body, int64_t trips, size_t carried) {
  std::vector<Value> state;
  for (size_t k = 0; k < carried; ++k) state.push_back(ctx.required(2 + k));
  Value cond = scalar(DType::Bool);
  cond.ints = ctx.input_ints(1).value_or(std::vector<int64_t>{1});
  std::vector<Value> scans(ctx.num_outputs() > carried ? ctx.num_outputs() - carried : 0);
  int64_t done = 0;
  for (; done < trips; ++done) {
    if (cond.ints && cond.ints->size() == 1 && (*cond.ints)[0] == 0) break;
    Value iter = scalar(DType::Int64);
    iter.ints = std::vector<int64_t>{done};
    std::vector<Value> in{iter, cond};
    in.insert(in.end(), state.begin(), state.end());
    SubgraphResult r = ctx.subgraphs().run(body, in, ctx.name() + "/body (iteration " + std::to_string(done) + ")");
    if (r.outputs.size() < 1 + carried + scans.size()) ctx.fail("the body returns fewer values than the node has outputs");
    cond = r.outputs[0];
    for (size_t k = 0; k < carried; ++k) state[k] = r.outputs[1 + k];
    for (size_t j = 0; j < scans.size(); ++j) {
      const Value& v = r.outputs[1 + carried + j];
      if (!v.is_tensor()) ctx.fail("scan output " + std::to_string(j) + " is " + kind_text(v) + "; scan outputs are tensors");
      if (done > 0 && v.shape != scans[j].shape) ctx.fail("a scan output changes shape between iterations");
      scans[j] = shape_only(v);
    }
  }
  for (size_t k = 0; k < carried && k < ctx.num_outputs(); ++k) ctx.set_output(k, state[k]);
  for (size_t j = 0; j < scans.size(); ++j) {
    if (!ctx.output_used(carried + j)) continue;
    if (done == 0) ctx.fail("the loop runs no iteration, so its scan outputs have no element shape");
    Value v = scans[j];
    v.shape.insert(v.shape.begin(), done);
    ctx.set_output(carried + j, std::move(v));
  }
}

// Loop: inputs (M, cond, v_initial...); body (iter_num, cond, v...) -> (cond, v..., scan_outputs...);
// node outputs (v_final..., scan_outputs with the trip count as leading dim). The body is inferred once
// with the carried values' shapes; when that fails (shapes that depend on the iteration) and the trip
// count is known and small, it is unrolled.
bool loop_rule(NodeContext& ctx) {
  const auto& body = graph_attr(ctx, "body");
  const size_t carried = ctx.num_inputs() >= 2 ? ctx.num_inputs() - 2 : 0;
  std::optional<int64_t> trips;
  if (const auto m = ctx.input_ints(0); m && m->size() == 1) trips = std::max<int64_t>((*m)[0], 0);

  // Carried contents vary per iteration, so the body sees their shapes only.
  std::vector<Value> in{scalar(DType::Int64), scalar(DType::Bool)};
  for (size_t k = 0; k < carried; ++k) in.push_back(shape_only(ctx.required(2 + k)));
  const std::string what = ctx.name() + "/body";
  SubgraphResult r;
  try {
    r = ctx.subgraphs().run(body, in, what);
  } catch (const InputError&) {
    if (!trips || *trips == 0 || *trips > kMaxUnrolledIterations) throw;
    unroll_loop(ctx, body, *trips, carried);
    return true;
  }
  if (r.outputs.size() < 1 + carried) ctx.fail("the body returns fewer values than the loop carries");
  // Follow carried values whose shape changes until it settles or the trip count is reached.
  int64_t iteration = 1;
  auto changed = [&] {
    for (size_t k = 0; k < carried; ++k)
      if (!same_type(r.outputs[1 + k], in[2 + k])) return true;
    return false;
  };
  while (changed()) {
    if (!trips || *trips > kMaxUnrolledIterations)
      ctx.fail("a loop-carried value changes shape every iteration and the trip count is " +
               (trips ? std::to_string(*trips) + " (more than memplan unrolls)" : std::string("not known statically")));
    if (iteration >= *trips) break;
    for (size_t k = 0; k < carried; ++k) in[2 + k] = shape_only(r.outputs[1 + k]);
    r = ctx.subgraphs().run(body, in, what);
    ++iteration;
  }
  for (size_t k = 0; k < carried && k < ctx.num_outputs(); ++k)
    ctx.set_output(k, shape_only(trips == 0 ? ctx.required(2 + k) : r.outputs[1 + k]));
  for (size_t k = carried; k < ctx.num_outputs(); ++k) {
    if (!ctx.output_used(k)) continue;
    if (!trips) continue;  // unknown trip count: left unset, so the walker takes the declared shape or fails
    if (1 + k >= r.outputs.size()) ctx.fail("the body returns fewer scan outputs than the node has");
    Value v = shape_only(r.outputs[1 + k]);
    if (!v.is_tensor()) ctx.fail("scan output " + std::to_string(k - carried) + " is " + kind_text(v) + "; scan outputs are tensors");
    v.shape.insert(v.shape.begin(), *trips);
    ctx.set_output(k, std::move(v));
  }
  return true;
}

// Scan (opset 9+): inputs (state..., scan inputs...); the body sees state and one slice of each scan
// input; outputs (final state..., scan outputs stacked along scan_output_axes).
bool scan9(NodeContext& ctx) {
  const auto& body = graph_attr(ctx, "body");
  const int64_t num_scan = ctx.attr_int("num_scan_inputs", 0);
  if (num_scan < 1 || static_cast<size_t>(num_scan) > ctx.num_inputs()) ctx.fail("num_scan_inputs is out of range");
  const size_t state = ctx.num_inputs() - static_cast<size_t>(num_scan);
  const auto in_axes = ctx.attr_ints("scan_input_axes").value_or(std::vector<int64_t>(num_scan, 0));
  const auto out_axes_attr = ctx.attr_ints("scan_output_axes");
  std::vector<Value> in;
  for (size_t k = 0; k < state; ++k) in.push_back(shape_only(ctx.required(k)));
  std::optional<int64_t> seq;
  for (int64_t s = 0; s < num_scan; ++s) {
    Value v = shape_only(ctx.required(state + s));
    const int64_t axis = ctx.axis(s < static_cast<int64_t>(in_axes.size()) ? in_axes[s] : 0, v.shape.size());
    if (seq && *seq != v.shape[axis]) ctx.fail("scan inputs have different sequence lengths");
    seq = v.shape[axis];
    v.shape.erase(v.shape.begin() + axis);
    in.push_back(std::move(v));
  }
  SubgraphResult r = ctx.subgraphs().run(body, in, ctx.name() + "/body");
  if (r.outputs.size() < ctx.num_outputs()) ctx.fail("the body returns fewer values than the node has outputs");
  for (size_t k = 0; k < state && k < ctx.num_outputs(); ++k) ctx.set_output(k, shape_only(r.outputs[k]));
  for (size_t k = state; k < ctx.num_outputs(); ++k) {
    Value v = shape_only(r.outputs[k]);
    const size_t j = k - state;
    int64_t axis = out_axes_attr && j < out_axes_attr->size() ? (*out_axes_attr)[j] : 0;
    axis = ctx.axis(axis, v.shape.size() + 1);
    v.shape.insert(v.shape.begin() + axis, *seq);
    ctx.set_output(k, std::move(v));
  }
  return true;
}

// Scan-8: inputs (sequence_lens?, state..., scan inputs...) all with a leading batch dim; scan inputs
// are [batch, sequence, ...]; outputs carry the batch dim (and the sequence dim for scan outputs).
bool scan8(NodeContext& ctx) {
  const auto& body = graph_attr(ctx, "body");
  const int64_t num_scan = ctx.attr_int("num_scan_inputs", 0);
  if (num_scan < 1 || static_cast<size_t>(num_scan) + 1 > ctx.num_inputs()) ctx.fail("num_scan_inputs is out of range");
  const size_t state = ctx.num_inputs() - 1 - static_cast<size_t>(num_scan);
  std::vector<Value> in;
  int64_t batch = -1, seq = -1;
  for (size_t k = 0; k < state + num_scan; ++k) {
    Value v = shape_only(ctx.required(1 + k));
    const bool is_scan = k >= state;
    if (v.shape.size() < (is_scan ? 2u : 1u)) ctx.fail("an input lacks its batch or sequence dimension");
    batch = v.shape[0];
    if (is_scan) seq = v.shape[1];
    v.shape.erase(v.shape.begin(), v.shape.begin() + (is_scan ? 2 : 1));
    in.push_back(std::move(v));
  }
  SubgraphResult r = ctx.subgraphs().run(body, in, ctx.name() + "/body");
  if (r.outputs.size() < ctx.num_outputs()) ctx.fail("the body returns fewer values than the node has outputs");
  for (size_t k = 0; k < ctx.num_outputs(); ++k) {
    Value v = shape_only(r.outputs[k]);
    if (k >= state) v.shape.insert(v.shape.begin(), seq);
    v.shape.insert(v.shape.begin(), batch);
    ctx.set_output(k, std::move(v));
  }
  return true;
}

bool scan_rule(NodeContext& ctx) { return ctx.opset() >= 9 ? scan9(ctx) : scan8(ctx); }

}  // namespace

void register_control_flow_rules(RuleTable& t) {
  t[""]["If"] = if_rule;
  t[""]["Loop"] = loop_rule;
  t[""]["Scan"] = scan_rule;
}

}  // namespace memplan::shape
