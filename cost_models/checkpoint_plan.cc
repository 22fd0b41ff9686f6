#include "cost_models/checkpoint_plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "onnx_import/errors.h"

namespace memplan {

std::vector<int32_t> every_k_ending_at(int32_t last, int32_t k) {
  std::vector<int32_t> out;
  for (int32_t i = last; i >= 0; i -= std::max(1, k)) out.push_back(i);
  std::reverse(out.begin(), out.end());
  return out;
}

namespace {

// Whether node `node` runs inside block `block` (a module name such as model.layers.3): torch.onnx names a node by
// the module scopes it ran in, one path component per called module, a list element named <list>.<N>
// (/model/layers.3/self_attn/q_proj/MatMul; torchvision's /layer1/layer1.0/conv1/Conv). So the component
// <list>.<N> must be there, after the block's enclosing modules in order.
bool in_block(const Graph& g, int32_t node, const std::string& block) {
  if (node < 0) return false;
  std::vector<std::string> parts, path;
  std::stringstream dotted(block), slashed(g.nodes[node].name);
  for (std::string p; std::getline(dotted, p, '.');) parts.push_back(p);
  for (std::string p; std::getline(slashed, p, '/');) path.push_back(p);
  if (parts.size() < 2) return false;
  const std::string tail = parts[parts.size() - 2] + "." + parts.back();
  const auto at = std::find(path.begin(), path.end(), tail);
  if (at == path.end()) return false;
  auto from = path.begin();
  for (size_t i = 0; i + 2 < parts.size(); ++i) {
    from = std::find(from, at, parts[i]);
    if (from == at) return false;
    ++from;
  }
  return true;
}

}  // namespace

BlockBoundaries block_boundaries(const Graph& g, const std::vector<Separator>& candidates,
                                 const std::vector<std::string>& blocks) {
  if (blocks.empty())
    throw InputError("--checkpoint layers: model '" + g.model_path + "' has no repeated blocks (parameters named "
                     "<prefix>.<N>.<...>, N taking two values or more); give every:K or at:T1,T2,...");
  std::vector<int32_t> out;
  bool entered = false;
  auto one = [&](const std::string& block, const char* what, auto&& is_it) {
    std::vector<int32_t> found;
    for (int32_t i = 0; i < static_cast<int32_t>(candidates.size()); ++i)
      if (is_it(candidates[i].tensor)) found.push_back(i);
    if (found.size() != 1)
      throw InputError("--checkpoint layers: block '" + block + "' of model '" + g.model_path + "' has " +
                       std::to_string(found.size()) + " separating tensors " + what + ", not one (its nodes are those torch.onnx "
                       "named under its module scope); give at:T1,T2,...");
    out.push_back(found[0]);
  };
  for (size_t b = 0; b < blocks.size(); ++b) {
    const auto read_inside = [&](int32_t t) {
      for (int32_t c : g.tensors[t].consumers)
        if (in_block(g, c, blocks[b])) return true;
      return false;
    };
    const auto read_outside = [&](int32_t t) {
      for (int32_t c : g.tensors[t].consumers)
        if (!in_block(g, c, blocks[b])) return true;
      return std::find(g.outputs.begin(), g.outputs.end(), t) != g.outputs.end();
    };
    if (b == 0) entered = g.inputs.empty() || !read_inside(g.inputs.front());  // else it starts at the first op
    if (b == 0 && entered)
      one(blocks[b], "entering it", [&](int32_t t) { return !in_block(g, g.tensors[t].producer, blocks[b]) && read_inside(t); });
    one(blocks[b], "leaving it", [&](int32_t t) { return in_block(g, g.tensors[t].producer, blocks[b]) && read_outside(t); });
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return {out, entered};
}

std::vector<int32_t> choose_boundaries(const Graph& g, const std::vector<Separator>& candidates,
                                       const CheckpointOptions& options) {
  const int32_t c = static_cast<int32_t>(candidates.size());
  std::vector<int32_t> out;
  switch (options.mode) {
    case CheckpointMode::None:
    case CheckpointMode::Auto:
    case CheckpointMode::Layers:  // block_boundaries
    case CheckpointMode::SelectiveOp:
    case CheckpointMode::SelectiveLayers:
      return out;
    case CheckpointMode::Sqrt: {
      if (c == 0) return out;
      const int32_t segments = static_cast<int32_t>(std::ceil(std::sqrt(static_cast<double>(c + 1))));
      for (int32_t j = 1; j < segments; ++j) {
        const int32_t index = static_cast<int32_t>(std::lround(static_cast<double>(j) * (c + 1) / segments)) - 1;
        if (index >= 0 && index < c && (out.empty() || out.back() < index)) out.push_back(index);
      }
      return out;
    }
    case CheckpointMode::Every: {
      if (options.every < 1) throw InputError("--checkpoint every:K needs K >= 1");
      for (int32_t i = options.every - 1; i < c; i += options.every) out.push_back(i);
      return out;
    }
    case CheckpointMode::At: {
      for (const std::string& name : options.at) {
        int32_t found = -1;
        for (int32_t i = 0; i < c; ++i)
          if (g.tensors[candidates[i].tensor].name == name) found = i;
        if (found < 0) {
          std::string list;
          for (int32_t i = 0; i < c && i < 50; ++i) list += (i ? ", " : "") + g.tensors[candidates[i].tensor].name;
          throw InputError("--checkpoint at: tensor '" + name + "' does not separate the graph of model '" +
                           g.model_path + "'; valid boundaries: " + (list.empty() ? "(none)" : list));
        }
        out.push_back(found);
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      return out;
    }
  }
  return out;
}

}  // namespace memplan
