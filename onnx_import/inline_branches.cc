#include "onnx_import/inline_branches.h"

#include <onnx/onnx_pb.h>

#include <set>
#include <unordered_map>
#include <unordered_set>

#include "onnx_import/inference/walker.h"

namespace memplan {
namespace {

using Renames = std::unordered_map<std::string, std::string>;

void rename(std::string* name, const Renames& r) {
  if (auto it = r.find(*name); it != r.end()) *name = it->second;
}

// Applies `r` to every value name of `g` and of the graphs nested in it (inputs, outputs, initializers,
// value_info, node inputs and outputs).
void rename_graph(onnx::GraphProto& g, const Renames& r) {
  for (auto& vi : *g.mutable_input()) rename(vi.mutable_name(), r);
  for (auto& vi : *g.mutable_output()) rename(vi.mutable_name(), r);
  for (auto& vi : *g.mutable_value_info()) rename(vi.mutable_name(), r);
  for (auto& t : *g.mutable_initializer()) rename(t.mutable_name(), r);
  for (auto& n : *g.mutable_node()) {
    for (auto& in : *n.mutable_input()) rename(&in, r);
    for (auto& out : *n.mutable_output()) rename(&out, r);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) rename_graph(*a.mutable_g(), r);
      for (auto& sub : *a.mutable_graphs()) rename_graph(sub, r);
    }
  }
}

class Inliner {
 public:
  Inliner(onnx::GraphProto& top, const std::map<std::string, bool>& taken) : top_(top), taken_(taken) {
    for (const auto& vi : top.input()) names_.insert(vi.name());
    for (const auto& t : top.initializer()) names_.insert(t.name());
    for (const auto& n : top.node())
      for (const auto& o : n.output()) names_.insert(o);
  }

  // Appends `src`'s nodes to `out`, inlining the Ifs whose branch is known. `prefix` is "" for the top level.
  void inline_nodes(const onnx::GraphProto& src, const std::string& prefix,
                    google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
    for (int i = 0; i < src.node_size(); ++i) {
      const onnx::NodeProto& n = src.node(i);
      const std::string name = prefix + shape::node_display_name(n, static_cast<size_t>(i));
      const auto it = taken_.find(name);
      const bool is_if = n.op_type() == "If" && normalize_domain(n.domain()).empty();
      const onnx::GraphProto* branch = nullptr;
      if (is_if && it != taken_.end())
        for (const auto& a : n.attribute())
          if (a.name() == (it->second ? "then_branch" : "else_branch") && a.has_g()) branch = &a.g();
      if (!branch) {
        onnx::NodeProto* copy = out.Add();
        *copy = n;
        if (!prefix.empty()) copy->set_name(name);
        continue;
      }
      inlined_ = true;
      const std::string inner = name + (it->second ? "/then_branch/" : "/else_branch/");
      onnx::GraphProto body = *branch;
      // Names the branch defines that the top level already has: prefixed, so the flat graph stays SSA.
      Renames clash;
      auto local = [&](const std::string& v) {
        if (!v.empty() && names_.count(v)) clash[v] = inner + v;
      };
      for (const auto& t : body.initializer()) local(t.name());
      for (const auto& node : body.node())
        for (const auto& o : node.output()) local(o);
      if (!clash.empty()) rename_graph(body, clash);
      for (const auto& t : body.initializer()) names_.insert(t.name());
      for (const auto& node : body.node())
        for (const auto& o : node.output()) names_.insert(o);
      for (auto& t : *body.mutable_initializer()) *top_.add_initializer() = std::move(t);
      for (auto& vi : *body.mutable_value_info()) *top_.add_value_info() = std::move(vi);
      inline_nodes(body, inner, out);
      for (int k = 0; k < n.output_size() && k < body.output_size(); ++k) {
        if (n.output(k).empty()) continue;
        onnx::NodeProto* id = out.Add();
        id->set_op_type("Identity");
        id->set_name(inner + "output_" + std::to_string(k));
        id->add_input(body.output(k).name());
        id->add_output(n.output(k));
      }
    }
  }

  bool inlined() const { return inlined_; }

 private:
  onnx::GraphProto& top_;
  const std::map<std::string, bool>& taken_;
  std::unordered_set<std::string> names_;
  bool inlined_ = false;
};

}  // namespace

bool inline_taken_branches(onnx::ModelProto& model, const std::map<std::string, bool>& taken) {
  onnx::GraphProto& g = *model.mutable_graph();
  bool any_if = false;
  for (const auto& n : g.node()) any_if = any_if || (n.op_type() == "If" && normalize_domain(n.domain()).empty());
  if (!any_if || taken.empty()) return false;
  const onnx::GraphProto original = g;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  Inliner inliner(g, taken);
  inliner.inline_nodes(original, "", nodes);
  if (!inliner.inlined()) return false;
  g.mutable_node()->Swap(&nodes);
  return true;
}

}  // namespace memplan
