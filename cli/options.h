// Options shared by every subcommand that reads a model: the model path and its dimension bindings,
// and the output format.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "onnx_import/import.h"

namespace memplan::cli {

struct ModelArgs {
  std::string path;
  std::vector<std::string> dims;    // NAME=VALUE
  int64_t batch = -1;               // -1: not given
  std::vector<std::string> inputs;  // NAME=2x512
};

// Adds MODEL, --dim, --batch, --input to `cmd`, storing into `args` (which must outlive parsing).
void add_model_options(CLI::App* cmd, ModelArgs& args);

// Turns the parsed strings into Bindings; throws InputError with the flag named on malformed values.
Bindings to_bindings(const ModelArgs& args);

enum class Format { Table, Json, Markdown };

struct FormatArgs {
  std::string format = "table";
  bool json = false;
  Format resolve() const;
};

// Adds --format table|json|markdown and --json (short for --format json).
void add_format_options(CLI::App* cmd, FormatArgs& args);

}  // namespace memplan::cli
