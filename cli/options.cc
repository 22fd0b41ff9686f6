#include "cli/options.h"

#include <charconv>

#include "onnx_import/errors.h"

namespace memplan::cli {
namespace {

int64_t parse_dim_value(std::string_view text, const std::string& flag, const std::string& whole) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < 0)
    throw InputError(flag + " " + whole + ": '" + std::string(text) + "' is not a non-negative integer");
  return v;
}

}  // namespace

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

Bindings to_bindings(const ModelArgs& args) {
  Bindings b;
  for (const std::string& d : args.dims) {
    const size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--dim " + d + ": expected NAME=VALUE, e.g. --dim seq=512");
    const std::string name = d.substr(0, eq);
    if (b.dims.count(name)) throw InputError("--dim " + name + " is given twice");
    b.dims[name] = parse_dim_value(std::string_view(d).substr(eq + 1), "--dim", d);
  }
  if (args.batch >= 0) b.batch = args.batch;
  for (const std::string& in : args.inputs) {
    const size_t eq = in.rfind('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--input " + in + ": expected NAME=SHAPE, e.g. --input ids=8x512 (a scalar: NAME=scalar)");
    const std::string name = in.substr(0, eq);
    const std::string_view shape = std::string_view(in).substr(eq + 1);
    std::vector<int64_t> dims;
    if (shape != "scalar") {
      size_t start = 0;
      while (true) {
        const size_t x = shape.find('x', start);
        dims.push_back(parse_dim_value(shape.substr(start, x == std::string::npos ? x : x - start), "--input", in));
        if (x == std::string::npos) break;
        start = x + 1;
      }
    }
    if (b.input_shapes.count(name)) throw InputError("--input " + name + " is given twice");
    b.input_shapes[name] = std::move(dims);
  }
  return b;
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
