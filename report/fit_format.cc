// fit's answers as text, JSON and Markdown (report/fit.h): the search in report/fit.cc.
#include <fmt/format.h>

#include <algorithm>

#include "report/estimate_format.h"
#include "report/fit.h"
#include "report/sizes.h"

namespace memplan {

// The budget less the required bytes at the answer: what is left free when the step runs at its peak.
uint64_t fit_margin(const FitAnswer& a) {
  return a.at_value && a.budget_bytes > a.at_value->required_bytes ? a.budget_bytes - a.at_value->required_bytes : 0;
}

namespace {

nlohmann::ordered_json run_check_json(const RunCheck& c) {
  return {{"steady_step_value", c.steady_value}, {"steady_iterations", c.steady_iterations}, {"settled", c.settled}};
}

std::string run_check_text(const RunCheck& c, const std::string& search, int64_t value) {
  std::string text = fmt::format("  the run fits too: the first iteration, then {} steady one{}{}\n", c.steady_iterations,
                                 c.steady_iterations == 1 ? "" : "s",
                                 c.settled ? " until the allocator's cache repeats" : " (the cache had not settled)");
  if (c.steady_value != value)
    text += fmt::format("  lowered from {} = {}: its steady step fits alone, but not in the cache the first iteration\n"
                        "  leaves (PyTorch keeps cached blocks until a cudaMalloc fails; the optimizer's states are made "
                        "at\n  the first step)\n",
                        search, c.steady_value);
  return text;
}

}  // namespace

nlohmann::ordered_json fit_to_json(const FitAnswer& a) {
  const FitResult& r = a.result;
  nlohmann::ordered_json j{{"schema", kFitSchema},         {"model", a.model},
                           {"search", a.search},           {"budget_bytes", a.budget_bytes},
                           {"budget_source", a.budget_source}, {"headroom_percent", a.headroom_percent}};
  if (!r.any_fits) {
    j["value"] = nullptr;
    j["estimate_at_min"] = {{"required_bytes", r.bytes_at_value}};
  } else {
    j["value"] = r.value;
    j["estimate_at_value"] = {{"required_bytes", a.at_value->required_bytes},
                              {"total_bytes", a.at_value->total_bytes},
                              {"allocated_bytes", a.at_value->allocated_bytes},
                              {"reserved_bytes", a.at_value->reserved_bytes},
                              {"device_bytes", a.at_value->device_bytes},
                              {"alloc_retries_at_budget", a.at_value->at_budget->alloc_retries}};
    if (r.next_evaluated) j["estimate_at_next"] = {{"required_bytes", r.bytes_at_next}};
    else j["estimate_at_next"] = nullptr;
    j["margin_bytes"] = fit_margin(a);
    if (a.run) j["run"] = run_check_json(*a.run);
    if (const auto& c = a.at_value->cudnn_workspace)
      j["cudnn_workspace"] = cudnn_decision_json(*c, a.budget_bytes, a.at_value->breakdown.fixed);
    if (a.global_batch)
      j["global_batch"] = {{"global_batch", a.global_batch->global_batch}, {"micro_batch", a.global_batch->micro_batch},
                           {"grad_accum", a.global_batch->grad_accum}, {"gpus", a.global_batch->gpus}};
  }
  j["evaluations"] = r.evaluations;
  return j;
}

std::string fit_to_text(const FitAnswer& a) {
  const FitResult& r = a.result;
  if (!r.any_fits)
    return fmt::format("nothing fits: {} = 1 needs {}, the budget is {} ({})\n", a.search,
                       format_bytes(r.bytes_at_value), format_bytes(a.budget_bytes), a.budget_source) +
           (a.run ? fmt::format("  ({} = {}'s steady step fits alone, but not after the first iteration)\n", a.search,
                                a.run->steady_value)
                  : "");
  const Estimate& at = *a.at_value;
  std::string text = fmt::format("largest {} that fits: {}\n  {} = {} needs {} ({} B)", a.search, r.value, a.search,
                                 r.value, format_bytes(at.required_bytes), format_count(at.required_bytes));
  text += at.required_bytes == at.total_bytes
              ? "\n"
              : fmt::format("; {} unconstrained, where the allocator keeps its cache\n", format_bytes(at.total_bytes));
  // Lowered by the run check: value + 1's step fits alone; what does not fit is its run (run_check_text says why).
  const bool run_limits = a.run && a.run->steady_value != r.value;
  if (r.next_evaluated)
    text += fmt::format("  {} = {}{} {} ({} B){}\n", a.search, r.value + 1, run_limits ? "'s steady step needs" : " needs",
                        format_bytes(r.bytes_at_next), format_count(r.bytes_at_next),
                        run_limits ? ", but its run does not fit (below)" : "");
  else
    text += fmt::format("  (the search stopped at --max {})\n", a.max_value);
  text += fmt::format("  budget {} ({} B): {}\n", format_bytes(a.budget_bytes), format_count(a.budget_bytes),
                      a.budget_source);
  text += fmt::format("  margin: {} ({} B) of the budget left at {} = {}{}\n", format_bytes(fit_margin(a)),
                      format_count(fit_margin(a)), a.search, r.value,
                      run_limits ? "'s steady step (the run, not the step, sets this answer)" : "");
  if (a.run) text += run_check_text(*a.run, a.search, r.value);
  if (at.cudnn_workspace) text += cudnn_decision_text(*at.cudnn_workspace, a.budget_bytes, at.breakdown.fixed);
  if (const int64_t retries = at.at_budget->alloc_retries; retries > 0)
    text += fmt::format("  at this budget the allocator flushes its cache {} time{} a step to run it (each a device\n"
                        "  synchronisation, memory_stats()[\"num_alloc_retries\"]); --headroom leaves room to avoid them\n",
                        retries, retries == 1 ? "" : "s");
  if (a.global_batch)
    text += fmt::format("  global batch {}: micro-batch {} x {} accumulation steps x {} GPU(s)\n",
                        a.global_batch->global_batch, a.global_batch->micro_batch, a.global_batch->grad_accum,
                        a.global_batch->gpus);
  return text;
}

std::string fit_to_markdown(const FitAnswer& a) { return "```\n" + fit_to_text(a) + "```\n"; }

namespace {

std::string answer_text(const FitResult& r) { return r.any_fits ? std::to_string(r.value) : "none"; }

uint64_t row_margin(const FitTableRow& row) {
  return row.budget_bytes > row.result.bytes_at_value ? row.budget_bytes - row.result.bytes_at_value : 0;
}
std::string margin_text(const FitTableRow& row) { return row.result.any_fits ? format_bytes(row_margin(row)) : "-"; }

}  // namespace

nlohmann::ordered_json fit_table_to_json(const FitTable& t) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const FitTableRow& row : t.rows)
    rows.push_back({{"gpu", row.gpu},
                    {"memory_bytes", row.memory_bytes},
                    {"budget_bytes", row.budget_bytes},
                    {"value", row.result.any_fits ? nlohmann::ordered_json(row.result.value)
                                                  : nlohmann::ordered_json(nullptr)},
                    {"margin_bytes", row.result.any_fits ? nlohmann::ordered_json(row_margin(row))
                                                         : nlohmann::ordered_json(nullptr)},
                    {"steady_step_value", row.run ? nlohmann::ordered_json(row.run->steady_value)
                                                  : nlohmann::ordered_json(nullptr)}});
  return {{"schema", kFitSchema}, {"model", t.model}, {"search", t.search}, {"reserve_bytes", t.outside.context_bytes},
          {"nccl_bytes", t.outside.nccl.bytes},
          {"gpus", rows}};
}

std::string fit_table_to_text(const FitTable& t) {
  std::string text = fmt::format("largest {} that fits, {}\n  {:<12}{:>12}{:>12}{:>10}{:>12}\n", t.search, t.mode,
                                 "GPU", "memory", "budget", t.search, "margin");
  for (const FitTableRow& row : t.rows)
    text += fmt::format("  {:<12}{:>12}{:>12}{:>10}{:>12}\n", row.gpu, format_bytes(row.memory_bytes),
                        format_bytes(row.budget_bytes), answer_text(row.result), margin_text(row));
  std::string lowered;
  bool checked = false;
  for (const FitTableRow& row : t.rows) {
    checked = checked || row.run.has_value();
    if (row.run && (!row.result.any_fits || row.run->steady_value != row.result.value))
      lowered += fmt::format("{}{} from {}", lowered.empty() ? "" : ", ", row.gpu, row.run->steady_value);
  }
  if (checked)
    text += fmt::format("  (each answer's run, the first iteration then steady ones, fits too{})\n",
                        lowered.empty() ? "" : "; lowered for it: " + lowered);
  text += fmt::format("  (budget = memory - {} reserve for the CUDA context{}; GiB = 2^30 bytes)\n",
                      format_bytes(t.outside.context_bytes),
                      t.outside.nccl.bytes ? " - " + format_bytes(t.outside.nccl.bytes) + " NCCL buffers" : "");
  return text;
}

std::string fit_table_to_markdown(const FitTable& t) {
  std::string md = fmt::format("| GPU | memory | budget | largest {} | margin |\n|---|---:|---:|---:|---:|\n", t.search);
  for (const FitTableRow& row : t.rows)
    md += fmt::format("| {} | {} | {} | {} | {} |\n", row.gpu, format_bytes(row.memory_bytes),
                      format_bytes(row.budget_bytes), answer_text(row.result), margin_text(row));
  return md;
}

}  // namespace memplan
