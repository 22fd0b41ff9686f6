// memplan check: the CI memory gate. Exit 0 within limits, 1 when a budget or regression limit is broken,
// 2 on bad usage or input.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/estimate_options.h"
#include "onnx_import/errors.h"
#include "report/check.h"
#include "report/json_text.h"
#include "report/sizes.h"

namespace memplan::cli {

Action add_check_command(CLI::App& app) {
  struct State {
    EstimateArgs args;
    FormatArgs format;
    std::string baseline, write_baseline;
    double max_increase = 1.0;
  };
  auto state = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "CI memory gate: estimate, then compare with a budget and/or a committed baseline.\n"
      "Exit 0 within limits, 1 when a limit is broken (the message says which and by how much), 2 on bad input.\n"
      "  memplan check model.onnx --batch 8 --write-baseline model.memplan.json   # once; commit the file\n"
      "  memplan check model.onnx --batch 8 --baseline model.memplan.json --max-increase 2 --budget 20GiB");
  add_estimate_options(cmd, state->args, /*with_checkpoint_budget=*/false);
  cmd->add_option("--budget", state->args.budget,
                  "Fail when the estimate exceeds SIZE (e.g. 20GiB; GiB = 2^30, GB = 10^9); default with --gpu: the GPU's");
  cmd->add_option("--baseline", state->baseline, "Fail when the estimate grew more than --max-increase over this baseline");
  cmd->add_option("--max-increase", state->max_increase, "Allowed growth over the baseline, in percent")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--write-baseline", state->write_baseline, "Write the current estimate as a baseline file");
  add_format_options(cmd, state->format);
  return [state]() -> int {
    const auto [graph, e, config] = estimate_model(state->args);

    // --budget, else the --gpu's (to_estimate_options), on which the estimate also ran the step.
    const std::optional<uint64_t> budget = e.at_budget ? std::optional(e.at_budget->budget_bytes) : std::nullopt;
    std::optional<Baseline> baseline;
    if (!state->baseline.empty()) baseline = baseline_from_json_text(read_text_file(state->baseline, "--baseline"), state->baseline);
    const CheckResult result = run_check(e, config, budget, baseline, state->max_increase);

    if (!state->write_baseline.empty()) {
      refuse_model_as_output(state->write_baseline, state->args.model.path, "--write-baseline");
      const Baseline b{std::filesystem::path(state->args.model.path).filename().string(), config, e.total_bytes};
      write_text_file(state->write_baseline, json_text(baseline_to_json(b, e)), "the baseline to ");
      std::cerr << "memplan: wrote baseline " << state->write_baseline << " (" << format_bytes(e.total_bytes) << ")\n";
    }
    switch (state->format.resolve()) {
      case Format::Json: std::cout << json_text(check_to_json(result, e, config)); break;
      case Format::Markdown: std::cout << check_to_markdown(result, e, config); break;
      case Format::Table: std::cout << check_to_text(result, e, config); break;
    }
    return result.passed ? kExitOk : kExitLimitExceeded;
  };
}

}  // namespace memplan::cli
