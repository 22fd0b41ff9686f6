#include "cost_models/separators.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dominator_tree.hpp>
#include <boost/property_map/property_map.hpp>
#include <set>

#include "cost_models/graph_facts.h"

namespace memplan {
namespace {

// tensor -> index of the op that produces it (-1: graph input, weight, constant).
std::vector<int32_t> producing_op(const Graph& g, const std::vector<FusedOp>& ops) {
  std::vector<int32_t> by_tensor(g.tensors.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i)
    for (int32_t t : ops[i].outputs) by_tensor[t] = static_cast<int32_t>(i);
  return by_tensor;
}

}  // namespace

std::vector<bool> main_path_ops(const Graph& g, const std::vector<FusedOp>& ops) {
  std::vector<bool> main(ops.size(), false);
  if (g.inputs.empty()) return main;
  std::vector<bool> tainted(g.tensors.size(), false);
  tainted[g.inputs[0]] = true;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int32_t t : ops[i].inputs)
      if (tainted[t]) main[i] = true;
    if (main[i])
      for (int32_t t : ops[i].outputs) tainted[t] = true;
  }
  return main;
}

std::vector<Separator> find_separators(const Graph& g, const std::vector<FusedOp>& ops,
                                       const std::vector<bool>& on_main_path) {
  using DiGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;
  using Vertex = boost::graph_traits<DiGraph>::vertex_descriptor;
  const int32_t n = static_cast<int32_t>(ops.size());
  const int32_t source = n, sink = n + 1;
  DiGraph dag(n + 2);
  const std::vector<int32_t> producer = producing_op(g, ops);
  const int32_t primary = g.inputs.empty() ? -1 : g.inputs[0];
  bool reaches_sink = false;
  for (int32_t i = 0; i < n; ++i) {
    if (!on_main_path[i]) continue;
    std::set<int32_t> preds;
    for (int32_t t : ops[i].inputs) {
      if (t == primary) preds.insert(source);
      else if (producer[t] >= 0 && on_main_path[producer[t]]) preds.insert(producer[t]);
    }
    for (int32_t p : preds) boost::add_edge(p, i, dag);
    for (int32_t t : ops[i].outputs)
      if (is_graph_output(g, t)) {
        boost::add_edge(i, sink, dag);
        reaches_sink = true;
        break;
      }
  }
  if (!reaches_sink) return {};

  std::vector<Vertex> idom(boost::num_vertices(dag), boost::graph_traits<DiGraph>::null_vertex());
  auto idom_map = boost::make_iterator_property_map(idom.begin(), boost::get(boost::vertex_index, dag));
  boost::lengauer_tarjan_dominator_tree(dag, boost::vertex(source, dag), idom_map);

  std::vector<int32_t> chain;  // dominators of the sink, from the sink upwards
  for (Vertex v = idom[sink]; v != boost::graph_traits<DiGraph>::null_vertex() && static_cast<int32_t>(v) != source;
       v = idom[v])
    chain.push_back(static_cast<int32_t>(v));
  std::vector<Separator> out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const int32_t op = *it;
    // The tensor later main ops read; an op whose several outputs are all read later is no boundary.
    int32_t crossing = -1, count = 0;
    for (int32_t t : ops[op].outputs) {
      bool read_later = false;
      for (int32_t c : g.tensors[t].consumers) read_later |= c > ops[op].nodes.back();
      if (read_later) { crossing = t; ++count; }
    }
    if (count != 1 || is_graph_output(g, crossing)) continue;
    out.push_back({op, crossing});
  }
  return out;
}

}  // namespace memplan
