// memplan timeline: memory over the schedule as a self-contained SVG or HTML file.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/estimate_options.h"
#include "onnx_import/errors.h"
#include "report/timeline.h"

namespace memplan::cli {

Action add_timeline_command(CLI::App& app) {
  struct State {
    EstimateArgs args;
    std::string output;
  };
  auto state = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "timeline",
      "Memory over the schedule, stacked by category (weights, activations, gradients, optimizer states, workspace, "
      "allocator overhead), the peak marked with the tensors live there. A self-contained .svg or .html file.\n"
      "  memplan timeline resnet50.onnx --batch 32 --mode train -o resnet50.html");
  add_estimate_options(cmd, state->args);
  cmd->add_option("-o,--output", state->output, "FILE.svg or FILE.html")->required();
  return [state]() -> int {
    const std::string ext = std::filesystem::path(state->output).extension().string();
    if (ext != ".svg" && ext != ".html" && ext != ".htm")
      throw InputError("-o " + state->output + ": the file name must end in .svg or .html");
    refuse_model_as_output(state->output, state->args.model.path, "-o");
    const auto [graph, e, config] = estimate_model(state->args);
    const std::string text = ext == ".svg" ? timeline_svg(e, config) : timeline_html(e, config);
    write_text_file(state->output, text);
    std::cerr << "memplan: wrote " << state->output << "\n";
    return kExitOk;
  };
}

}  // namespace memplan::cli
