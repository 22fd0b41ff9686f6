// memplan inspect MODEL [--dim NAME=VALUE]... [--batch N] [--input NAME=SHAPE]... [--json]
// Describes a model: where it comes from, what it computes with, what it stores, and every tensor's shape.
// The JSON format is documented in docs/inspect-json.md.
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/options.h"
#include "onnx_import/errors.h"
#include "onnx_import/import.h"
#include "onnx_import/model_overview.h"
#include "report/inspect.h"
#include "report/json_text.h"

namespace memplan::cli {
namespace {

int run_inspect(const CLI::App* cmd, CommandArgs& args) {
  check_options(cmd, args, kInspect);
  const ModelArgs& model = args.estimate.model;
  const Bindings bindings = to_bindings(model);
  const Format format = output_format(args, kInspect);
  ModelOverview overview;
  std::optional<Graph> graph;
  try {
    graph = import_model(model.path, bindings, overview);
  } catch (const InputError&) {
    // The file was read but its shapes could not be inferred (say, an unbound dimension): show what the
    // file itself declares, then fail with the error. JSON promises a complete document, so it prints none.
    if (!overview.model_path.empty() && format != Format::Json) {
      std::cout << (format == Format::Markdown ? inspect_to_markdown(overview, std::nullopt)
                                               : inspect_to_text(overview, std::nullopt));
      std::cout.flush();
    }
    throw;
  }
  switch (format) {
    case Format::Json: std::cout << json_text(inspect_to_json(overview, *graph)); break;
    case Format::Markdown: std::cout << inspect_to_markdown(overview, graph); break;
    case Format::Table: std::cout << inspect_to_text(overview, graph); break;
  }
  return kExitOk;
}

}  // namespace

Action add_inspect_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Describe an ONNX model: producer, opsets, op counts, parameters and buffers, inputs and outputs, and the "
      "shape of every tensor at the dimensions you bind. Weights are never read.");
  auto args = std::make_shared<CommandArgs>();
  add_options(cmd, *args, kInspect);
  return [args, cmd] { return run_inspect(cmd, *args); };
}

}  // namespace memplan::cli
