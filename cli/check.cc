// memplan check: the CI memory gate. Exit 0 within limits, 1 when a budget or regression limit is broken,
// 2 on bad usage or input.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "onnx_import/errors.h"
#include "report/check.h"
#include "report/json_text.h"
#include "report/sizes.h"

namespace memplan::cli {

Action add_check_command(CLI::App& app) {
  auto args = std::make_shared<CommandArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "CI memory gate: estimate, then compare with a budget and/or a committed baseline.\n"
      "Exit 0 within limits, 1 when a limit is broken (the message says which and by how much), 2 on bad input.\n"
      "  memplan check model.onnx --batch 8 --write-baseline model.memplan.json   # once; commit the file\n"
      "  memplan check model.onnx --batch 8 --baseline model.memplan.json --max-increase 2 --budget 20GiB");
  add_options(cmd, *args, kCheck);
  return [args, cmd]() -> int {
    check_options(cmd, *args, kCheck);
    const CheckOutcome out = check_model(check_args(*args));
    const auto& [graph, e, config, options] = out.estimated;
    if (!args->write_baseline.empty())
      std::cerr << "memplan: wrote baseline " << args->write_baseline << " (" << format_bytes(e.total_bytes) << ")\n";
    switch (output_format(*args, kCheck)) {
      case Format::Json: std::cout << json_text(check_to_json(out.result, e, config)); break;
      case Format::Markdown: std::cout << check_to_markdown(out.result, e, config); break;
      case Format::Table: std::cout << check_to_text(out.result, e, config); break;
    }
    return out.result.passed ? kExitOk : kExitLimitExceeded;
  };
}

}  // namespace memplan::cli
