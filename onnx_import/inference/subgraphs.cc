// Subgraphs: the bodies of If/Loop/Scan (run by the control-flow rules, rules/control_flow.cc) and the
// bodies of model-local functions (onnx.proto, FunctionProto) are walked like the top-level graph, in a
// scope that sees the enclosing ones.
#include <onnx/onnx_pb.h>

#include <unordered_set>

#include "onnx_import/errors.h"
#include "onnx_import/inference/walker.h"

namespace memplan::shape {
namespace {

// Subgraphs nest at most this deep (If inside Loop inside ...); deeper models are refused.
constexpr int kMaxSubgraphDepth = 32;

// Replaces attributes that refer to the caller's (ref_attr_name) by the caller's values; references the
// caller does not set are dropped, so the op's default applies.
void resolve_attribute_refs(onnx::NodeProto& n, const onnx::NodeProto& caller) {
  auto* attrs = n.mutable_attribute();
  for (int i = attrs->size() - 1; i >= 0; --i) {
    onnx::AttributeProto& a = attrs->at(i);
    if (a.ref_attr_name().empty()) continue;
    const onnx::AttributeProto* given = nullptr;
    for (const auto& c : caller.attribute())
      if (c.name() == a.ref_attr_name()) given = &c;
    if (!given) {
      attrs->DeleteSubrange(i, 1);
      continue;
    }
    const std::string name = a.name();
    a = *given;
    a.set_name(name);
  }
}

}  // namespace

// Names a graph reads from its enclosing scopes (free variables), including those of nested subgraphs.
void collect_outer_refs(const onnx::GraphProto& g, std::set<std::string>& out) {
  std::unordered_set<std::string> defined;
  for (const auto& i : g.input()) defined.insert(i.name());
  for (const auto& i : g.initializer()) defined.insert(i.name());
  for (const auto& i : g.sparse_initializer()) defined.insert(i.values().name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) defined.insert(o);
  for (const auto& n : g.node()) {
    for (const auto& i : n.input())
      if (!i.empty() && !defined.count(i)) out.insert(i);
    for (const auto& a : n.attribute()) {
      std::set<std::string> inner;
      if (a.has_g()) collect_outer_refs(a.g(), inner);
      for (const auto& sub : a.graphs()) collect_outer_refs(sub, inner);
      for (const auto& name : inner)
        if (!defined.count(name)) out.insert(name);
    }
  }
  for (const auto& o : g.output())
    if (!defined.count(o.name())) out.insert(o.name());
}

bool has_subgraph(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.has_g() || a.graphs_size() > 0) return true;
  return false;
}

// A call of a model-local function: its body is inferred like a subgraph, with the caller's attributes
// substituted for the references to them.
void Walker::infer_local_function(NodeContext& ctx, const onnx::FunctionProto& fn) {
  onnx::GraphProto body;
  for (const auto& n : fn.node()) {
    onnx::NodeProto* copy = body.add_node();
    *copy = n;
    resolve_attribute_refs(*copy, ctx.node());
  }
  std::vector<Value> inputs;
  for (int i = 0; i < fn.input_size() && static_cast<size_t>(i) < ctx.num_inputs(); ++i) {
    if (!ctx.input(i)) continue;  // an omitted optional input: the body must not read it
    body.add_input()->set_name(fn.input(i));
    inputs.push_back(*ctx.input(i));
  }
  for (const auto& o : fn.output()) body.add_output()->set_name(o);
  SubgraphResult r = run(body, inputs, ctx.name() + "/" + fn.name());
  for (size_t i = 0; i < ctx.num_outputs() && i < r.outputs.size(); ++i)
    if (ctx.output_used(i)) ctx.set_output(i, std::move(r.outputs[i]));
}

SubgraphResult Walker::run(const onnx::GraphProto& body, const std::vector<Value>& inputs, const std::string& what) {
  if (depth_ >= kMaxSubgraphDepth)
    throw InputError(what + ": subgraphs nest deeper than " + std::to_string(kMaxSubgraphDepth) + " levels");
  if (static_cast<size_t>(body.input_size()) != inputs.size())
    throw InputError(what + ": the body declares " + std::to_string(body.input_size()) + " inputs but receives " +
                     std::to_string(inputs.size()));
  Scope scope;
  scope.parent = current_;
  for (const auto& vi : body.value_info()) scope.declared[vi.name()] = &vi.type();
  for (const auto& vi : body.output()) scope.declared[vi.name()] = &vi.type();
  for (const auto& init : body.initializer())
    scope.values[init.name()] = value_from_tensor(init, "initializer '" + init.name() + "' of " + what);
  for (int i = 0; i < body.input_size(); ++i) scope.values[body.input(i).name()] = inputs[i];

  ++depth_;
  Scope* saved = current_;
  try {
    walk(body, scope, what + "/");
  } catch (...) {
    --depth_;
    current_ = saved;
    throw;
  }
  --depth_;
  SubgraphResult result;
  for (const auto& o : body.output()) {
    const Value* v = scope.find(o.name());
    if (!v) throw InputError(what + ": body output '" + o.name() + "' is produced by no node");
    result.outputs.push_back(*v);
  }
  return result;
}

std::optional<SubgraphResult> Walker::try_run(const onnx::GraphProto& body, const std::vector<Value>& inputs,
                                              const std::string& what, std::string& error) {
  const size_t kept = warnings_.size();
  try {
    return run(body, inputs, what);
  } catch (const InputError& e) {
    warnings_.resize(kept);
    error = e.what();
    return std::nullopt;
  }
}

}  // namespace memplan::shape
