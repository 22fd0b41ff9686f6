// import_model(): read the file without its weights, describe it, infer every shape, build the Graph.
#include "onnx_import/import.h"

#include <string_view>
#include <utility>

#include "onnx_import/errors.h"
#include "onnx_import/graph_builder.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/inline_branches.h"

namespace memplan {
namespace {

// Shape inference names the node or tensor at fault; the user also needs to know which model.
bool names_model(const std::exception& e, const std::string& path) {
  return std::string_view(e.what()).substr(0, path.size()) == path;
}

// `bindings` with the sums the model's source states (ReadModel::dim_sums) bound from their terms, where every
// term is bound and the sum is not.
Bindings with_stated_sums(const ReadModel& model, const Bindings& bindings) {
  Bindings b = bindings;
  for (const auto& [sum, terms] : model.dim_sums) {
    if (b.dims.count(sum)) continue;
    int64_t total = 0;
    bool bound = true;
    for (const std::string& t : terms) {
      const auto it = b.dims.find(t);
      if (it == b.dims.end() || __builtin_add_overflow(total, it->second, &total)) bound = false;
    }
    if (bound && !terms.empty()) b.dims[sum] = total;
  }
  return b;
}

}  // namespace

std::vector<std::string> summed_dim_terms(const std::string& dim_param) {
  std::vector<std::string> terms;
  size_t start = 0;
  for (size_t at; (at = dim_param.find(" + ", start)) != std::string::npos; start = at + 3)
    terms.push_back(dim_param.substr(start, at - start));
  if (terms.empty()) return {};
  terms.push_back(dim_param.substr(start));
  return terms;
}

Graph import_model(const ReadModel& model, const std::string& path, const Bindings& user_bindings,
                   ModelOverview& overview) {
  overview = describe_model(path, model);
  const Bindings bindings = with_stated_sums(model, user_bindings);
  try {
    InferenceResult inferred = infer_shapes(model.proto, bindings);
    if (!inferred.if_branches.empty()) {
      // The Ifs' chosen branches become top-level nodes, shaped again there, so the cost models cost them.
      // `overview` stays the file as declared; the flat model's own describes the graph that is built.
      ReadModel flat;
      flat.proto.CopyFrom(model.proto);
      if (inline_taken_branches(flat.proto, inferred.if_branches)) {
        flat.file_bytes = model.file_bytes;
        flat.warnings = model.warnings;
        InferenceResult flat_inferred = infer_shapes(flat.proto, bindings);
        flat_inferred.warnings = std::move(inferred.warnings);  // which branches were assumed, and why
        return build_graph(flat.proto, describe_model(path, flat), std::move(flat_inferred));
      }
    }
    return build_graph(model.proto, overview, std::move(inferred));
  } catch (const ShapeOverflow& e) {
    if (names_model(e, path)) throw;
    throw ShapeOverflow(path + ": " + e.what());
  } catch (const InputError& e) {
    if (names_model(e, path)) throw;
    throw InputError(path + ": " + e.what());
  }
}

Graph import_model(const std::string& path, const Bindings& bindings, ModelOverview& overview) {
  return import_model(read_model_source(path, bindings.graph, bindings.moe_routing, false, bindings.experts, bindings.expert_parallel), path, bindings, overview);
}

Graph import_model(const ReadModel& model, const std::string& path, const Bindings& bindings) {
  ModelOverview overview;
  return import_model(model, path, bindings, overview);
}

Graph import_model(const std::string& path, const Bindings& bindings) {
  ModelOverview overview;
  return import_model(path, bindings, overview);
}

}  // namespace memplan
