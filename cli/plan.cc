// memplan plan: the static arena plan (offsets and live ranges of every activation) as memplan.plan/1 JSON,
// which memplan-validate replays on a GPU or the host.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/estimate_options.h"
#include "cli/options.h"
#include "onnx_import/errors.h"
#include "report/plan.h"

namespace memplan::cli {

Action add_plan_command(CLI::App& app) {
  struct State {
    EstimateArgs args;
    std::string output;
    uint64_t alignment = kDefaultAlignment;
    FormatArgs format;
  };
  auto state = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Static arena plan for inference: one arena, an offset and an inclusive [first, last] step range per tensor "
      "(docs/plan-json.md). Several packing algorithms are run and the smallest arena kept; every plan is checked "
      "for overlaps before it is written.\n"
      "  memplan plan model.onnx --batch 8 -o model.plan.json && memplan-validate model.plan.json");
  add_model_options(cmd, state->args.model);
  cmd->add_option("--runtime", state->args.runtime, "Cost model whose buffers are planned: ideal, pytorch, onnxruntime")
      ->check(CLI::IsMember(runtime_names()))
      ->capture_default_str();
  cmd->add_option("--dtype", state->args.dtype, "Float storage type: fp32, fp16, bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--schedule", state->args.schedule, "model or memory (memory-aware order)")
      ->check(CLI::IsMember({"model", "memory"}))
      ->capture_default_str();
  cmd->add_option("--alignment", state->alignment, "Offset alignment in bytes (cudaMalloc aligns to 256)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-o,--output", state->output, "Write the plan here (default: standard output)");
  state->format.format = "json";
  add_format_options(cmd, state->format);
  cmd->get_option("--format")->description(
      "What goes to standard output without -o: json (the plan file), table or markdown (a summary)");
  return [state]() {
    const Plan plan = plan_model(state->args, state->alignment);
    const std::string text = plan_to_json_text(plan);
    const std::string summary = plan_summary_text(plan);
    if (state->output.empty() || state->output == "-") {
      switch (state->format.resolve()) {
        case Format::Json: std::cout << text; break;
        case Format::Table: std::cout << summary; break;
        case Format::Markdown: std::cout << plan_to_markdown(plan); break;
      }
    } else {
      refuse_model_as_output(state->output, state->args.model.path, "-o");
      write_text_file(state->output, text, "the plan to ");
      std::cerr << "memplan: wrote " << state->output << ": " << summary;
    }
    return 0;
  };
}

}  // namespace memplan::cli
