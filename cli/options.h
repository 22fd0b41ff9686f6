// Options shared by every subcommand that reads a model: the model path and its dimension bindings
// (ModelArgs, report/estimate_config.h), the output format, and the files commands read and write.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "report/estimate_config.h"

namespace memplan::cli {

// Adds MODEL, --dim, --batch, --input to `cmd`, storing into `args` (which must outlive parsing).
void add_model_options(CLI::App* cmd, ModelArgs& args);

// Refuses `path` as an output when it is the model itself (`flag` names the option in the message): memplan
// never overwrites what it reads. Throws InputError.
void refuse_model_as_output(const std::string& path, const std::string& model_path, const std::string& flag);

// The whole file; throws InputError "{flag} '{path}': cannot open" when it cannot be read.
std::string read_text_file(const std::string& path, const std::string& flag);

// Writes `text` to `path`, replacing it; throws InputError "cannot write {what}'{path}'" when that fails.
void write_text_file(const std::string& path, const std::string& text, const std::string& what = "");

enum class Format { Table, Json, Markdown };

struct FormatArgs {
  std::string format = "table";
  bool json = false;
  Format resolve() const;
};

// Adds --format table|json|markdown and --json (short for --format json).
void add_format_options(CLI::App* cmd, FormatArgs& args);

}  // namespace memplan::cli
