// memplan estimate: peak memory of inference or a training step, its breakdown, and where the peak is.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/estimate_options.h"
#include "report/estimate_format.h"
#include "report/json_text.h"

namespace memplan::cli {

Action add_estimate_command(CLI::App& app) {
  struct State {
    EstimateArgs args;
    FormatArgs format;
  };
  auto state = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "estimate",
      "Peak GPU memory of inference or of one training step, by category, with the step where the peak happens "
      "and the largest tensors live there.\n"
      "  memplan estimate model.onnx --batch 8 --runtime pytorch\n"
      "  memplan estimate gpt.onnx --batch 8 --dim seq=1024 --mode train --precision amp-bf16 --optimizer adamw");
  add_estimate_options(cmd, state->args);
  add_format_options(cmd, state->format);
  return [state]() {
    const auto [graph, e, config] = estimate_model(state->args);
    switch (state->format.resolve()) {
      case Format::Json: std::cout << json_text(estimate_to_json(e, graph, config)); break;
      case Format::Markdown: std::cout << estimate_to_markdown(e, config); break;
      case Format::Table:
        for (const std::string& w : graph.warnings) std::cerr << "memplan: warning: " << w << "\n";
        std::cout << estimate_to_text(e, config);
        break;
    }
    return 0;
  };
}

}  // namespace memplan::cli
