#include "onnx_import/rules/node_context.h"

#include <onnx/onnx_pb.h>

#include "onnx_import/errors.h"
#include "onnx_import/rules/rules.h"
#include "onnx_import/values/values.h"

namespace memplan::shape {

NodeContext::NodeContext(const onnx::NodeProto& node, const std::string& where, size_t index, int opset,
                         std::vector<const Value*> inputs, SubgraphRunner& subgraphs,
                         std::vector<std::string>& warnings)
    : node_(node),
      where_(where),
      index_(index),
      opset_(opset),
      inputs_(std::move(inputs)),
      outputs_(static_cast<size_t>(node.output_size())),
      set_(static_cast<size_t>(node.output_size()), false),
      subgraphs_(subgraphs),
      warnings_(warnings) {}

const std::string& NodeContext::op() const { return node_.op_type(); }

std::string NodeContext::name() const {
  return where_ + (node_.name().empty() ? node_.op_type() + "_" + std::to_string(index_) : node_.name());
}

const Value& NodeContext::required(size_t i) const {
  if (!input(i)) fail("input " + std::to_string(i) + " is required but missing");
  return *inputs_[i];
}

std::optional<std::vector<int64_t>> NodeContext::input_ints(size_t i) const {
  const Value* v = input(i);
  if (!v || !v->known()) return std::nullopt;
  std::vector<int64_t> out(v->elements());
  for (size_t k = 0; k < out.size(); ++k) out[k] = int_at(*v, k);
  return out;
}

std::optional<std::vector<double>> NodeContext::input_reals(size_t i) const {
  const Value* v = input(i);
  if (!v || !v->known()) return std::nullopt;
  std::vector<double> out(v->elements());
  for (size_t k = 0; k < out.size(); ++k) out[k] = real_at(*v, k);
  return out;
}

bool NodeContext::output_used(size_t i) const {
  return i < static_cast<size_t>(node_.output_size()) && !node_.output(static_cast<int>(i)).empty();
}

void NodeContext::set_output(size_t i, DType dtype, std::vector<int64_t> shape) {
  Value v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  set_output(i, std::move(v));
}

void NodeContext::set_output(size_t i, Value v) {
  if (i >= outputs_.size()) return;  // the node lists fewer outputs than the op can produce
  for (int64_t d : v.shape)
    if (d < 0) fail("output '" + node_.output(static_cast<int>(i)) + "' would have a negative dimension");
  outputs_[i] = std::move(v);
  set_[i] = true;
}

const onnx::AttributeProto* NodeContext::attr(std::string_view name) const { return find_attribute(node_, name); }

int64_t NodeContext::attr_int(std::string_view name, int64_t def) const {
  const auto* a = attr(name);
  return a ? a->i() : def;
}

float NodeContext::attr_float(std::string_view name, float def) const {
  const auto* a = attr(name);
  return a ? a->f() : def;
}

std::string NodeContext::attr_string(std::string_view name, const std::string& def) const {
  const auto* a = attr(name);
  return a ? a->s() : def;
}

std::optional<std::vector<int64_t>> NodeContext::attr_ints(std::string_view name) const {
  const auto* a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<std::vector<float>> NodeContext::attr_floats(std::string_view name) const {
  const auto* a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<float>(a->floats().begin(), a->floats().end());
}

int64_t NodeContext::axis(int64_t axis, size_t rank) const {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + r : axis;
}

std::vector<int64_t> NodeContext::broadcast(const std::vector<std::vector<int64_t>>& shapes) const {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    const size_t off = rank - s.size();
    for (size_t a = 0; a < s.size(); ++a) {
      int64_t& o = out[off + a];
      if (s[a] == o || s[a] == 1) continue;
      if (o == 1) o = s[a];
      else fail("input shapes do not broadcast (dimension " + std::to_string(s[a]) + " against " + std::to_string(o) + ")");
    }
  }
  return out;
}

int64_t NodeContext::add(int64_t a, int64_t b) const {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail("dimension arithmetic overflows 64 bits");
  return r;
}

int64_t NodeContext::mul(int64_t a, int64_t b) const {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail("dimension arithmetic overflows 64 bits");
  return r;
}

void NodeContext::fail(const std::string& msg) const {
  throw InputError("node '" + name() + "' (" + node_.op_type() + "): " + msg);
}

void NodeContext::warn(const std::string& msg) {
  warnings_.push_back("node '" + name() + "' (" + node_.op_type() + "): " + msg);
}

const RuleTable& rule_table() {
  static const RuleTable table = [] {
    RuleTable t;
    register_core_rules(t);
    register_opset18_rules(t);
    register_new_op_rules(t);
    register_microsoft_rules(t);
    register_aten_rules(t);
    register_quantized_rules(t);
    register_control_flow_rules(t);
    register_onnx_fix_rules(t);
    register_sequence_rules(t);
    return t;
  }();
  return table;
}

}  // namespace memplan::shape
