// Pass 4, the pipeline partition (stage_graph.h).
#include "cost_models/stage_graph.h"

#include <string>

#include "cost_models/program_writer.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

// Dense ids for the marked entries of a whole-graph table, in the whole graph's order.
void number(const std::vector<bool>& in, std::vector<int32_t>& to_stage, std::vector<int32_t>& to_original) {
  to_stage.assign(in.size(), -1);
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i]) {
      to_stage[i] = static_cast<int32_t>(to_original.size());
      to_original.push_back(static_cast<int32_t>(i));
    }
}

// Carries the whole context's facts to the stage's ids.
class Remap {
 public:
  explicit Remap(const StageGraph& s) : s_(s) {}

  // A tensor id the stage must have (-1 stays -1).
  int32_t tensor(int32_t t) const {
    if (t < 0) return -1;
    const int32_t id = s_.stage_tensor[t];
    if (id < 0) throw InternalError("tensor " + std::to_string(t) + " is read by a pipeline stage but not in its graph");
    return id;
  }
  std::vector<int32_t> tensors(const std::vector<int32_t>& ts) const {
    std::vector<int32_t> out;
    for (int32_t t : ts) out.push_back(tensor(t));
    return out;
  }
  // The ones the stage has, in order.
  std::vector<int32_t> present(const std::vector<int32_t>& ts) const {
    std::vector<int32_t> out;
    for (int32_t t : ts)
      if (t >= 0 && s_.stage_tensor[t] >= 0) out.push_back(s_.stage_tensor[t]);
    return out;
  }
  // A per-tensor table at the stage's tensor ids.
  template <typename T>
  std::vector<T> per_tensor(const std::vector<T>& v) const {
    std::vector<T> out;
    if (v.empty()) return out;
    for (int32_t t : s_.original_tensor) out.push_back(v[t]);
    return out;
  }
  // A per-op table at the stage's op indices.
  template <typename T>
  std::vector<T> per_op(const std::vector<T>& v) const {
    std::vector<T> out;
    for (int32_t i : s_.original_op) out.push_back(v[i]);
    return out;
  }
  FusedOp op(FusedOp op) const {
    for (int32_t& n : op.nodes) n = s_.stage_node[n];
    op.inputs = tensors(op.inputs);
    op.outputs = tensors(op.outputs);
    for (int32_t* t : {&op.x, &op.weight, &op.bias, &op.q, &op.k, &op.v, &op.mask}) *t = tensor(*t);
    return op;
  }
  AutogradRule rule(AutogradRule r) const {
    r.saved_tensors = tensors(r.saved_tensors);
    r.passthrough_inputs = tensors(r.passthrough_inputs);
    return r;
  }
  TensorParallelPlan tp(TensorParallelPlan p) const {
    p.axis = per_tensor(p.axis);
    p.local_dim = per_tensor(p.local_dim);
    std::vector<int32_t> gathered;
    if (!p.gathered_input.empty())
      for (int32_t n : s_.original_node) gathered.push_back(tensor(p.gathered_input[n]));
    p.gathered_input = std::move(gathered);
    return p;
  }

 private:
  const StageGraph& s_;
};

}  // namespace

StageGraph stage_graph(const TrainingContext& c, const std::vector<int32_t>& stage_of_op, int stage) {
  const Graph& g = *c.graph;
  const size_t nt = g.tensors.size(), nn = g.nodes.size();
  StageGraph s;
  std::vector<int32_t> producer_stage(nt, -1);
  std::vector<bool> executed(nn, false);
  for (size_t i = 0; i < c.ops.size(); ++i) {
    for (int32_t t : c.ops[i].outputs) producer_stage[t] = stage_of_op[i];
    for (int32_t n : c.ops[i].nodes) executed[n] = true;
  }
  std::vector<bool> node_in(nn, false), tensor_in(nt, false);
  std::vector<int32_t> received, sent;  // the whole graph's ids
  for (size_t i = 0; i < c.ops.size(); ++i) {
    const int32_t at = stage_of_op[i];
    for (int32_t t : c.ops[i].inputs) {
      if (at == stage && producer_stage[t] >= 0 && producer_stage[t] < stage && !c.shape[t]) add_unique(received, t);
      if (at > stage && producer_stage[t] == stage && !c.shape[t]) add_unique(sent, t);
    }
    if (at != stage) continue;
    s.original_op.push_back(static_cast<int32_t>(i));
    for (int32_t n : c.ops[i].nodes) node_in[n] = true;
  }
  // The host's shape arithmetic on the stage's own tensors: each keeps every reader it has in the whole graph.
  for (size_t n = 0; n < nn; ++n)
    if (!executed[n])
      for (int32_t t : g.nodes[n].inputs)
        if (t >= 0 && producer_stage[t] == stage) node_in[n] = true;
  for (size_t n = 0; n < nn; ++n)
    if (node_in[n]) {
      for (int32_t t : g.nodes[n].inputs)
        if (t >= 0) tensor_in[t] = true;
      for (int32_t t : g.nodes[n].outputs)
        if (t >= 0) tensor_in[t] = true;
    }
  for (size_t n = 0; n < nn; ++n)  // a Constant node's value is a Python scalar or a buffer (graph_facts.h)
    if (!executed[n] && g.nodes[n].op_type == "Constant")
      for (int32_t t : g.nodes[n].outputs)
        if (t >= 0 && tensor_in[t]) node_in[n] = true;
  for (size_t t = 0; t < nt; ++t)  // a tied head reads the embedding itself
    if (tensor_in[t] && c.tied_to[t] >= 0) tensor_in[c.tied_to[t]] = true;

  number(tensor_in, s.stage_tensor, s.original_tensor);
  number(node_in, s.stage_node, s.original_node);
  Graph& sg = s.graph;
  sg.model_path = g.model_path;
  sg.producer = g.producer;
  sg.ir_version = g.ir_version;
  sg.opsets = g.opsets;
  sg.bound_dims = g.bound_dims;
  sg.bound_values = g.bound_values;
  for (const auto& [copy, param] : g.recorded_tied_copies)
    if (s.stage_tensor[copy] >= 0 && s.stage_tensor[param] >= 0)
      sg.recorded_tied_copies.emplace_back(s.stage_tensor[copy], s.stage_tensor[param]);
  for (int32_t t : s.original_tensor) {
    Tensor x = g.tensors[t];
    x.producer = x.producer >= 0 ? s.stage_node[x.producer] : -1;
    x.consumers.clear();
    for (int32_t n : g.tensors[t].consumers)
      if (s.stage_node[n] >= 0) x.consumers.push_back(s.stage_node[n]);
    sg.tensors.push_back(std::move(x));
  }
  auto to_stage = [&](int32_t t) { return t >= 0 ? s.stage_tensor[t] : -1; };
  for (int32_t n : s.original_node) {
    Node x = g.nodes[n];
    for (int32_t& t : x.inputs) t = to_stage(t);
    for (int32_t& t : x.outputs) t = to_stage(t);
    sg.nodes.push_back(std::move(x));
  }
  const Remap remap(s);
  sg.inputs = remap.present(g.inputs);
  sg.outputs = remap.present(g.outputs);
  sg.initializers = remap.present(g.initializers);
  s.received = remap.tensors(received);
  s.sent = remap.tensors(sent);
  for (int32_t t : s.received) {
    sg.tensors[t].kind = TensorKind::Input;
    sg.inputs.push_back(t);
  }
  for (int32_t t : s.sent) {
    sg.tensors[t].kind = TensorKind::Output;
    add_unique(sg.outputs, t);
  }
  return s;
}

TrainingContext stage_context(const TrainingContext& c, const StageGraph& s) {
  precondition(c.separators.empty() || c.options.checkpoint.mode == CheckpointMode::None, "--pp with checkpointing");
  precondition(c.units.count() == 0, "--pp with FSDP");
  const Remap remap(s);
  TrainingContext out;
  out.graph = &s.graph;
  out.execution = c.execution;
  out.runtime = c.runtime;
  out.options = c.options;
  for (int32_t i : s.original_op) out.ops.push_back(remap.op(c.ops[i]));
  out.op_flops = remap.per_op(c.op_flops);
  for (int32_t i : s.original_op) out.rules.push_back(remap.rule(c.rules[i]));
  for (int32_t i : s.original_op) out.held_through.push_back(remap.present(c.held_through[i]));
  out.shape = remap.per_tensor(c.shape);
  TensorLayout& l = out.layout;
  l.dtype = remap.per_tensor(c.layout.dtype);
  l.tp = remap.tp(c.layout.tp);
  l.storage = remap.per_tensor(c.layout.storage);
  l.stored_bytes = remap.per_tensor(c.layout.stored_bytes);
  l.parametrized = remap.per_tensor(c.layout.parametrized);
  l.shard = remap.per_tensor(c.layout.shard);
  l.shard_group = remap.per_tensor(c.layout.shard_group);
  l.grad_sharded = remap.per_tensor(c.layout.grad_sharded);
  l.states_sharded = remap.per_tensor(c.layout.states_sharded);
  l.shard_ways = c.layout.shard_ways;
  out.requires_grad = remap.per_tensor(c.requires_grad);
  out.is_param = remap.per_tensor(c.is_param);
  out.params = remap.present(c.params);
  out.module_parameters = remap.present(c.module_parameters);
  for (int32_t t : s.original_tensor) out.tied_to.push_back(remap.tensor(c.tied_to[t]));
  out.received = s.received;
  out.sent = s.sent;
  out.notes = c.notes;
  return out;
}

}  // namespace memplan
