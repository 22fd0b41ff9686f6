// The walker: orders a graph's nodes and infers each with memplan's own rule or ONNX 1.12's schema
// inference, evaluating small shape computations on the way.
#include "onnx_import/inference/walker.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <deque>
#include <functional>
#include <queue>
#include <string_view>

#include "onnx_import/errors.h"
#include "onnx_import/name_index.h"

namespace memplan::shape {
namespace {

Rule find_rule(std::string_view domain, std::string_view op) {
  const auto& table = rule_table();
  const auto d = table.find(domain);
  if (d == table.end()) return nullptr;
  const auto r = d->second.find(op);
  return r == d->second.end() ? nullptr : r->second;
}

}  // namespace

std::string node_display_name(const onnx::NodeProto& node, size_t index) {
  return node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
}

std::string_view value_kind(const onnx::TypeProto& t) {
  switch (t.value_case()) {
    case onnx::TypeProto::kSequenceType: return "a sequence";
    case onnx::TypeProto::kMapType: return "a map";
    case onnx::TypeProto::kOptionalType: return "an optional";
    case onnx::TypeProto::kSparseTensorType: return "a sparse tensor";
    case onnx::TypeProto::kTensorType: return "a tensor";
    default: return "of no type";
  }
}

int Walker::opset_of(const std::string& domain, const onnx::NodeProto& node, size_t index, const std::string& where) const {
  if (auto it = model_.opsets.find(domain); it != model_.opsets.end()) return static_cast<int>(it->second);
  if (domain.empty())
    throw InputError("node '" + where + node_display_name(node, index) +
                     "' uses the default ONNX domain, but the model imports no version of it");
  return 1;  // a custom domain the model does not import explicitly (com.microsoft in older exports)
}

const onnx::OpSchema* Walker::schema_of(const std::string& op, int opset, const std::string& domain) {
  std::string key = domain;
  key += '\0';
  key += op;
  key += '\0';
  key += std::to_string(opset);
  const auto it = schemas_.find(key);
  if (it != schemas_.end()) return it->second;
  return schemas_.emplace(std::move(key), onnx::OpSchemaRegistry::Schema(op, opset, domain)).first->second;
}

std::optional<Value> Walker::declared_value(const std::string& name, const Scope& scope) const {
  const onnx::TypeProto* t = scope.find_declared(name);
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return std::nullopt;
  const auto dtype = dtype_from_onnx(t->tensor_type().elem_type());
  if (!dtype) return std::nullopt;
  Value v;
  v.dtype = *dtype;
  for (const auto& d : t->tensor_type().shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0) {
      v.shape.push_back(d.dim_value());
    } else if (d.has_dim_param()) {
      auto it = model_.symbols.find(d.dim_param());
      if (it == model_.symbols.end()) return std::nullopt;
      v.shape.push_back(it->second);
    } else {
      return std::nullopt;
    }
  }
  return v;
}

std::vector<int32_t> Walker::topological_order(const onnx::GraphProto& graph, const Scope& scope,
                                                const std::string& where) {
  const int n = graph.node_size();
  NameIndex producer(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto& node = graph.node(i);
    for (const auto& o : node.output()) {
      if (o.empty()) continue;
      auto [it, inserted] = producer.emplace(o, i);
      if (!inserted)
        throw InputError("tensor '" + o + "' is produced by two nodes: '" + where +
                         node_display_name(graph.node(*it), *it) + "' and '" + where +
                         node_display_name(node, i) + "'");
      if (scope.values.count(o))
        throw InputError("node '" + where + node_display_name(node, i) + "' produces '" + o +
                         "', which is already a graph input or initializer");
    }
  }
  // What a node reads: its inputs and the outer-scope names its subgraphs use, into `r` (one buffer
  // reused for every node). Views into the model, or into `owned` for names collected from subgraphs.
  std::deque<std::string> owned;
  std::vector<std::string_view> r;
  auto reads_of = [&](const onnx::NodeProto& node) -> const std::vector<std::string_view>& {
    r.clear();
    for (const auto& in : node.input())
      if (!in.empty()) r.push_back(in);
    if (has_subgraph(node)) {
      std::set<std::string> outer;
      for (const auto& a : node.attribute()) {
        if (a.has_g()) collect_outer_refs(a.g(), outer);
        for (const auto& g : a.graphs()) collect_outer_refs(g, outer);
      }
      for (const auto& name : outer) r.push_back(owned.emplace_back(name));
    }
    return r;
  };
  // Most models list their nodes in a valid order (every config.json graph does): then Kahn's algorithm below
  // would return 0, 1, ..., n-1 (node k is ready once 0..k-1 are out, and it is the lowest), so check that
  // order first and build the edges only when it fails. Reads nobody produces are refused here as below.
  bool in_order = true;
  for (int i = 0; i < n && in_order; ++i) {
    const auto& node = graph.node(i);
    for (const std::string_view name : reads_of(node)) {
      if (const int32_t* it = producer.find(name)) {
        if (*it >= i) {
          in_order = false;
          break;
        }
      } else if (!scope.find(name)) {
        throw InputError("node '" + where + node_display_name(node, i) + "' (" + node.op_type() + ") reads tensor '" +
                         std::string(name) + "', which no node, graph input or initializer produces");
      }
    }
  }
  if (in_order) {
    std::vector<int32_t> order(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    return order;
  }
  std::vector<std::vector<int32_t>> consumers(n);
  std::vector<int32_t> indegree(n, 0);
  for (int i = 0; i < n; ++i) {
    const auto& node = graph.node(i);
    for (const std::string_view name : reads_of(node)) {
      if (const int32_t* it = producer.find(name)) {
        // A node reading the same producer twice gets one edge (consumers' last entry dedups the common case).
        auto& c = consumers[*it];
        if (c.empty() || c.back() != i) {
          c.push_back(i);
          ++indegree[i];
        }
      } else if (!scope.find(name)) {
        throw InputError("node '" + where + node_display_name(node, i) + "' (" + node.op_type() + ") reads tensor '" +
                         std::string(name) + "', which no node, graph input or initializer produces");
      }
    }
  }
  // Kahn's algorithm, always taking the lowest-numbered ready node: the model's order when it is valid.
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready;
  for (int i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push(i);
  std::vector<int32_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int32_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int32_t c : consumers[i])
      if (--indegree[c] == 0) ready.push(c);
  }
  if (static_cast<int>(order.size()) == n) return order;
  // A cycle: follow unfinished producers backwards from an unfinished node until one repeats.
  int32_t at = 0;
  while (indegree[at] == 0) ++at;
  std::vector<int32_t> path;
  std::unordered_map<int32_t, size_t> seen;
  while (!seen.count(at)) {
    seen[at] = path.size();
    path.push_back(at);
    for (const std::string_view name : reads_of(graph.node(at))) {
      const int32_t* it = producer.find(name);
      if (it && indegree[*it] > 0) {
        at = *it;
        break;
      }
    }
  }
  std::string cycle;
  for (size_t k = seen[at]; k < path.size(); ++k)
    cycle += "'" + where + node_display_name(graph.node(path[k]), path[k]) + "' -> ";
  cycle += "'" + where + node_display_name(graph.node(at), at) + "'";
  throw InputError("the graph has a cycle: " + cycle);
}

void Walker::infer_node(const onnx::NodeProto& node, size_t index, Scope& scope, const std::string& where) {
  const std::string domain(normalize_domain(node.domain()));
  const int opset = opset_of(domain, node, index, where);
  std::vector<const Value*> inputs;
  inputs.reserve(node.input_size());
  for (const auto& in : node.input()) inputs.push_back(in.empty() ? nullptr : scope.find(in));
  NodeContext ctx(node, where, index, opset, std::move(inputs), *this, warnings_);

  if (!takes_sequences(domain, node.op_type()))
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      if (const Value* v = ctx.input(i); v && !v->is_tensor())
        ctx.fail("input " + std::to_string(i) + " ('" + node.input(static_cast<int>(i)) + "') is " + kind_text(*v) +
                 "; " + node.op_type() + " takes a tensor there");
  bool handled = false;
  if (const Rule rule = find_rule(domain, node.op_type())) {
    try {
      handled = rule(ctx);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // e.g. std::out_of_range from a shape of unexpected rank
      ctx.fail(std::string("invalid inputs: ") + e.what());
    }
  }
  if (!handled) {
    if (const onnx::OpSchema* schema = schema_of(node.op_type(), opset, domain)) {
      schema_fallback(ctx, *schema, memo_);
    } else if (auto fn = model_.functions.find({node.domain(), node.op_type()}); fn != model_.functions.end()) {
      infer_local_function(ctx, *fn->second);
      handled = true;
    }
  }
  // Outputs neither a rule nor ONNX could shape: the model's declared shapes, else an error.
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (!ctx.output_used(i) || ctx.outputs_set()[i]) continue;
    const std::string& out = node.output(static_cast<int>(i));
    if (auto v = declared_value(out, scope)) {
      ctx.set_output(i, std::move(*v));
      continue;
    }
    const bool known_op = handled || schema_of(node.op_type(), opset, domain) != nullptr;
    if (!known_op)
      ctx.fail("unknown op '" + (domain.empty() ? "" : domain + ".") + node.op_type() + "' (opset " +
               std::to_string(opset) + ") and the model declares no complete shape for its output '" + out +
               "' in value_info");
    ctx.fail("cannot infer the shape of output '" + out +
             "' (it may depend on input values that are not known statically); declare it in the model's value_info");
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (!ctx.output_used(i)) continue;
    const std::string& out = node.output(static_cast<int>(i));
    const Value& v = ctx.outputs()[i];
    if (v.dtype == DType::Undefined) ctx.fail("output '" + out + "' has no data type");
    // Every later stage multiplies shapes into bytes: a size past 64 bits is refused here, naming the tensor.
    if (!v.is_tensor()) checked_value_bytes(v, "value '" + out + "' (output of node '" + ctx.name() + "')");
    else if (!bytes_of(v.dtype, v.shape)) checked_bytes(v.dtype, v.shape, "tensor '" + out + "' (output of node '" + ctx.name() + "')");
  }
  // Shapes are now known to fit in 64 bits, so the evaluator's element counts cannot wrap.
  evaluate_values(node, opset, ctx.inputs(), ctx.outputs());
  for (size_t i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.output_used(i)) scope.values.insert_or_assign(node.output(static_cast<int>(i)), std::move(ctx.outputs()[i]));
}

std::vector<int32_t> Walker::walk(const onnx::GraphProto& graph, Scope& scope, const std::string& where) {
  std::vector<int32_t> order = topological_order(graph, scope, where);
  scope.values.reserve(scope.values.size() + static_cast<size_t>(graph.node_size()) * 2);
  Scope* saved = current_;
  current_ = &scope;
  for (const int32_t idx : order) infer_node(graph.node(idx), static_cast<size_t>(idx), scope, where);
  current_ = saved;
  return order;
}

}  // namespace memplan::shape
