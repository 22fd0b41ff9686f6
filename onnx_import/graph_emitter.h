// Writes an ONNX graph the way torch.onnx.export (torch 1.13) writes a traced module: nodes in trace order, the
// module's Python ints pooled, optional constant folding, and torch's names. Internal to the config.json graphs
// (onnx_import/llama_graph.cc).
//
// Names, as torch/onnx/utils.py leaves them (_jit_pass_onnx_assign_scoped_names_for_node_and_value after the
// passes): a node in a module scope is "<scope>/<Op>", then "<scope>/<Op>_1", ... per scope and op type, its
// outputs "<node>_output_<i>". The Constants the exporter adds for the axes of a size list's Unsqueeze have no
// scope: "Constant_<node index>", output "onnx::Unsqueeze_<JIT value number>", the value's number in the graph
// before constant folding (graph inputs, then parameters, then one per node in order). Constant folding
// (torch/csrc/jit/passes/onnx/constant_fold.cpp, do_constant_folding=True) turns a node whose inputs are all
// constant into a Constant (Unsqueeze of a pooled int, or its Reshape to [1]: a 1-D Constant in the node's scope) or,
// for a parameter's Transpose (or a parameter plus a scalar: Gemma's RMSNorm 1 + weight), a new initializer named
// after its reader, "onnx::MatMul_<number>" ("onnx::Mul_<number>"), numbered on from the last
// unfolded value in node order; constants and parameters nobody reads any more are dropped.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <google/protobuf/arena.h>

#include "onnx/onnx_pb.h"

namespace memplan {

class GraphEmitter {
 public:
  // Nodes are made on `arena` (the model's: finish() then hands them to the graph without a copy; nullptr: the
  // heap, and finish() hands them over the same way).
  explicit GraphEmitter(google::protobuf::Arena* arena) : arena_(arena) {}
  GraphEmitter(const GraphEmitter&) = delete;
  GraphEmitter& operator=(const GraphEmitter&) = delete;
  ~GraphEmitter();

  std::string scope;  // the module scope new nodes go in ("" = the top module)

  // One node; returns its first output (a placeholder name, final after finish()).
  std::string op(const std::string& type, std::vector<std::string> inputs, int outputs = 1);
  // The k-th output of the node made last (TopK's indices, Split's second part).
  std::string output(int k) const { return nodes_.back().node->output(k); }
  GraphEmitter& ints(const std::string& name, const std::vector<int64_t>& values);
  GraphEmitter& i(const std::string& name, int64_t value);
  GraphEmitter& f(const std::string& name, float value);
  GraphEmitter& s(const std::string& name, const std::string& value);
  // Makes the node made last torch.onnx's ATen fallback (operator_export_type ONNX_ATEN_FALLBACK) of aten::`op`:
  // op type "ATen" in domain "org.pytorch.aten", attributes operator = op and overload_name = "" (as
  // torch/testing/_internal/common_utils.py assertAtenOp reads an exported graph's fallback nodes; ONNX's own
  // schema, docs/Operators.md org.pytorch.aten ATen-1: variadic inputs and outputs, operator required).
  GraphEmitter& aten(const std::string& op);
  // A value the JIT numbers but the ONNX graph never holds: symbolic_opset9.py unused(), an omitted optional input
  // (clamp_max's Clip min), written "" where read.
  void unused_value();
  GraphEmitter& tensor(const std::string& name, int type, const std::vector<int64_t>& dims, const void* data,
                       size_t bytes);
  std::string const_i64(std::vector<int64_t> values, bool scalar);
  std::string const_f32(std::vector<float> values, std::vector<int64_t> dims);

  // A Python int of the module's code, traced as a prim::Constant: the JIT pools equal ones into one Constant at
  // the first use, in that use's scope (torch/csrc/jit/passes/constant_pooling.cpp). It survives in the ONNX graph
  // only where a size list reads it: note() marks where the value first appears, pooled() reads it.
  void note(int64_t value);
  std::string pooled(int64_t value);
  // A Python int list [value] of the module's code (a reduction's dim, as x.mean(-1) and x.sum(dim=-1) take it),
  // pooled the same way; it survives where an op reads it as an input (ReduceSum's axes from opset 13), as an
  // unscoped Constant named after that reader: "Constant_<node index>", output "onnx::<reader>_<JIT value number>".
  void note_list(int64_t value) { note_list(std::vector<int64_t>{value}); }
  std::string pooled_list(int64_t value, const std::string& reader) {
    return pooled_list(std::vector<int64_t>{value}, reader);
  }
  // A longer Python int list (torch.split's sizes, read by Split), pooled the same way.
  void note_list(const std::vector<int64_t>& values);
  std::string pooled_list(const std::vector<int64_t>& values, const std::string& reader);

  // A view/reshape size list: each element Unsqueezed on an unscoped axes Constant, then Concat.
  std::string size_list(const std::vector<std::string>& elements);

  // Names every node and value and moves the nodes into `graph`. `values_before_nodes` is the number of graph
  // inputs and parameters (the JIT numbers them first); `fixed` renames placeholders to given names (the graph's
  // outputs). With `fold`, constant folding as described above, against `graph`'s initializers.
  void finish(onnx::GraphProto& graph, int64_t values_before_nodes, const std::map<std::string, std::string>& fixed,
              bool fold);
  // After finish with `fold`: each folded transposed copy of a parameter that the graph still reads elsewhere (a
  // tied head's copy of the token embedding), as (copy, parameter).
  const std::vector<std::pair<std::string, std::string>>& tied_copies() const { return tied_copies_; }

 private:
  struct Pending {
    onnx::NodeProto* node;  // on arena_; owned by the emitter until finish() hands it to the graph
    std::string scope;
    bool unscoped = false;  // an exporter-made Unsqueeze axes Constant, or a pooled int list (note_list)
    std::string reader = "Unsqueeze";  // an unscoped Constant's output is named after its reader
    bool used = true;       // false: a pooled int nothing read (the JIT drops it)
    bool removed = false;   // folded into an initializer, or a constant nobody reads after folding
    int64_t value_number = 0;
  };
  onnx::NodeProto& last() { return *nodes_.back().node; }
  // The final names of the placeholders op() makes ("$<n>", n below next_value_), by number: a graph of 10^5 nodes
  // looks each up several times. A name that is not a placeholder (a parameter, a graph input) is kept in others_.
  class Names {
   public:
    explicit Names(int64_t placeholders) : final_(size_t(placeholders)) {}
    size_t size() const { return final_.size(); }
    // The placeholder's number, or -1 for any other name.
    int64_t index(std::string_view name) const {
      if (name.size() < 2 || name[0] != '$') return -1;
      int64_t v = 0;
      for (size_t i = 1; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') return -1;
        v = v * 10 + (name[i] - '0');
      }
      return v < int64_t(final_.size()) ? v : -1;
    }
    bool has(int64_t v) const { return !final_[size_t(v)].empty(); }
    const std::string* find(const std::string& name) const {
      if (const int64_t v = index(name); v >= 0) return has(v) ? &final_[size_t(v)] : nullptr;
      if (others_.empty()) return nullptr;
      const auto it = others_.find(name);
      return it == others_.end() ? nullptr : &it->second;
    }
    void set(const std::string& name, std::string final_name) {  // as map[name] = final_name
      if (const int64_t v = index(name); v >= 0) final_[size_t(v)] = std::move(final_name);
      else others_[name] = std::move(final_name);
    }
    void emplace(const std::string& name, std::string final_name) {  // as map.emplace(name, final_name)
      if (const int64_t v = index(name); v >= 0) {
        if (!has(v)) final_[size_t(v)] = std::move(final_name);
      } else {
        others_.emplace(name, std::move(final_name));
      }
    }
    const std::unordered_map<std::string, std::string>& others() const { return others_; }

   private:
    std::vector<std::string> final_;  // "" while unnamed (no final name is empty)
    std::unordered_map<std::string, std::string> others_;
  };
  void fold_constants(onnx::GraphProto& graph, int64_t next_number, Names& names);  // graph_emitter_fold.cc
  google::protobuf::Arena* arena_;
  std::vector<Pending> nodes_;
  std::vector<std::pair<std::string, std::string>> tied_copies_;
  std::map<int64_t, size_t> pool_;
  std::map<std::vector<int64_t>, size_t> list_pool_;
  int64_t next_value_ = 0;
};

}  // namespace memplan
