// build_graph(): the ONNX proto plus inferred shapes -> memplan::Graph with dense ids.
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "onnx_import/errors.h"
#include "onnx_import/graph_builder.h"
#include "onnx_import/name_index.h"

#include <algorithm>

namespace memplan {
namespace {

Attribute::Type attribute_type(const onnx::AttributeProto& a) {
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::INT: return Attribute::Type::Int;
    case A::FLOAT: return Attribute::Type::Float;
    case A::STRING: return Attribute::Type::String;
    case A::INTS: return Attribute::Type::Ints;
    case A::FLOATS: return Attribute::Type::Floats;
    case A::STRINGS: return Attribute::Type::Strings;
    case A::TENSOR: case A::SPARSE_TENSOR: case A::TENSORS: case A::SPARSE_TENSORS: return Attribute::Type::Tensor;
    case A::GRAPH: case A::GRAPHS: return Attribute::Type::Graph;
    case A::UNDEFINED: break;  // IR < 2 files may omit the type: tell it from the field that is set
    default: return Attribute::Type::Other;
  }
  if (a.has_i()) return Attribute::Type::Int;
  if (a.has_f()) return Attribute::Type::Float;
  if (a.has_s()) return Attribute::Type::String;
  if (a.has_t() || a.has_sparse_tensor()) return Attribute::Type::Tensor;
  if (a.has_g()) return Attribute::Type::Graph;
  if (a.ints_size() > 0) return Attribute::Type::Ints;
  if (a.floats_size() > 0) return Attribute::Type::Floats;
  if (a.strings_size() > 0) return Attribute::Type::Strings;
  return Attribute::Type::Other;
}

Attribute convert_attribute(const onnx::AttributeProto& a) {
  Attribute out;
  out.type = attribute_type(a);
  out.i = a.i();
  out.f = a.f();
  out.s = a.s();
  out.ints.assign(a.ints().begin(), a.ints().end());
  out.floats.assign(a.floats().begin(), a.floats().end());
  out.strings.assign(a.strings().begin(), a.strings().end());
  return out;
}

class GraphBuilder {
 public:
  GraphBuilder(const onnx::ModelProto& model, const ModelOverview& overview, InferenceResult& inferred)
      : model_(model), overview_(overview), inferred_(inferred), path_(overview.model_path) {}

  Graph build() {
    const onnx::GraphProto& g = model_.graph();
    graph_.model_path = path_;
    graph_.producer = overview_.producer;
    graph_.ir_version = overview_.ir_version;
    graph_.opsets = overview_.opsets;
    graph_.bound_dims = inferred_.bound_dims;
    graph_.bound_values = inferred_.bound_values;
    graph_.warnings = overview_.warnings;
    graph_.warnings.insert(graph_.warnings.end(), inferred_.warnings.begin(), inferred_.warnings.end());

    for (const DeclaredValue& in : overview_.inputs) {
      if (ids_.contains(in.name)) throw InputError(path_ + ": graph input '" + in.name + "' is declared twice");
      graph_.inputs.push_back(add_tensor(in.name, TensorKind::Input, -1));
    }
    for (const Tensor& init : overview_.initializers) {
      const int32_t id = add_tensor(init.name, init.kind, -1);
      graph_.tensors[id].trainable = init.trainable;
      graph_.initializers.push_back(id);
    }
    size_t tensors = overview_.inputs.size() + overview_.initializers.size();
    for (const onnx::NodeProto& n : g.node()) tensors += static_cast<size_t>(n.output_size());
    graph_.tensors.reserve(tensors);
    graph_.nodes.reserve(static_cast<size_t>(g.node_size()));
    ids_.reserve(tensors);
    check_order(g.node_size());
    for (int32_t proto_index : inferred_.order) add_node(g.node(proto_index), proto_index);
    for (const onnx::ValueInfoProto& out : g.output()) add_output(out.name());
    name_nodes(g);
    record_tied_copies();
    record_hidden_size();
    return std::move(graph_);
  }

 private:
  // The ties the file records (kTiedCopyMetadataKey: "COPY=PARAMETER"), each kept only when both are initializers
  // of one dtype and the copy is the parameter's 2-D transpose; any other entry is a warning, never trusted.
  void record_tied_copies() {
    for (const onnx::StringStringEntryProto& e : model_.metadata_props()) {
      if (e.key() != kTiedCopyMetadataKey) continue;
      const size_t eq = e.value().find('=');
      const auto copy = eq == std::string::npos ? std::nullopt : graph_.find_tensor(e.value().substr(0, eq));
      const auto param = eq == std::string::npos ? std::nullopt : graph_.find_tensor(e.value().substr(eq + 1));
      const auto is_init = [&](std::optional<int32_t> t) {
        return t && graph_.tensors[*t].producer < 0 &&
               std::find(graph_.initializers.begin(), graph_.initializers.end(), *t) != graph_.initializers.end();
      };
      bool ok = is_init(copy) && is_init(param);
      if (ok) {
        const Tensor& c = graph_.tensors[*copy];
        const Tensor& p = graph_.tensors[*param];
        ok = c.dtype == p.dtype && c.shape.size() == 2 && p.shape.size() == 2 && c.shape[0] == p.shape[1] &&
             c.shape[1] == p.shape[0];
      }
      if (ok) graph_.recorded_tied_copies.emplace_back(*copy, *param);
      else graph_.warnings.push_back("metadata " + std::string(kTiedCopyMetadataKey) + " '" + e.value() +
                                     "' names no initializer transposing another: ignored");
    }
  }

  // The hidden size the file records (kHiddenSizeMetadataKey): a positive decimal integer, else a warning.
  void record_hidden_size() {
    for (const onnx::StringStringEntryProto& e : model_.metadata_props()) {
      if (e.key() != kHiddenSizeMetadataKey) continue;
      const std::string& v = e.value();
      int64_t value = 0;
      const bool digits = !v.empty() && v.size() <= 18 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits) value = std::stoll(v);
      if (value > 0) graph_.recorded_hidden_size = value;
      else graph_.warnings.push_back("metadata " + std::string(kHiddenSizeMetadataKey) + " '" + v +
                                     "' is not a positive integer: ignored");
    }
  }

  int32_t add_tensor(const std::string& name, TensorKind kind, int32_t producer) {
    const auto it = inferred_.values.find(name);
    if (it == inferred_.values.end())
      throw InternalError(path_ + ": shape inference returned no shape for tensor '" + name + "'");
    // Moved, not copied: every name comes here once (inputs exclude initializers, describe_model refuses a
    // duplicate initializer, add_node a second producer).
    InferredValue& v = it->second;
    Tensor t;
    t.name = name;
    t.dtype = v.dtype;
    t.shape = std::move(v.shape);
    t.int_value = std::move(v.int_value);
    t.real_value = std::move(v.real_value);
    t.value_type = v.value_type;
    t.element_shapes = std::move(v.element_shapes);
    t.kind = kind;
    t.producer = producer;
    if (t.dtype == DType::Undefined)
      throw InputError(path_ + ": tensor '" + name + "' has no known data type");
    t.bytes();  // a negative dim or a byte size past 64 bits is an input error naming the tensor
    const int32_t id = static_cast<int32_t>(graph_.tensors.size());
    ids_[name] = id;
    graph_.tensors.push_back(std::move(t));
    return id;
  }

  void check_order(int node_count) {
    std::vector<bool> seen(static_cast<size_t>(node_count), false);
    for (int32_t i : inferred_.order) {
      if (i < 0 || i >= node_count || seen[static_cast<size_t>(i)])
        throw InternalError(path_ + ": shape inference returned an order that is not a permutation of the nodes");
      seen[static_cast<size_t>(i)] = true;
    }
    if (inferred_.order.size() != static_cast<size_t>(node_count))
      throw InternalError(path_ + ": shape inference returned an order that misses nodes");
  }

  std::string describe(const onnx::NodeProto& node, int32_t proto_index) const {
    return "node " + (node.name().empty() ? "#" + std::to_string(proto_index) : "'" + node.name() + "'") + " (" +
           node.op_type() + ")";
  }

  // Who already defines `name`, for the duplicate-name message.
  std::string definer(int32_t id) const {
    const Tensor& t = graph_.tensors[static_cast<size_t>(id)];
    if (t.producer >= 0) {
      const int32_t proto_index = inferred_.order[static_cast<size_t>(t.producer)];
      return describe(model_.graph().node(proto_index), proto_index);
    }
    return t.kind == TensorKind::Input ? "a graph input" : "an initializer";
  }

  void add_node(const onnx::NodeProto& proto, int32_t proto_index) {
    const int32_t index = static_cast<int32_t>(graph_.nodes.size());
    Node node;
    node.op_type = proto.op_type();
    node.domain = normalize_domain(proto.domain());
    const auto opset = graph_.opsets.find(node.domain);
    node.opset = opset == graph_.opsets.end() ? 0 : static_cast<int>(opset->second);
    for (const onnx::AttributeProto& a : proto.attribute()) node.attributes[a.name()] = convert_attribute(a);

    for (const std::string& in : proto.input()) {
      if (in.empty()) {
        node.inputs.push_back(-1);
        continue;
      }
      const int32_t* it = ids_.find(in);
      if (!it)
        throw InputError(path_ + ": " + describe(proto, proto_index) + " uses tensor '" + in +
                         "', which no node, initializer or graph input produces");
      node.inputs.push_back(*it);
      graph_.tensors[static_cast<size_t>(*it)].consumers.push_back(index);
    }
    graph_.nodes.push_back(std::move(node));

    const bool is_constant = graph_.nodes.back().domain.empty() && proto.op_type() == "Constant";
    for (const std::string& out : proto.output()) {
      if (out.empty()) {
        graph_.nodes.back().outputs.push_back(-1);
        continue;
      }
      const int32_t* it = ids_.find(out);
      if (it)
        throw InputError(path_ + ": tensor '" + out + "' is defined twice: by " + definer(*it) + " and by " +
                         describe(proto, proto_index));
      const int32_t id = add_tensor(out, is_constant ? TensorKind::Constant : TensorKind::Activation, index);
      graph_.nodes.back().outputs.push_back(id);
    }
  }

  void add_output(const std::string& name) {
    const int32_t* it = ids_.find(name);
    if (!it)
      throw InputError(path_ + ": graph output '" + name + "' is produced by no node, initializer or graph input");
    Tensor& t = graph_.tensors[static_cast<size_t>(*it)];
    if (t.producer >= 0) t.kind = TensorKind::Output;  // a graph input or initializer passed through keeps its kind
    graph_.outputs.push_back(*it);
  }

  // The model's own names where it gives unique ones; "<op_type>_<index>" (index in schedule order) otherwise.
  void name_nodes(const onnx::GraphProto& g) {
    std::unordered_set<std::string_view> taken;  // views into the model and into graph_.nodes, which no longer grows
    taken.reserve(static_cast<size_t>(g.node_size()));
    for (const onnx::NodeProto& n : g.node())
      if (!n.name().empty()) taken.insert(n.name());
    std::unordered_set<std::string_view> used;
    used.reserve(graph_.nodes.size());
    for (size_t k = 0; k < graph_.nodes.size(); ++k) {
      const std::string& own = g.node(inferred_.order[k]).name();
      std::string name = own;
      if (name.empty() || used.count(name)) {
        const std::string base = (own.empty() ? graph_.nodes[k].op_type : own) + "_" + std::to_string(k);
        name = base;
        for (int suffix = 1; taken.count(name) || used.count(name); ++suffix) name = base + "_" + std::to_string(suffix);
      }
      graph_.nodes[k].name = std::move(name);
      used.insert(graph_.nodes[k].name);
    }
  }

  const onnx::ModelProto& model_;
  const ModelOverview& overview_;
  InferenceResult& inferred_;
  const std::string& path_;
  Graph graph_;
  // Tensor name -> id. The names are views into `overview_` and `model_`, which outlive the builder.
  NameIndex ids_;
};

}  // namespace

Graph build_graph(const onnx::ModelProto& model, const ModelOverview& overview, InferenceResult inferred) {
  return GraphBuilder(model, overview, inferred).build();
}

}  // namespace memplan
