#include "cli/options.h"

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
                  "Fix one graph input's whole shape, as trtexec --shapes does, e.g. --input ids=8x512 (repeatable); "
                  "a sequence input's tensors: --input s=seq(2x3,4x3); an optional input that holds nothing: --input o=none")
      ->type_name("NAME=SHAPE");
  cmd->add_option("--value", args.values,
                  "Bind the contents of a scalar or small 1-D integer/bool/float graph input, so shape computations and "
                  "If conditions that read it resolve, e.g. --value use_cache_branch=1, --value sr=16000 (repeatable)")
      ->type_name("NAME=V[,V...]");
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
