// memplan timeline: memory over the schedule as a self-contained SVG or HTML file.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "onnx_import/errors.h"
#include "report/timeline.h"

namespace memplan::cli {

Action add_timeline_command(CLI::App& app) {
  auto args = std::make_shared<CommandArgs>();
  CLI::App* cmd = app.add_subcommand(
      "timeline",
      "Memory over the schedule, stacked by category (weights, activations, gradients, optimizer states, workspace, "
      "allocator overhead), the peak marked with the tensors live there. A self-contained .svg or .html file.\n"
      "  memplan timeline resnet50.onnx --batch 32 --mode train -o resnet50.html");
  add_options(cmd, *args, kTimeline);
  return [args, cmd]() -> int {
    check_options(cmd, *args, kTimeline);
    const std::string& output = args->output;
    const std::string ext = std::filesystem::path(output).extension().string();
    if (ext != ".svg" && ext != ".html" && ext != ".htm")
      throw InputError("-o " + output + ": the file name must end in .svg or .html");
    refuse_model_as_output(output, args->estimate.model.path, "-o");
    const auto [graph, e, config, options] = estimate_model(args->estimate);
    const std::string text = ext == ".svg" ? timeline_svg(e, config) : timeline_html(e, config);
    write_text_file(output, text);
    std::cerr << "memplan: wrote " << output << "\n";
    return kExitOk;
  };
}

}  // namespace memplan::cli
