// memplan fit: the largest batch (or any symbolic dimension) whose step runs on a GPU or within a budget.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/estimate_options.h"
#include "onnx_import/errors.h"
#include "report/fit.h"
#include "report/gpu_catalog.h"
#include "report/json_text.h"
#include "report/sizes.h"

namespace memplan::cli {

Action add_fit_command(CLI::App& app) {
  struct State {
    FitArgs fit;
    FormatArgs format;
  };
  auto state = std::make_shared<State>();
  FitArgs* f = &state->fit;
  CLI::App* cmd = app.add_subcommand(
      "fit",
      "The largest batch (or --search DIM) whose step runs within the budget: required(value) <= budget <\n"
      "required(value + 1), required being the least device memory the simulated allocator runs the step in.\n"
      "Without --gpu or --memory, a table over the built-in GPU catalog.\n"
      "  memplan fit resnet50.onnx --gpu A100-80GB --mode train --precision amp-bf16\n"
      "  memplan fit gpt.onnx --memory 24GiB --search seq --batch 8");
  add_estimate_options(cmd, f->estimate);
  auto* mem = cmd->add_option("--memory", f->memory, "The budget exactly as given, e.g. 24GiB (= 24 x 2^30), 24GB (= 24 x 10^9)");
  cmd->get_option("--gpu")->excludes(mem);
  cmd->add_option("--search", f->settings.search, "The dimension to maximise: batch (binds --batch) or a symbolic dim name")
      ->capture_default_str();
  cmd->add_option("--headroom", f->settings.headroom_percent, "Keep this percent of the budget free")
      ->check(CLI::Range(0.0, 99.0))
      ->capture_default_str();
  cmd->add_option("--global-batch", f->settings.global_batch,
                  "Also say the gradient accumulation that reaches this global batch")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--reserve", f->reserve, "Memory outside the allocator per GPU (CUDA context); default: the catalog's");
  cmd->add_option("--max", f->settings.max_value, "Largest value to consider")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_format_options(cmd, state->format);

  return [state]() -> int {
    const FitOutcome out = fit_model(state->fit);
    const Format format = state->format.resolve();
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
