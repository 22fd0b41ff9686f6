// memplan export: a Hugging Face config.json's graph (--graph train|decode|prefill) as a weight-less ONNX file.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "report/export.h"

namespace memplan::cli {

Action add_export_command(CLI::App& app) {
  auto args = std::make_shared<CommandArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write the graph memplan builds from a Hugging Face config.json as a weight-less ONNX file (every parameter "
      "an initializer with its shape and no bytes): the graph the other commands analyse for that config, to open "
      "in Netron or to pass back to memplan as a file, with the same answers.\n"
      "  memplan export config.json --graph train -o llama_train.onnx\n"
      "  memplan export config.json --graph decode -o decoder_with_past.onnx");
  add_options(cmd, *args, kExport);
  return [args, cmd]() {
    check_options(cmd, *args, kExport);
    const ExportResult r = export_config(args->estimate.model, args->output);
    std::cerr << "memplan: " << export_summary_text(r);
    return 0;
  };
}

}  // namespace memplan::cli
