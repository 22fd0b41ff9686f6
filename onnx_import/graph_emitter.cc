#include "onnx_import/graph_emitter.h"

#include <string>

#include "onnx_import/errors.h"
#include "onnx_import/name_index.h"

namespace memplan {

using onnx::AttributeProto;
using onnx::TensorProto;

GraphEmitter::~GraphEmitter() {
  if (!arena_)
    for (Pending& p : nodes_) delete p.node;  // finish() leaves nullptr where the graph took the node
}

std::string GraphEmitter::op(const std::string& type, std::vector<std::string> inputs, int outputs) {
  Pending p;
  p.node = google::protobuf::Arena::CreateMessage<onnx::NodeProto>(arena_);
  p.node->set_op_type(type);
  p.scope = scope;
  for (auto& in : inputs) p.node->add_input(std::move(in));
  for (int k = 0; k < outputs; ++k) p.node->add_output("$" + std::to_string(next_value_++));
  nodes_.push_back(std::move(p));
  return nodes_.back().node->output(0);
}

GraphEmitter& GraphEmitter::ints(const std::string& name, const std::vector<int64_t>& values) {
  AttributeProto* a = last().add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
  return *this;
}

GraphEmitter& GraphEmitter::i(const std::string& name, int64_t value) {
  AttributeProto* a = last().add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::INT);
  a->set_i(value);
  return *this;
}

GraphEmitter& GraphEmitter::s(const std::string& name, const std::string& value) {
  AttributeProto* a = last().add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::STRING);
  a->set_s(value);
  return *this;
}

GraphEmitter& GraphEmitter::aten(const std::string& op) {
  last().set_op_type("ATen");
  last().set_domain("org.pytorch.aten");
  return s("operator", op).s("overload_name", "");
}

void GraphEmitter::unused_value() {
  op("Constant", {});
  nodes_.back().removed = true;
}

GraphEmitter& GraphEmitter::f(const std::string& name, float value) {
  AttributeProto* a = last().add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::FLOAT);
  a->set_f(value);
  return *this;
}

GraphEmitter& GraphEmitter::tensor(const std::string& name, int type, const std::vector<int64_t>& dims,
                                   const void* data, size_t bytes) {
  AttributeProto* a = last().add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::TENSOR);
  TensorProto* t = a->mutable_t();
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::string(static_cast<const char*>(data), bytes));  // little-endian raw bytes, as torch writes
  return *this;
}

std::string GraphEmitter::const_i64(std::vector<int64_t> values, bool scalar) {
  const std::string out = op("Constant", {});
  std::vector<int64_t> dims;
  if (!scalar) dims.push_back(int64_t(values.size()));
  tensor("value", TensorProto::INT64, dims, values.data(), values.size() * sizeof(int64_t));
  return out;
}

std::string GraphEmitter::const_f32(std::vector<float> values, std::vector<int64_t> dims) {
  const std::string out = op("Constant", {});
  tensor("value", TensorProto::FLOAT, dims, values.data(), values.size() * sizeof(float));
  return out;
}

void GraphEmitter::note(int64_t value) {
  if (pool_.count(value)) return;
  const_i64({value}, true);
  nodes_.back().used = false;
  pool_[value] = nodes_.size() - 1;
}

std::string GraphEmitter::pooled(int64_t value) {
  note(value);
  Pending& p = nodes_[pool_.at(value)];
  p.used = true;
  return p.node->output(0);
}

void GraphEmitter::note_list(const std::vector<int64_t>& values) {
  if (list_pool_.count(values)) return;
  const_i64(values, false);
  nodes_.back().used = false;
  nodes_.back().unscoped = true;
  list_pool_[values] = nodes_.size() - 1;
}

std::string GraphEmitter::pooled_list(const std::vector<int64_t>& values, const std::string& reader) {
  note_list(values);
  Pending& p = nodes_[list_pool_.at(values)];
  p.used = true;
  p.reader = reader;
  return p.node->output(0);
}

std::string GraphEmitter::size_list(const std::vector<std::string>& elements) {
  std::vector<std::string> parts;
  for (const std::string& e : elements) {
    const std::string axes = const_i64({0}, false);
    nodes_.back().unscoped = true;
    parts.push_back(op("Unsqueeze", {e, axes}));
  }
  const std::string out = op("Concat", parts);
  i("axis", 0);
  return out;
}

void GraphEmitter::finish(onnx::GraphProto& graph, int64_t values_before_nodes,
                          const std::map<std::string, std::string>& fixed, bool fold) {
  Names names(next_value_);
  for (const auto& [value, name] : fixed) names.emplace(value, name);
  int64_t number = values_before_nodes;
  for (Pending& p : nodes_)  // the JIT numbers every output of a node (TopK has two)
    if (p.used) p.value_number = number, number += p.node->output_size();
  if (fold) fold_constants(graph, number, names);
  // "<scope>/<Op>" -> the nodes so named so far; the key a view into the first such node's name.
  NameIndex counters(nodes_.size());
  int index = 0;
  std::string key;
  for (Pending& p : nodes_) {
    if (!p.used || p.removed) continue;
    onnx::NodeProto& n = *p.node;
    if (p.unscoped) {
      n.set_name("Constant_" + std::to_string(index));
      names.emplace(n.output(0), "onnx::" + p.reader + "_" + std::to_string(p.value_number));
    } else {
      key.assign(p.scope).append("/").append(n.op_type());
      if (int32_t* k = counters.find(key)) {
        n.set_name(key + "_" + std::to_string((*k)++));
      } else {
        n.set_name(key);
        counters.emplace(n.name(), 1);
      }
      for (int o = 0; o < n.output_size(); ++o) names.emplace(n.output(o), n.name() + "_output_" + std::to_string(o));
    }
    ++index;
  }
  graph.mutable_node()->Reserve(graph.node_size() + int(nodes_.size()));
  for (Pending& p : nodes_) {
    if (!p.used || p.removed) continue;
    for (auto& v : *p.node->mutable_input())
      if (const std::string* final_name = names.find(v)) v = *final_name;
    for (auto& v : *p.node->mutable_output())
      if (const std::string* final_name = names.find(v)) v = *final_name;
    // The graph's arena is the nodes' (the constructor's): AddAllocated takes the node itself, no copy.
    graph.mutable_node()->AddAllocated(p.node);
    p.node = nullptr;
  }
}

}  // namespace memplan
