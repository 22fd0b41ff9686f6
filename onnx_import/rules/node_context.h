// What a per-op shape rule sees of one node: its inputs' inferred values, its attributes, and where to put
// its outputs. Rules live in onnx_import/rules/*.cc and are listed in rules.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "onnx_import/value_eval.h"

namespace onnx {
class AttributeProto;
class GraphProto;
}  // namespace onnx

namespace memplan::shape {

// The walker as rules see it: runs a subgraph (If/Loop/Scan body) with the current scope visible as its outer scope.
struct SubgraphResult {
  std::vector<Value> outputs;
};

class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  // Binds the body's formal inputs, in order, to `inputs` and infers the body.
  virtual SubgraphResult run(const onnx::GraphProto& body, const std::vector<Value>& inputs,
                             const std::string& what) = 0;
  // run(), but a body that cannot be shaped (an InputError) returns nullopt with the reason in `error`, and
  // the warnings it emitted on the way are dropped: for If branches that may never run at these inputs.
  virtual std::optional<SubgraphResult> try_run(const onnx::GraphProto& body, const std::vector<Value>& inputs,
                                                const std::string& what, std::string& error) = 0;
  // Records which branch an If took (known condition) or was assumed to take: `node` is its name as messages
  // give it ("if_16k/else_branch/if_8k"); the importer inlines that branch so the cost models cost it.
  virtual void record_branch(const std::string& node, bool then_branch) = 0;
  // A value visible in the current scope by name (outer scopes included), or nullptr.
  virtual const Value* lookup(const std::string& name) const = 0;
};

class NodeContext {
 public:
  // `where` prefixes the node's name in messages ("Loop_3/body/" inside subgraphs); `index` is the node's
  // position in its graph, which names nodes without a name ("<op_type>_<index>").
  NodeContext(const onnx::NodeProto& node, const std::string& where, size_t index, int opset,
              std::vector<const Value*> inputs, SubgraphRunner& subgraphs, std::vector<std::string>& warnings);

  const onnx::NodeProto& node() const { return node_; }
  std::string name() const;  // for messages: where + the node's name, or where + "<op_type>_<index>"
  const std::string& op() const;
  int opset() const { return opset_; }

  // Inputs as the node lists them; nullptr where an optional input is omitted or absent.
  size_t num_inputs() const { return inputs_.size(); }
  const Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  const Value& required(size_t i) const;  // throws InputError naming the node when missing
  const std::vector<const Value*>& inputs() const { return inputs_; }
  // The input's known integer contents, or nullopt (missing input or unknown contents).
  std::optional<std::vector<int64_t>> input_ints(size_t i) const;
  std::optional<std::vector<double>> input_reals(size_t i) const;

  size_t num_outputs() const { return outputs_.size(); }
  bool output_used(size_t i) const;  // false for an omitted (empty-named) optional output
  void set_output(size_t i, DType dtype, std::vector<int64_t> shape);
  void set_output(size_t i, Value v);
  std::vector<Value>& outputs() { return outputs_; }
  std::vector<bool>& outputs_set() { return set_; }

  const onnx::AttributeProto* attr(std::string_view name) const;
  int64_t attr_int(std::string_view name, int64_t def) const;
  float attr_float(std::string_view name, float def) const;
  std::string attr_string(std::string_view name, const std::string& def) const;
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name) const;
  std::optional<std::vector<float>> attr_floats(std::string_view name) const;

  // Normalizes a possibly negative axis for a tensor of `rank`; fails naming the node when out of range.
  int64_t axis(int64_t axis, size_t rank) const;
  // numpy broadcasting of the given shapes; fails naming the node when they do not broadcast.
  std::vector<int64_t> broadcast(const std::vector<std::vector<int64_t>>& shapes) const;

  // Dimension arithmetic on values from the model, failing naming the node instead of overflowing.
  int64_t add(int64_t a, int64_t b) const;
  int64_t mul(int64_t a, int64_t b) const;

  [[noreturn]] void fail(const std::string& msg) const;
  void warn(const std::string& msg);
  SubgraphRunner& subgraphs() { return subgraphs_; }

 private:
  const onnx::NodeProto& node_;
  const std::string& where_;
  size_t index_;
  int opset_;
  std::vector<const Value*> inputs_;
  std::vector<Value> outputs_;
  std::vector<bool> set_;
  SubgraphRunner& subgraphs_;
  std::vector<std::string>& warnings_;
};

}  // namespace memplan::shape
