// memplan plan: the static arena plan (offsets and live ranges of every activation) as memplan.plan/1 JSON,
// which memplan-validate replays on a GPU or the host.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "onnx_import/errors.h"
#include "report/plan.h"

namespace memplan::cli {

Action add_plan_command(CLI::App& app) {
  auto args = std::make_shared<CommandArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Static arena plan for inference: one arena, an offset and an inclusive [first, last] step range per tensor "
      "(docs/plan-json.md). Several packing algorithms are run and the smallest arena kept; every plan is checked "
      "for overlaps before it is written.\n"
      "  memplan plan model.onnx --batch 8 -o model.plan.json && memplan-validate model.plan.json");
  add_options(cmd, *args, kPlan);
  return [args, cmd]() {
    check_options(cmd, *args, kPlan);
    const Plan plan = plan_model(args->estimate, args->alignment);
    const std::string text = plan_to_json_text(plan);
    const std::string summary = plan_summary_text(plan);
    if (args->output.empty() || args->output == "-") {
      switch (output_format(*args, kPlan)) {
        case Format::Json: std::cout << text; break;
        case Format::Table: std::cout << summary; break;
        case Format::Markdown: std::cout << plan_to_markdown(plan); break;
      }
    } else {
      refuse_model_as_output(args->output, args->estimate.model.path, "-o");
      write_text_file(args->output, text, "the plan to ");
      std::cerr << "memplan: wrote " << args->output << ": " << summary;
    }
    return 0;
  };
}

}  // namespace memplan::cli
