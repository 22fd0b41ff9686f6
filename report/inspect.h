// inspect: a model as its file declares it (ModelOverview) and as shaped at the user's dimensions (Graph):
// JSON ("memplan.inspect/1", docs/inspect-json.md), an aligned table for people, and markdown.
// Sizes print as everywhere else (report/sizes.h); exact bytes are in the JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "onnx_import/graph.h"
#include "onnx_import/model_overview.h"

namespace memplan {

nlohmann::ordered_json inspect_to_json(const ModelOverview& overview, const Graph& graph);
// `graph` nullopt: the shapes could not be inferred; the declared inputs and outputs are shown instead.
std::string inspect_to_text(const ModelOverview& overview, const std::optional<Graph>& graph);
std::string inspect_to_markdown(const ModelOverview& overview, const std::optional<Graph>& graph);

}  // namespace memplan
