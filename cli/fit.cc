// memplan fit: the largest batch (or any symbolic dimension) whose step runs on a GPU or within a budget.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "onnx_import/errors.h"
#include "report/fit.h"
#include "report/gpu_catalog.h"
#include "report/json_text.h"
#include "report/sizes.h"

namespace memplan::cli {

Action add_fit_command(CLI::App& app) {
  auto args = std::make_shared<CommandArgs>();
  CLI::App* cmd = app.add_subcommand(
      "fit",
      "The largest batch (or --search DIM) whose step runs within the budget: required(value) <= budget <\n"
      "required(value + 1), required being the least device memory the simulated allocator runs the step in.\n"
      "Without --gpu or --memory, a table over the built-in GPU catalog.\n"
      "  memplan fit resnet50.onnx --gpu A100-80GB --mode train --precision amp-bf16\n"
      "  memplan fit gpt.onnx --memory 24GiB --search seq --batch 8");
  add_options(cmd, *args, kFit);

  return [args, cmd]() -> int {
    check_options(cmd, *args, kFit);
    const FitOutcome out = fit_model(fit_args(*args));
    const Format format = output_format(*args, kFit);
    if (out.table) {
      const FitTable& t = *out.table;
      std::cout << (format == Format::Json       ? json_text(fit_table_to_json(t))
                    : format == Format::Markdown ? fit_table_to_markdown(t)
                                                 : fit_table_to_text(t));
    } else {
      const FitAnswer& a = *out.answer;
      std::cout << (format == Format::Json       ? json_text(fit_to_json(a))
                    : format == Format::Markdown ? fit_to_markdown(a)
                                                 : fit_to_text(a));
    }
    return out.limit_broken() ? kExitLimitExceeded : kExitOk;
  };
}

}  // namespace memplan::cli
