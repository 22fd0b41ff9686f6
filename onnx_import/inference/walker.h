// The walker behind infer_shapes(): orders a graph's nodes and infers each with memplan's own rule
// (rules/) or ONNX 1.12's schema inference (schema_fallback.cc), evaluating small shape computations on
// the way (value_eval.h). Subgraph bodies and model-local functions are walked the same way with the
// enclosing scopes visible (subgraphs.cc). Internal to onnx_import/.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "onnx_import/rules/rules.h"

namespace onnx {
class FunctionProto;
class GraphProto;
class NodeProto;
class OpSchema;
class TypeProto;
}  // namespace onnx

namespace memplan::shape {

// Hashing that lets the scopes be searched by string_view without building a std::string.
struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename T>
using NameMap = std::unordered_map<std::string, T, NameHash, std::equal_to<>>;

// The values visible while inferring one graph; subgraph scopes see their outer scopes.
struct Scope {
  const Scope* parent = nullptr;
  NameMap<Value> values;
  // Types the model declares (value_info and graph outputs) for the fallback on unknown ops.
  NameMap<const onnx::TypeProto*> declared;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (auto it = s->values.find(name); it != s->values.end()) return &it->second;
    return nullptr;
  }
  const onnx::TypeProto* find_declared(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (auto it = s->declared.find(name); it != s->declared.end()) return it->second;
    return nullptr;
  }
};

struct ModelInfo {
  std::map<std::string, int64_t> opsets;     // normalized domain -> version
  std::map<std::string, int64_t> symbols;    // bound symbolic dims
  // Model-local functions (IR 8+, as PyTorch's dynamo exporter writes them): (domain, name) -> body.
  std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*> functions;
};

// schema_fallback's answers. What an inference function answers depends only on the schema, the node's
// attributes, its inputs' types and known contents and its outputs' count: the memo keeps each answer under
// those, so a graph that repeats a layer (every transformer; a mixture of experts repeats one expert 8 to 128
// times a layer) asks ONNX once per distinct node. Only answers are kept: a node that fails is inferred (and
// named in the error) every time.
struct SchemaMemo {
  std::unordered_map<std::string, std::vector<std::optional<Value>>> answers;
  std::string key;  // scratch, reused between nodes
};

class Walker final : public SubgraphRunner {
 public:
  Walker(const ModelInfo& model, std::vector<std::string>& warnings) : model_(model), warnings_(warnings) {}

  // Infers every node of `graph` into `scope` and returns the topological order it used (node indices).
  // `where` prefixes node names in messages ("Loop_3/body/" inside subgraphs).
  std::vector<int32_t> walk(const onnx::GraphProto& graph, Scope& scope, const std::string& where);
  SubgraphResult run(const onnx::GraphProto& body, const std::vector<Value>& inputs, const std::string& what) override;
  std::optional<SubgraphResult> try_run(const onnx::GraphProto& body, const std::vector<Value>& inputs,
                                        const std::string& what, std::string& error) override;
  void record_branch(const std::string& node, bool then_branch) override { branches_[node] = then_branch; }
  const std::map<std::string, bool>& branches() const { return branches_; }
  const Value* lookup(const std::string& name) const override { return current_ ? current_->find(name) : nullptr; }

 private:
  std::vector<int32_t> topological_order(const onnx::GraphProto& graph, const Scope& scope, const std::string& where);
  void infer_node(const onnx::NodeProto& node, size_t index, Scope& scope, const std::string& where);
  void infer_local_function(NodeContext& ctx, const onnx::FunctionProto& fn);
  std::optional<Value> declared_value(const std::string& name, const Scope& scope) const;
  int opset_of(const std::string& domain, const onnx::NodeProto& node, size_t index, const std::string& where) const;
  // OpSchemaRegistry::Schema, looked up once per (domain, op, opset): the registry's lookup builds strings and
  // walks two maps, for every node.
  const onnx::OpSchema* schema_of(const std::string& op, int opset, const std::string& domain);

  const ModelInfo& model_;
  std::unordered_map<std::string, const onnx::OpSchema*> schemas_;
  SchemaMemo memo_;
  std::vector<std::string>& warnings_;
  Scope* current_ = nullptr;
  int depth_ = 0;
  std::map<std::string, bool> branches_;  // If node name -> then_branch taken (record_branch)
};

// For messages: the node's name, or "<op_type>_<index>" when it has none.
std::string node_display_name(const onnx::NodeProto& node, size_t index);
// "a sequence", "a map", ...: what a non-tensor type is, for messages.
std::string_view value_kind(const onnx::TypeProto& t);

// subgraphs.cc: whether a node has a subgraph attribute (If/Loop/Scan), and the names a graph reads from
// its enclosing scopes (free variables), nested subgraphs included.
bool has_subgraph(const onnx::NodeProto& n);
void collect_outer_refs(const onnx::GraphProto& g, std::set<std::string>& out);

// schema_fallback.cc: ONNX 1.12's inference function of `schema` on the node's concrete inputs, after the
// checks that keep it from reading out of bounds; sets the outputs ONNX shapes completely.
// `memo`: see SchemaMemo.
void schema_fallback(NodeContext& ctx, const onnx::OpSchema& schema, SchemaMemo& memo);

}  // namespace memplan::shape
