// plan: the static arena plan (offsets and live ranges of every activation, docs/plan-json.md) of the program
// an estimate measures, and its one-line and markdown summaries. The plan's JSON is planner/plan_json.h's.
#pragma once

#include <cstdint>
#include <string>

#include "onnx_import/graph.h"
#include "planner/plan_json.h"
#include "report/estimate.h"
#include "report/estimate_config.h"

namespace memplan {

// The plan of build_estimate_program(graph, options).program (inference: plan has no --mode), offsets aligned
// to `alignment`. Throws InternalError if the plan fails the overlap checker (a planner bug).
Plan plan_graph(const Graph& graph, const EstimateOptions& options, uint64_t alignment = kDefaultAlignment);

// plan_graph of args.model as configured: import, then to_estimate_options(args).
Plan plan_model(const EstimateArgs& args, uint64_t alignment = kDefaultAlignment);

// "MODEL: arena 1.23 GiB (1,320,702,443 B), lower bound ..., N buffers, N steps, N resident (ALGORITHM)\n"
std::string plan_summary_text(const Plan& plan);
std::string plan_to_markdown(const Plan& plan);

}  // namespace memplan
