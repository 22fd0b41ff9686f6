#include "cli/options.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "onnx_import/errors.h"

namespace memplan::cli {

void add_model_options(CLI::App* cmd, ModelArgs& args) {
  cmd->add_option("MODEL", args.path, "ONNX model file (weights are never read; external data is never opened)")
      ->required();
  cmd->add_option("--dim", args.dims, "Bind a symbolic dimension by name, e.g. --dim seq=512 (repeatable)")
      ->type_name("NAME=VALUE");
  cmd->add_option("--batch", args.batch, "Bind the leading dimension of every graph input whose leading dimension is symbolic")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--input", args.inputs,
                  "Fix one graph input's whole shape, as trtexec --shapes does, e.g. --input ids=8x512 (repeatable)")
      ->type_name("NAME=SHAPE");
}

void refuse_model_as_output(const std::string& path, const std::string& model_path, const std::string& flag) {
  std::error_code ec;
  if (std::filesystem::equivalent(path, model_path, ec))
    throw InputError(flag + " " + path + " is the model itself: memplan never overwrites what it reads");
}

std::string read_text_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(flag + " '" + path + "': cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << text) || !out.flush()) throw InputError("cannot write " + what + "'" + path + "'");
}

Format FormatArgs::resolve() const {
  if (json) return Format::Json;
  if (format == "json") return Format::Json;
  if (format == "markdown") return Format::Markdown;
  return Format::Table;
}

void add_format_options(CLI::App* cmd, FormatArgs& args) {
  cmd->add_option("--format", args.format, "Output format: table (for people), json (for scripts; see docs/json.md), "
                                           "markdown (for pull-request comments)")
      ->check(CLI::IsMember({"table", "json", "markdown"}))
      ->capture_default_str();
  cmd->add_flag("--json", args.json, "Short for --format json");
}

}  // namespace memplan::cli
