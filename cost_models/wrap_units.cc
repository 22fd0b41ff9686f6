// Wrapping units (wrap_units.h): which parameters FSDP flattens together and pipeline stages split by.
#include "cost_models/wrap_units.h"

#include <map>
#include <regex>
#include <set>

#include "cost_models/fsdp_groups.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

// The first `.<N>.` segment of a dotted name: the prefix before it, N, and whether the rest names a
// submodule's parameter ("layers.3.attn.w" -> "layers", 3, true; "mlp.0.weight" -> "mlp", 0, false).
bool repeated_segment(const std::string& name, std::string& prefix, std::string& index, bool& nested) {
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
    size_t end = dot + 1;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end > dot + 1 && end < name.size() && name[end] == '.') {
      prefix = name.substr(0, dot);
      index = name.substr(dot + 1, end - dot - 1);
      nested = name.find('.', end + 1) != std::string::npos;
      return true;
    }
  }
  return false;
}

// transformer_auto_wrap_policy wraps every instance of the block class; a container whose children are
// those blocks shows in the names as one prefix with several indices, each child having submodules. A
// prefix seen with one index only (a Sequential's second child, `classifier.1`) or whose children are
// leaf layers (`mlp.0.weight`, `mlp.3.weight`: the Linears of a Sequential) is no repeated block.
std::vector<std::string> default_unit_names(const Graph& g, const std::vector<int32_t>& parameters) {
  std::map<std::string, std::set<std::string>> indices;
  std::set<std::string> has_submodules;
  std::vector<std::string> unit(parameters.size()), prefix_of(parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    std::string prefix, index;
    bool nested = false;
    if (repeated_segment(g.tensors[parameters[i]].name, prefix, index, nested)) {
      indices[prefix].insert(index);
      if (nested) has_submodules.insert(prefix);
      unit[i] = prefix + "." + index;
      prefix_of[i] = prefix;
    }
  }
  for (size_t i = 0; i < parameters.size(); ++i)
    if (!unit[i].empty() && (indices[prefix_of[i]].size() < 2 || has_submodules.count(prefix_of[i]) == 0)) unit[i].clear();
  return unit;
}

std::vector<std::string> regex_unit_names(const Graph& g, const std::vector<int32_t>& parameters, const std::string& pattern) {
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw InputError("--fsdp-wrap '" + pattern + "' is not a valid regular expression: " + e.what());
  }
  if (re.mark_count() < 1)
    throw InputError("--fsdp-wrap '" + pattern + "' has no capture group: its first group names the unit");
  std::vector<std::string> unit(parameters.size());
  bool any = false;
  for (size_t i = 0; i < parameters.size(); ++i) {
    std::smatch m;
    const std::string& name = g.tensors[parameters[i]].name;
    if (std::regex_search(name, m, re) && m[1].matched && m[1].length() > 0) {
      unit[i] = m[1].str();
      any = true;
    }
  }
  if (!any) throw InputError("--fsdp-wrap '" + pattern + "' matches no parameter of model '" + g.model_path + "'");
  return unit;
}

}  // namespace

std::vector<std::string> torchtitan_unit_names(const Graph& g, const std::vector<FusedOp>& ops,
                                               const std::vector<int32_t>& parameters, std::vector<std::string> unit,
                                               bool tied_in_tail) {
  std::vector<int32_t> slot(g.tensors.size(), -1);
  for (size_t i = 0; i < parameters.size(); ++i) slot[parameters[i]] = static_cast<int32_t>(i);
  int32_t last_block_op = -1;
  std::vector<int32_t> first_read(parameters.size(), -1), last_read(parameters.size(), -1);
  for (size_t o = 0; o < ops.size(); ++o)
    for (int32_t t : ops[o].inputs) {
      const int32_t i = t >= 0 ? slot[t] : -1;
      if (i < 0) continue;
      if (first_read[i] < 0) first_read[i] = static_cast<int32_t>(o);
      last_read[i] = static_cast<int32_t>(o);
      if (!unit[i].empty()) last_block_op = static_cast<int32_t>(o);
    }
  for (const Node& n : g.nodes) {  // the token embedding: Gather(table, ids), ids a graph input
    if (n.op_type != "Gather" || n.inputs.size() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0) continue;
    const int32_t i = slot[n.inputs[0]];
    if (i >= 0 && unit[i].empty() && g.tensors[n.inputs[1]].kind == TensorKind::Input) unit[i] = "tok_embeddings";
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (last_block_op >= 0 && unit[i].empty() && first_read[i] > last_block_op) unit[i] = kTorchtitanKeptUnit;
    if (tied_in_tail && last_block_op >= 0 && unit[i] == "tok_embeddings" && last_read[i] > last_block_op)
      unit[i] = kTorchtitanKeptUnit;  // the head reads the table too: a tied embedding
  }
  return unit;
}

WrapUnits find_wrap_units(const Graph& g, const std::vector<FusedOp>& ops, const std::vector<int32_t>& parameters,
                          const std::string& regex) {
  const std::vector<std::string> unit_name =
      regex.empty()               ? default_unit_names(g, parameters)
      : regex == kTorchtitanWrap  ? torchtitan_unit_names(g, ops, parameters, default_unit_names(g, parameters))
      : regex == kAccelerateWrap  ? torchtitan_unit_names(g, ops, parameters, default_unit_names(g, parameters), true)
                                  : regex_unit_names(g, parameters, regex);
  WrapUnits u;
  u.names.push_back("root");
  u.unit_of_tensor.assign(g.tensors.size(), -1);
  std::map<std::string, int32_t> index;
  for (size_t i = 0; i < parameters.size(); ++i) {
    int32_t id = 0;
    if (!unit_name[i].empty()) {
      auto it = index.find(unit_name[i]);
      if (it == index.end()) {
        it = index.emplace(unit_name[i], static_cast<int32_t>(u.names.size())).first;
        u.names.push_back(unit_name[i]);
      }
      id = it->second;
    }
    u.unit_of_tensor[parameters[i]] = id;
  }
  u.first_op.assign(u.names.size(), -1);
  u.last_op.assign(u.names.size(), -1);
  int32_t current = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int32_t t : ops[i].inputs)
      if (u.unit_of_tensor[t] >= 0) {
        current = u.unit_of_tensor[t];
        break;
      }
    u.unit_of_op.push_back(current);
    if (u.first_op[current] < 0) u.first_op[current] = static_cast<int32_t>(i);
    u.last_op[current] = static_cast<int32_t>(i);
  }
  return u;
}

}  // namespace memplan
