// memplan estimate: peak memory of inference or a training step, its breakdown, and where the peak is.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "report/estimate_format.h"
#include "report/json_text.h"

namespace memplan::cli {

Action add_estimate_command(CLI::App& app) {
  auto args = std::make_shared<CommandArgs>();
  CLI::App* cmd = app.add_subcommand(
      "estimate",
      "Peak GPU memory of inference or of one training step, by category, with the step where the peak happens "
      "and the largest tensors live there.\n"
      "  memplan estimate model.onnx --batch 8 --runtime pytorch\n"
      "  memplan estimate gpt.onnx --batch 8 --dim seq=1024 --mode train --precision amp-bf16 --optimizer adamw");
  add_options(cmd, *args, kEstimate);
  return [args, cmd]() {
    check_options(cmd, *args, kEstimate);
    const auto [graph, e, config, options] = estimate_model(args->estimate);
    switch (output_format(*args, kEstimate)) {
      case Format::Json: std::cout << json_text(estimate_to_json(e, *graph, config)); break;
      case Format::Markdown: std::cout << estimate_to_markdown(e, config); break;
      case Format::Table:
        for (const std::string& w : graph->warnings) std::cerr << "memplan: warning: " << w << "\n";
        std::cout << estimate_to_text(e, config);
        break;
    }
    return 0;
  };
}

}  // namespace memplan::cli
