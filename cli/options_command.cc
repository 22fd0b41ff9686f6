// memplan options: every option of every command and the refused feature pairs, as Markdown (docs/options.md).
#include <iostream>

#include "cli/commands.h"
#include "onnx_import/errors.h"
#include "report/options.h"

namespace memplan::cli {

Action add_options_command(CLI::App& app) {
  app.add_subcommand("options",
                     "Every option of every command (its Python keyword, values, default, mode and commands) and the "
                     "feature pairs that are refused, as Markdown: docs/options.md is this output.\n"
                     "  memplan options > docs/options.md");
  return [] {
    std::cout << options_markdown();
    return kExitOk;
  };
}

}  // namespace memplan::cli
