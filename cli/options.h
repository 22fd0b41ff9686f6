// Options shared by every subcommand that reads a model: the model path and its dimension bindings
// (ModelArgs, report/estimate_config.h) and the output format. The files commands read and write: report/files.h.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "report/estimate_config.h"
#include "report/files.h"

namespace memplan::cli {

// Adds MODEL, --dim, --batch, --input, --value to `cmd`, storing into `args` (which must outlive parsing).
void add_model_options(CLI::App* cmd, ModelArgs& args);

enum class Format { Table, Json, Markdown };

struct FormatArgs {
  std::string format = "table";
  bool json = false;
  Format resolve() const;
};

// Adds --format table|json|markdown and --json (short for --format json).
void add_format_options(CLI::App* cmd, FormatArgs& args);

}  // namespace memplan::cli
