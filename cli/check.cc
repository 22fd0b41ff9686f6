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
    CheckArgs check;
    FormatArgs format;
  };
  auto state = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "CI memory gate: estimate, then compare with a budget and/or a committed baseline.\n"
      "Exit 0 within limits, 1 when a limit is broken (the message says which and by how much), 2 on bad input.\n"
      "  memplan check model.onnx --batch 8 --write-baseline model.memplan.json   # once; commit the file\n"
      "  memplan check model.onnx --batch 8 --baseline model.memplan.json --max-increase 2 --budget 20GiB");
  add_estimate_options(cmd, state->check.estimate, /*with_checkpoint_budget=*/false);
  cmd->add_option("--budget", state->check.estimate.budget,
                  "Fail when the step does not run in SIZE of device memory (e.g. 20GiB; GiB = 2^30, GB = 10^9); default "
                  "with --gpu: the GPU's memory less the catalog's context reserve");
  cmd->add_option("--baseline", state->check.baseline, "Fail when the estimate grew more than --max-increase over this baseline");
  cmd->add_option("--max-increase", state->check.max_increase_percent, "Allowed growth over the baseline, in percent")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--write-baseline", state->check.write_baseline, "Write the current estimate as a baseline file");
  add_format_options(cmd, state->format);
  return [state]() -> int {
    const CheckOutcome out = check_model(state->check);
    const auto& [graph, e, config] = out.estimated;
    if (!state->check.write_baseline.empty())
      std::cerr << "memplan: wrote baseline " << state->check.write_baseline << " (" << format_bytes(e.total_bytes) << ")\n";
    switch (state->format.resolve()) {
      case Format::Json: std::cout << json_text(check_to_json(out.result, e, config)); break;
      case Format::Markdown: std::cout << check_to_markdown(out.result, e, config); break;
      case Format::Table: std::cout << check_to_text(out.result, e, config); break;
    }
    return out.result.passed ? kExitOk : kExitLimitExceeded;
  };
}

}  // namespace memplan::cli
