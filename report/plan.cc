#include "report/plan.h"

#include <fmt/format.h>

#include "report/sizes.h"

namespace memplan {
namespace {

double arena_over_bound(const Plan& plan) {
  return plan.lower_bound_bytes ? static_cast<double>(plan.arena_bytes) / static_cast<double>(plan.lower_bound_bytes)
                                : 1.0;
}

}  // namespace

Plan plan_graph(const Graph& graph, const EstimateOptions& options, uint64_t alignment) {
  return make_plan(build_estimate_program(graph, options).program, graph.model_path, alignment);
}

Plan plan_model(const EstimateArgs& args, uint64_t alignment) {
  const Graph graph = import_model(args.model.path, to_bindings(args.model));
  return plan_graph(graph, to_estimate_options(args), alignment);
}

std::string plan_summary_text(const Plan& plan) {
  return fmt::format(
      "{}: arena {} ({} B), lower bound {} ({} B), arena / bound {:.4f}, {} buffers, {} steps, {} resident ({})\n",
      plan.model, format_bytes(plan.arena_bytes), format_count(plan.arena_bytes), format_bytes(plan.lower_bound_bytes),
      format_count(plan.lower_bound_bytes), arena_over_bound(plan), plan.buffers.size(), plan.schedule.size(),
      plan.resident.size(), plan.packing_algorithm);
}

std::string plan_to_markdown(const Plan& plan) {
  return fmt::format(
      "| model | arena | lower bound | arena / bound | buffers | steps |\n|---|---:|---:|---:|---:|---:|\n"
      "| `{}` | {} | {} | {:.4f} | {} | {} |\n",
      plan.model, format_bytes(plan.arena_bytes), format_bytes(plan.lower_bound_bytes), arena_over_bound(plan),
      plan.buffers.size(), plan.schedule.size());
}

}  // namespace memplan
