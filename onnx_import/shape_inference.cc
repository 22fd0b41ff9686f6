// The walker: binds the graph inputs to the user's dimensions, orders the nodes, and infers each node with
// memplan's own rule or ONNX 1.12's schema inference, evaluating small shape computations on the way.
#include "onnx_import/shape_inference.h"

#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <string_view>
#include <memory>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "onnx_import/rules/rules.h"
#include "onnx_import/value_eval.h"

namespace memplan {
namespace {

using shape::NodeContext;
using shape::SubgraphResult;
using shape::Value;
using shape::checked_bytes;

// Subgraphs nest at most this deep (If inside Loop inside ...); deeper models are refused.
constexpr int kMaxSubgraphDepth = 32;
// The largest rank a shape input may describe (docs/limits.md). Real models stay below 10; numpy allows 64;
// this bound only keeps a hostile shape input from making ONNX's inference build billions of dimensions.
constexpr int64_t kMaxRank = 1024;
// At most this many warnings about declared shapes that differ from the inferred ones.
constexpr int kMaxMismatchWarnings = 10;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string normalize_domain(const std::string& d) { return d == "ai.onnx" ? "" : d; }
const std::string kDefaultDomain;

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

// ---------------------------------------------------------------------------------------------------
// Scopes: the values visible while inferring one graph; subgraph scopes see their outer scopes.

struct Scope {
  const Scope* parent = nullptr;
  std::unordered_map<std::string, Value> values;
  // Types the model declares (value_info and graph outputs) for the fallback on unknown ops.
  std::unordered_map<std::string, const onnx::TypeProto*> declared;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (auto it = s->values.find(name); it != s->values.end()) return &it->second;
    return nullptr;
  }
  const onnx::TypeProto* find_declared(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (auto it = s->declared.find(name); it != s->declared.end()) return it->second;
    return nullptr;
  }
};

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

// ---------------------------------------------------------------------------------------------------
// ONNX 1.12's schema inference, fed with concrete input types and the known contents of inputs.

class NoSubgraphInferencer final : public onnx::GraphInferencer {
 public:
  std::vector<const onnx::TypeProto*> doInferencing(const std::vector<const onnx::TypeProto*>&,
                                                    const std::vector<const onnx::TensorProto*>&) override {
    fail_shape_inference("subgraphs are inferred by memplan's own control-flow rules");
  }
};

void fill_type(onnx::TypeProto& t, const Value& v) {
  auto* tt = t.mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(v.dtype));
  auto* s = tt->mutable_shape();
  for (int64_t d : v.shape) s->add_dim()->set_dim_value(d);
}

// A TensorProto holding a value's known contents, in the field ONNX's ParseData reads for its dtype.
std::unique_ptr<onnx::TensorProto> tensor_of(const Value& v) {
  auto t = std::make_unique<onnx::TensorProto>();
  t->set_data_type(dtype_to_onnx(v.dtype));
  for (int64_t d : v.shape) t->add_dims(d);
  const size_t n = v.elements();
  switch (v.dtype) {
    case DType::Float32:
      for (size_t i = 0; i < n; ++i) t->add_float_data(static_cast<float>(shape::real_at(v, i)));
      break;
    case DType::Float64:
      for (size_t i = 0; i < n; ++i) t->add_double_data(shape::real_at(v, i));
      break;
    case DType::Int64:
      for (size_t i = 0; i < n; ++i) t->add_int64_data(shape::int_at(v, i));
      break;
    case DType::UInt32: case DType::UInt64:
      for (size_t i = 0; i < n; ++i) t->add_uint64_data(static_cast<uint64_t>(shape::int_at(v, i)));
      break;
    case DType::Int32: case DType::Int16: case DType::Int8: case DType::UInt16: case DType::UInt8: case DType::Bool:
      for (size_t i = 0; i < n; ++i) t->add_int32_data(static_cast<int32_t>(shape::int_at(v, i)));
      break;
    default:
      return nullptr;  // float16 and friends: no shape computation reads them
  }
  return t;
}

class SchemaContext final : public onnx::InferenceContext {
 public:
  explicit SchemaContext(const NodeContext& ctx) : ctx_(ctx) {
    const size_t n = ctx.num_inputs();
    input_types_.resize(n);
    data_.resize(n);
    symbolic_.resize(n);
    for (size_t i = 0; i < n; ++i)
      if (const Value* v = ctx.input(i)) fill_type(input_types_[i], *v);
    output_types_.resize(ctx.node().output_size());
  }

  const onnx::AttributeProto* getAttribute(const std::string& name) const override { return ctx_.attr(name); }
  size_t getNumInputs() const override { return ctx_.num_inputs(); }
  const onnx::TypeProto* getInputType(size_t i) const override {
    return i < input_types_.size() && ctx_.input(i) ? &input_types_[i] : nullptr;
  }
  const onnx::TensorProto* getInputData(size_t i) const override {
    const Value* v = ctx_.input(i);
    if (!v || !v->known()) return nullptr;
    if (!data_[i]) data_[i] = tensor_of(*v);
    return data_[i].get();
  }
  size_t getNumOutputs() const override { return output_types_.size(); }
  onnx::TypeProto* getOutputType(size_t i) override { return &output_types_.at(i); }
  onnx::GraphInferencer* getGraphAttributeInferencer(const std::string&) override { return &no_subgraphs_; }
  const onnx::SparseTensorProto* getInputSparseData(size_t) const override { return nullptr; }
  const onnx::TensorShapeProto* getSymbolicInput(size_t i) const override {
    const Value* v = ctx_.input(i);
    if (!v || !v->ints || v->shape.size() > 1) return nullptr;
    if (!symbolic_[i]) {
      symbolic_[i] = std::make_unique<onnx::TensorShapeProto>();
      for (int64_t x : *v->ints) symbolic_[i]->add_dim()->set_dim_value(x);
    }
    return symbolic_[i].get();
  }

  const onnx::TypeProto& output_type(size_t i) const { return output_types_[i]; }

 private:
  const NodeContext& ctx_;
  std::vector<onnx::TypeProto> input_types_;
  mutable std::vector<std::unique_ptr<onnx::TensorProto>> data_;
  mutable std::vector<std::unique_ptr<onnx::TensorShapeProto>> symbolic_;
  std::vector<onnx::TypeProto> output_types_;
  NoSubgraphInferencer no_subgraphs_;
};

// A fully known output type, or nullopt when ONNX left its element type, rank or any dim unknown.
std::optional<Value> concrete(const onnx::TypeProto& t, const NodeContext& ctx, size_t index) {
  if (t.value_case() != onnx::TypeProto::kTensorType && t.value_case() != onnx::TypeProto::VALUE_NOT_SET)
    ctx.fail("output '" + ctx.node().output(static_cast<int>(index)) + "' is " + std::string(value_kind(t)) +
             "; memplan analyses tensor values only");
  if (!t.has_tensor_type() || t.tensor_type().elem_type() == 0 || !t.tensor_type().has_shape()) return std::nullopt;
  Value v;
  const auto dtype = dtype_from_onnx(t.tensor_type().elem_type());
  if (!dtype) ctx.fail("output has unknown data type " + std::to_string(t.tensor_type().elem_type()));
  v.dtype = *dtype;
  for (const auto& d : t.tensor_type().shape().dim()) {
    if (!d.has_dim_value()) return std::nullopt;
    v.shape.push_back(d.dim_value());
  }
  return v;
}

// ---------------------------------------------------------------------------------------------------
// The walker.

struct ModelInfo {
  std::map<std::string, int64_t> opsets;     // normalized domain -> version
  std::map<std::string, int64_t> symbols;    // bound symbolic dims
  // Model-local functions (IR 8+, as PyTorch's dynamo exporter writes them): (domain, name) -> body.
  std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*> functions;
};

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

struct GraphWalk {
  std::vector<int32_t> order;
  std::map<int32_t, uint64_t> subgraph_peaks;
  uint64_t peak_bytes = 0;  // produced values live at once at the peak, nested bodies included
};

class Walker final : public shape::SubgraphRunner {
 public:
  Walker(const ModelInfo& model, std::vector<std::string>& warnings) : model_(model), warnings_(warnings) {}

  GraphWalk walk(const onnx::GraphProto& graph, Scope& scope, const std::string& where);
  SubgraphResult run(const onnx::GraphProto& body, const std::vector<Value>& inputs, const std::string& what) override;
  const Value* lookup(const std::string& name) const override { return current_ ? current_->find(name) : nullptr; }

 private:
  // What each node reads: its inputs and the outer-scope names its subgraphs use. Views into the model,
  // or into `owned` for names collected from subgraphs.
  struct Reads {
    std::vector<std::vector<std::string_view>> names;
    std::deque<std::string> owned;
  };
  struct NodeCost {
    uint64_t produced = 0;              // bytes of the node's outputs
    std::vector<uint64_t> output_bytes;  // per used output, in order
    uint64_t body_peak = 0;             // its subgraphs' peak (If/Loop/Scan)
  };
  std::vector<int32_t> topological_order(const onnx::GraphProto& graph, const Scope& scope, Reads& reads,
                                         const std::string& where);
  NodeCost infer_node(const onnx::NodeProto& node, size_t index, Scope& scope, const std::string& where);
  static shape::Rule find_rule(const std::string& domain, const std::string& op);
  void schema_fallback(NodeContext& ctx, const onnx::OpSchema& schema);
  void infer_local_function(NodeContext& ctx, const onnx::FunctionProto& fn);
  std::optional<Value> declared_value(const std::string& name, const Scope& scope) const;
  int opset_of(const std::string& domain, const onnx::NodeProto& node, size_t index, const std::string& where) const;

  const ModelInfo& model_;
  std::vector<std::string>& warnings_;
  Scope* current_ = nullptr;
  int depth_ = 0;
  uint64_t last_subgraph_peak_ = 0;
};

int Walker::opset_of(const std::string& domain, const onnx::NodeProto& node, size_t index, const std::string& where) const {
  if (auto it = model_.opsets.find(domain); it != model_.opsets.end()) return static_cast<int>(it->second);
  if (domain.empty())
    throw InputError("node '" + where + node_display_name(node, index) +
                     "' uses the default ONNX domain, but the model imports no version of it");
  return 1;  // a custom domain the model does not import explicitly (com.microsoft in older exports)
}

shape::Rule Walker::find_rule(const std::string& domain, const std::string& op) {
  const auto& table = shape::rule_table();
  const auto d = table.find(domain);
  if (d == table.end()) return nullptr;
  const auto r = d->second.find(op);
  return r == d->second.end() ? nullptr : r->second;
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
                                                Reads& reads, const std::string& where) {
  const int n = graph.node_size();
  std::unordered_map<std::string_view, int32_t> producer;
  producer.reserve(static_cast<size_t>(n) * 2);
  for (int i = 0; i < n; ++i) {
    const auto& node = graph.node(i);
    for (const auto& o : node.output()) {
      if (o.empty()) continue;
      auto [it, inserted] = producer.emplace(o, i);
      if (!inserted)
        throw InputError("tensor '" + o + "' is produced by two nodes: '" + where +
                         node_display_name(graph.node(it->second), it->second) + "' and '" + where +
                         node_display_name(node, i) + "'");
      if (scope.values.count(o))
        throw InputError("node '" + where + node_display_name(node, i) + "' produces '" + o +
                         "', which is already a graph input or initializer");
    }
  }
  // What each node reads: its inputs and the outer-scope names its subgraphs use.
  reads.names.assign(n, {});
  std::vector<std::vector<int32_t>> consumers(n);
  std::vector<int32_t> indegree(n, 0);
  for (int i = 0; i < n; ++i) {
    const auto& node = graph.node(i);
    auto& r = reads.names[i];
    for (const auto& in : node.input())
      if (!in.empty()) r.push_back(in);
    if (has_subgraph(node)) {
      std::set<std::string> outer;
      for (const auto& a : node.attribute()) {
        if (a.has_g()) collect_outer_refs(a.g(), outer);
        for (const auto& g : a.graphs()) collect_outer_refs(g, outer);
      }
      for (const auto& name : outer) r.push_back(reads.owned.emplace_back(name));
    }
    for (const std::string_view name : r) {
      if (auto it = producer.find(name); it != producer.end()) {
        // A node reading the same producer twice gets one edge (consumers' last entry dedups the common case).
        auto& c = consumers[it->second];
        if (c.empty() || c.back() != i) {
          c.push_back(i);
          ++indegree[i];
        }
      } else if (!scope.find(std::string(name))) {
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
    for (const std::string_view name : reads.names[at]) {
      auto it = producer.find(name);
      if (it != producer.end() && indegree[it->second] > 0) {
        at = it->second;
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

// ONNX's inference functions assume a node that passed the checker; a node with too few inputs or a
// required input left empty would make them dereference null. Such nodes are refused here instead.
void check_arity(const NodeContext& ctx, const onnx::OpSchema& schema) {
  const auto& node = ctx.node();
  if (node.input_size() < schema.min_input() || node.input_size() > schema.max_input())
    ctx.fail("has " + std::to_string(node.input_size()) + " inputs; opset " + std::to_string(schema.SinceVersion()) +
             " of the op takes " + std::to_string(schema.min_input()) + " to " + std::to_string(schema.max_input()));
  if (node.output_size() < schema.min_output() || node.output_size() > schema.max_output())
    ctx.fail("has " + std::to_string(node.output_size()) + " outputs; opset " + std::to_string(schema.SinceVersion()) +
             " of the op gives " + std::to_string(schema.min_output()) + " to " + std::to_string(schema.max_output()));
  const auto& formals = schema.inputs();
  for (int i = 0; i < node.input_size() && !formals.empty(); ++i) {
    const auto& f = formals[std::min<size_t>(static_cast<size_t>(i), formals.size() - 1)];
    if (f.GetOption() != onnx::OpSchema::Optional && node.input(i).empty())
      ctx.fail("required input " + std::to_string(i) + " ('" + f.GetName() + "') is empty");
  }
}

// ONNX 1.12's inference functions also index input dims without checking ranks: Gemm copies B.dim(1)
// and the Conv family reads the weight's dims per spatial axis of X. Inputs of the wrong rank made them
// read out of bounds (fuzz/findings/, bench/fuzz.md); such nodes are refused here instead.
void check_ranks(const NodeContext& ctx) {
  const std::string& op = ctx.node().op_type();
  // ONNX 1.12's convPoolShapeInference divides by strides (and Conv by group) unchecked: a zero or negative
  // value raised SIGFPE (fuzz/regressions/import_bytes/onnx-convpool-inference-fpe-zero-stride.onnx).
  for (const onnx::AttributeProto& a : ctx.node().attribute()) {
    if (a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape") {
      for (int64_t v : a.ints())
        if (v <= 0) ctx.fail("attribute " + a.name() + " has a value of " + std::to_string(v) + "; it must be positive");
    } else if (a.name() == "group" && a.i() <= 0) {
      ctx.fail("attribute group is " + std::to_string(a.i()) + "; it must be positive");
    }
  }
  auto rank = [&](size_t i) { return ctx.input(i) ? static_cast<int64_t>(ctx.input(i)->shape.size()) : -1; };
  // Inputs whose rank the spec fixes and whose dimensions ONNX 1.12's inference function reads unchecked
  // (SEGV on a lower rank): Gemm-6 copies B.dim(1) (fuzz/regressions/import_bytes/onnx-gemm6-...),
  // STFT-17 signal.dim(1) (fuzz/regressions/import_bytes/onnx-stft17-inference-segv-rank1-signal.onnx),
  // RNN/GRU/LSTM X.dim(1) (found by tests/reliability/schema_rank_sweep_test.cc).
  struct FixedRank {
    const char* op;
    size_t input;
    int64_t rank;
    const char* name;
  };
  static constexpr FixedRank kFixedRanks[] = {
      {"Gemm", 0, 2, "A"}, {"Gemm", 1, 2, "B"},          //
      {"RNN", 0, 3, "X"},  {"RNN", 1, 3, "W"},  {"RNN", 2, 3, "R"},  //
      {"GRU", 0, 3, "X"},  {"GRU", 1, 3, "W"},  {"GRU", 2, 3, "R"},  //
      {"LSTM", 0, 3, "X"}, {"LSTM", 1, 3, "W"}, {"LSTM", 2, 3, "R"},  //
      {"STFT", 0, 3, "signal"},
  };
  for (const FixedRank& f : kFixedRanks)
    if (op == f.op && rank(f.input) >= 0 && rank(f.input) != f.rank)
      ctx.fail("input " + std::to_string(f.input) + " (" + f.name + ") has rank " + std::to_string(rank(f.input)) +
               "; " + op + " takes a " + std::to_string(f.rank) + "-D " + f.name);
  // A 1-D shape input whose values are unknown gives ONNX's inference the output rank from its length alone:
  // a [2^31] shape input made ConstantOfShape-9 and Expand build a 2^31-dimension shape, 20 GB
  // (fuzz/regressions/analysis_mutate/onnx-constantofshape-inference-oom-2e31-element-shape.onnx).
  static constexpr std::pair<const char*, size_t> kShapeInputs[] = {
      {"ConstantOfShape", 0}, {"Expand", 1}, {"Reshape", 1}};
  for (const auto& [shape_op, i] : kShapeInputs)
    if (op == shape_op && rank(i) == 1 && ctx.input(i)->shape[0] > kMaxRank)
      ctx.fail("input " + std::to_string(i) + " is a shape of " + std::to_string(ctx.input(i)->shape[0]) +
               " dimensions; memplan handles tensors of rank up to " + std::to_string(kMaxRank));
  // GatherND-12/13 index the data shape by batch_dims unchecked: a negative value was a SEGV
  // (schema_rank_sweep_test). The spec requires 0 <= batch_dims < min(rank(data), rank(indices)).
  if (op == "GatherND" && rank(0) >= 0 && rank(1) >= 0)
    for (const onnx::AttributeProto& a : ctx.node().attribute())
      if (a.name() == "batch_dims" && (a.i() < 0 || a.i() >= std::min(rank(0), rank(1))))
        ctx.fail("attribute batch_dims is " + std::to_string(a.i()) + "; it must be at least 0 and below " +
                 std::to_string(std::min(rank(0), rank(1))) + ", the smaller of the data and indices ranks");
  size_t x = 0, w = 1;
  if (op == "QLinearConv") w = 3;
  else if (op != "Conv" && op != "ConvTranspose" && op != "ConvInteger") return;
  if (rank(x) >= 0 && rank(w) >= 0 && rank(x) != rank(w))
    ctx.fail("input has rank " + std::to_string(rank(x)) + " but the weight has rank " + std::to_string(rank(w)) +
             "; " + op + " needs them equal");
}

void Walker::schema_fallback(NodeContext& ctx, const onnx::OpSchema& schema) {
  check_arity(ctx, schema);
  check_ranks(ctx);
  SchemaContext sc(ctx);
  try {
    schema.GetTypeAndShapeInferenceFunction()(sc);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto pos = msg.find("\n"); pos != std::string::npos) msg.resize(pos);
    ctx.fail("shape inference failed: " + msg);
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.output_used(i))
      if (auto v = concrete(sc.output_type(i), ctx, i)) ctx.set_output(i, std::move(*v));
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

Walker::NodeCost Walker::infer_node(const onnx::NodeProto& node, size_t index, Scope& scope, const std::string& where) {
  const std::string& domain = node.domain() == "ai.onnx" ? kDefaultDomain : node.domain();
  const int opset = opset_of(domain, node, index, where);
  std::vector<const Value*> inputs;
  inputs.reserve(node.input_size());
  for (const auto& in : node.input()) inputs.push_back(in.empty() ? nullptr : scope.find(in));
  NodeContext ctx(node, where, index, opset, std::move(inputs), *this, warnings_);

  last_subgraph_peak_ = 0;
  bool handled = false;
  if (const shape::Rule rule = find_rule(domain, node.op_type())) {
    try {
      handled = rule(ctx);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // e.g. std::out_of_range from a shape of unexpected rank
      ctx.fail(std::string("invalid inputs: ") + e.what());
    }
  }
  if (!handled) {
    if (const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), opset, domain)) {
      schema_fallback(ctx, *schema);
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
    const bool known_op = handled || onnx::OpSchemaRegistry::Schema(node.op_type(), opset, domain) != nullptr;
    if (!known_op)
      ctx.fail("unknown op '" + (domain.empty() ? "" : domain + ".") + node.op_type() + "' (opset " +
               std::to_string(opset) + ") and the model declares no complete shape for its output '" + out +
               "' in value_info");
    ctx.fail("cannot infer the shape of output '" + out +
             "' (it may depend on input values that are not known statically); declare it in the model's value_info");
  }
  NodeCost cost;
  cost.body_peak = last_subgraph_peak_;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (!ctx.output_used(i)) continue;
    const std::string& out = node.output(static_cast<int>(i));
    const Value& v = ctx.outputs()[i];
    if (v.dtype == DType::Undefined) ctx.fail("output '" + out + "' has no data type");
    const auto bytes = shape::bytes_of(v.dtype, v.shape);
    if (!bytes) checked_bytes(v.dtype, v.shape, "tensor '" + out + "' (output of node '" + ctx.name() + "')");
    cost.output_bytes.push_back(*bytes);
    cost.produced = checked_add(cost.produced, *bytes);
  }
  // Shapes are now known to fit in 64 bits, so the evaluator's element counts cannot wrap.
  shape::evaluate_values(node, opset, ctx.inputs(), ctx.outputs());
  for (size_t i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.output_used(i)) scope.values.insert_or_assign(node.output(static_cast<int>(i)), std::move(ctx.outputs()[i]));
  return cost;
}

GraphWalk Walker::walk(const onnx::GraphProto& graph, Scope& scope, const std::string& where) {
  GraphWalk result;
  Reads reads;
  result.order = topological_order(graph, scope, reads, where);
  scope.values.reserve(scope.values.size() + static_cast<size_t>(graph.node_size()) * 2);

  // Liveness within this graph: a produced value is live from its producer to its last reader.
  const size_t steps = result.order.size();
  std::unordered_map<std::string_view, size_t> last_read;
  last_read.reserve(static_cast<size_t>(graph.node_size()) * 2);
  for (size_t step = 0; step < steps; ++step)
    for (const std::string_view name : reads.names[result.order[step]]) last_read[name] = step;
  for (const auto& o : graph.output()) last_read[o.name()] = steps;
  std::vector<uint64_t> freed_after(steps + 1, 0);

  Scope* saved = current_;
  current_ = &scope;
  uint64_t live = 0;
  for (size_t step = 0; step < steps; ++step) {
    const int32_t idx = result.order[step];
    const auto& node = graph.node(idx);
    const NodeCost cost = infer_node(node, static_cast<size_t>(idx), scope, where);
    if (has_subgraph(node)) result.subgraph_peaks[idx] = cost.body_peak;
    size_t k = 0;
    for (const auto& o : node.output()) {
      if (o.empty()) continue;
      auto it = last_read.find(o);
      freed_after[it == last_read.end() ? step : it->second] += cost.output_bytes[k++];
    }
    live = checked_add(live, cost.produced);
    result.peak_bytes = std::max(result.peak_bytes, checked_add(live, cost.body_peak));
    live -= freed_after[step];
  }
  current_ = saved;
  return result;
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
    scope.values[init.name()] = shape::value_from_tensor(init, "initializer '" + init.name() + "' of " + what);
  for (int i = 0; i < body.input_size(); ++i) scope.values[body.input(i).name()] = inputs[i];

  ++depth_;
  Scope* saved = current_;
  GraphWalk walk;
  try {
    walk = this->walk(body, scope, what + "/");
  } catch (...) {
    --depth_;
    current_ = saved;
    throw;
  }
  --depth_;
  SubgraphResult result;
  result.peak_bytes = walk.peak_bytes;
  for (const auto& o : body.output()) {
    const Value* v = scope.find(o.name());
    if (!v) throw InputError(what + ": body output '" + o.name() + "' is produced by no node");
    result.outputs.push_back(*v);
  }
  last_subgraph_peak_ = std::max(last_subgraph_peak_, result.peak_bytes);
  return result;
}

// ---------------------------------------------------------------------------------------------------
// Binding the graph inputs to the user's dimensions.

class InputBinder {
 public:
  InputBinder(const onnx::GraphProto& graph, const Bindings& b) : graph_(graph), b_(b) {}

  // Shapes every graph input that is not an initializer; throws one InputError listing every unbound dim.
  std::map<std::string, Value> bind(std::map<std::string, int64_t>& symbols);

 private:
  Value bind_one(const onnx::ValueInfoProto& vi, std::map<std::string, int64_t>& symbols);
  void check_flags(const std::set<std::string>& initializers) const;
  void bind_symbol(const std::string& symbol, int64_t value, const std::string& input, std::map<std::string, int64_t>& symbols);

  const onnx::GraphProto& graph_;
  const Bindings& b_;
  std::vector<std::string> unbound_;
};

void InputBinder::check_flags(const std::set<std::string>& initializers) const {
  std::set<std::string> symbols, inputs;
  auto add_symbols = [&](const onnx::ValueInfoProto& vi) {
    if (!vi.type().has_tensor_type()) return;
    for (const auto& d : vi.type().tensor_type().shape().dim())
      if (d.has_dim_param()) symbols.insert(d.dim_param());
  };
  for (const auto& vi : graph_.input()) {
    add_symbols(vi);
    if (!initializers.count(vi.name())) inputs.insert(vi.name());
  }
  for (const auto& vi : graph_.output()) add_symbols(vi);
  for (const auto& vi : graph_.value_info()) add_symbols(vi);
  for (const auto& [name, value] : b_.dims) {
    if (!symbols.count(name)) {
      std::string known;
      for (const auto& s : symbols) known += (known.empty() ? "" : ", ") + s;
      throw InputError("--dim " + name + ": the model has no symbolic dimension named '" + name + "'" +
                       (known.empty() ? std::string(" (it has none)") : " (it has: " + known + ")"));
    }
    if (value < 0) throw InputError("--dim " + name + "=" + std::to_string(value) + ": a dimension cannot be negative");
  }
  for (const auto& [name, shape] : b_.input_shapes) {
    if (!inputs.count(name)) {
      std::string known;
      for (const auto& s : inputs) known += (known.empty() ? "" : ", ") + s;
      throw InputError("--input " + name + ": the model has no graph input named '" + name + "' (inputs: " + known + ")");
    }
    for (int64_t d : shape)
      if (d < 0) throw InputError("--input " + name + ": a dimension cannot be negative");
  }
  if (b_.batch && *b_.batch < 1) throw InputError("--batch " + std::to_string(*b_.batch) + ": the batch size must be at least 1");
}

void InputBinder::bind_symbol(const std::string& symbol, int64_t value, const std::string& input,
                              std::map<std::string, int64_t>& symbols) {
  auto [it, inserted] = symbols.emplace(symbol, value);
  if (!inserted && it->second != value)
    throw InputError("--input " + input + " sets dimension '" + symbol + "' to " + std::to_string(value) +
                     ", but it is already " + std::to_string(it->second));
}

Value InputBinder::bind_one(const onnx::ValueInfoProto& vi, std::map<std::string, int64_t>& symbols) {
  const std::string& name = vi.name();
  const auto& type = vi.type();
  if (!type.has_tensor_type())
    throw InputError("graph input '" + name + "' is " + std::string(value_kind(type)) + "; memplan analyses tensor inputs only");
  Value v;
  const auto dtype = dtype_from_onnx(type.tensor_type().elem_type());
  if (!dtype)
    throw InputError("graph input '" + name + "' has unknown data type " + std::to_string(type.tensor_type().elem_type()));
  v.dtype = *dtype;
  const bool has_shape = type.tensor_type().has_shape();
  const auto& dims = type.tensor_type().shape().dim();

  if (auto it = b_.input_shapes.find(name); it != b_.input_shapes.end()) {
    v.shape = it->second;
    if (has_shape && dims.size() != static_cast<int>(v.shape.size()))
      throw InputError("--input " + name + " gives " + std::to_string(v.shape.size()) + " dimensions, but the model declares " +
                       std::to_string(dims.size()));
    for (int a = 0; has_shape && a < dims.size(); ++a) {
      if (dims[a].has_dim_value() && dims[a].dim_value() != v.shape[a])
        throw InputError("--input " + name + " gives " + std::to_string(v.shape[a]) + " at axis " + std::to_string(a) +
                         ", but the model fixes it to " + std::to_string(dims[a].dim_value()));
      if (dims[a].has_dim_param()) bind_symbol(dims[a].dim_param(), v.shape[a], name, symbols);
    }
    return v;
  }
  if (!has_shape) {
    unbound_.push_back("input '" + name + "' has no declared shape (bind it with --input " + name + "=DxDx...)");
    return v;
  }
  for (int a = 0; a < dims.size(); ++a) {
    const auto& d = dims[a];
    if (d.has_dim_value()) {
      if (d.dim_value() < 0)
        throw InputError("graph input '" + name + "' has a negative dimension (" + std::to_string(d.dim_value()) +
                         ") at axis " + std::to_string(a));
      v.shape.push_back(d.dim_value());
      continue;
    }
    if (d.has_dim_param()) {
      if (auto it = symbols.find(d.dim_param()); it != symbols.end()) {
        v.shape.push_back(it->second);
        continue;
      }
      unbound_.push_back("input '" + name + "' axis " + std::to_string(a) + " ('" + d.dim_param() + "'): bind it with --dim " +
                         d.dim_param() + "=N" + (a == 0 ? " or --batch N" : "") + " or --input " + name + "=...");
    } else if (a == 0 && b_.batch) {
      v.shape.push_back(*b_.batch);
      continue;
    } else {
      unbound_.push_back("input '" + name + "' axis " + std::to_string(a) + " (unnamed): bind it with " +
                         (a == 0 ? std::string("--batch N or ") : std::string()) + "--input " + name + "=...");
    }
    v.shape.push_back(0);
  }
  return v;
}

std::map<std::string, Value> InputBinder::bind(std::map<std::string, int64_t>& symbols) {
  std::set<std::string> initializers;
  for (const auto& i : graph_.initializer()) initializers.insert(i.name());
  for (const auto& i : graph_.sparse_initializer()) initializers.insert(i.values().name());
  check_flags(initializers);
  symbols.insert(b_.dims.begin(), b_.dims.end());
  // --batch names the leading symbolic dim of each input that --dim leaves free.
  if (b_.batch)
    for (const auto& vi : graph_.input()) {
      if (initializers.count(vi.name()) || b_.input_shapes.count(vi.name()) || !vi.type().has_tensor_type()) continue;
      const auto& dims = vi.type().tensor_type().shape().dim();
      if (!dims.empty() && dims[0].has_dim_param()) symbols.emplace(dims[0].dim_param(), *b_.batch);
    }
  // Whole shapes given with --input may name symbols the other inputs share: bind those first.
  std::map<std::string, Value> values;
  for (const auto& vi : graph_.input())
    if (!initializers.count(vi.name()) && b_.input_shapes.count(vi.name())) values[vi.name()] = bind_one(vi, symbols);
  for (const auto& vi : graph_.input())
    if (!initializers.count(vi.name()) && !b_.input_shapes.count(vi.name())) values[vi.name()] = bind_one(vi, symbols);
  if (!unbound_.empty()) {
    std::string msg = "unbound dimension" + std::string(unbound_.size() > 1 ? "s" : "") + ":";
    for (const auto& u : unbound_) msg += "\n  " + u;
    throw InputError(msg);
  }
  return values;
}

void warn_declared_mismatches(const onnx::GraphProto& graph, const Scope& scope, const ModelInfo& model,
                              std::vector<std::string>& warnings) {
  int count = 0;
  for (const auto& o : graph.output()) {
    if (!o.type().has_tensor_type() || !o.type().tensor_type().has_shape()) continue;
    const Value* v = scope.find(o.name());
    if (!v) continue;
    const auto& dims = o.type().tensor_type().shape().dim();
    bool differs = dims.size() != static_cast<int>(v->shape.size());
    for (int a = 0; !differs && a < dims.size(); ++a) {
      if (dims[a].has_dim_value()) differs = dims[a].dim_value() != v->shape[a];
      else if (dims[a].has_dim_param())
        if (auto it = model.symbols.find(dims[a].dim_param()); it != model.symbols.end()) differs = it->second != v->shape[a];
    }
    if (differs && count++ < kMaxMismatchWarnings)
      warnings.push_back("graph output '" + o.name() + "': inferred shape " + shape_str(v->shape) +
                         " differs from the shape the model declares");
  }
}

}  // namespace

InferenceResult infer_shapes(const onnx::ModelProto& model, const Bindings& bindings) {
  InferenceResult result;
  ModelInfo info;
  for (const auto& op : model.opset_import()) info.opsets[normalize_domain(op.domain())] = op.version();
  for (const auto& fn : model.functions()) info.functions[{fn.domain(), fn.name()}] = &fn;
  const onnx::GraphProto& graph = model.graph();

  Scope scope;
  for (const auto& vi : graph.value_info()) scope.declared[vi.name()] = &vi.type();
  for (const auto& vi : graph.output()) scope.declared[vi.name()] = &vi.type();
  InputBinder binder(graph, bindings);
  for (auto& [name, v] : binder.bind(info.symbols)) {
    checked_bytes(v.dtype, v.shape, "graph input '" + name + "'");
    scope.values[name] = std::move(v);
  }
  for (const auto& init : graph.initializer())
    scope.values[init.name()] = shape::value_from_tensor(init, "initializer '" + init.name() + "'");
  for (const auto& sp : graph.sparse_initializer()) {
    Value v = shape::value_from_tensor(sp.values(), "sparse initializer '" + sp.values().name() + "'");
    v.shape.assign(sp.dims().begin(), sp.dims().end());
    v.ints.reset(), v.reals.reset();
    checked_bytes(v.dtype, v.shape, "sparse initializer '" + sp.values().name() + "'");
    scope.values[sp.values().name()] = std::move(v);
  }

  Walker walker(info, result.warnings);
  GraphWalk walk = walker.walk(graph, scope, "");
  for (const auto& o : graph.output())
    if (!scope.find(o.name())) throw InputError("graph output '" + o.name() + "' is produced by no node");
  warn_declared_mismatches(graph, scope, info, result.warnings);

  result.order = std::move(walk.order);
  result.subgraph_peak_bytes = std::move(walk.subgraph_peaks);
  result.bound_dims = info.symbols;
  for (auto& [name, v] : scope.values) {
    InferredValue out;
    out.dtype = v.dtype;
    out.shape = std::move(v.shape);
    if (v.ints) out.int_value = std::move(v.ints);
    result.values.emplace(name, std::move(out));
  }
  return result;
}

}  // namespace memplan
