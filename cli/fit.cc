// memplan fit: the largest batch (or any symbolic dimension) whose predicted peak fits a GPU or a budget.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/estimate_options.h"
#include "onnx_import/errors.h"
#include "report/fit.h"
#include "report/gpu_catalog.h"
#include "report/json_text.h"
#include "report/sizes.h"

namespace memplan::cli {
namespace {

struct FitArgs {
  EstimateArgs args;
  FormatArgs format;
  FitSettings settings;
  std::string memory, reserve;
};

}  // namespace

Action add_fit_command(CLI::App& app) {
  auto f = std::make_shared<FitArgs>();
  CLI::App* cmd = app.add_subcommand(
      "fit",
      "The largest batch (or --search DIM) whose predicted peak fits: estimate(value) <= budget < estimate(value + 1).\n"
      "Without --gpu or --memory, a table over the built-in GPU catalog.\n"
      "  memplan fit resnet50.onnx --gpu A100-80GB --mode train --precision amp-bf16\n"
      "  memplan fit gpt.onnx --memory 24GiB --search seq --batch 8");
  add_estimate_options(cmd, f->args);
  auto* mem = cmd->add_option("--memory", f->memory, "The budget exactly as given, e.g. 24GiB (= 24 x 2^30), 24GB (= 24 x 10^9)");
  cmd->get_option("--gpu")->excludes(mem);
  cmd->add_option("--search", f->settings.search, "The dimension to maximise: batch (binds --batch) or a symbolic dim name")
      ->capture_default_str();
  cmd->add_option("--headroom", f->settings.headroom_percent, "Keep this percent of the budget free")
      ->check(CLI::Range(0.0, 99.0))
      ->capture_default_str();
  cmd->add_option("--global-batch", f->settings.global_batch,
                  "Also say the gradient accumulation that reaches this global batch")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--reserve", f->reserve, "Memory outside the allocator per GPU (CUDA context); default: the catalog's");
  cmd->add_option("--max", f->settings.max_value, "Largest value to consider")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_format_options(cmd, f->format);

  return [f]() -> int {
    const std::string& search = f->settings.search;
    if (search == "batch" && f->args.model.batch >= 0)
      throw InputError("fit searches the batch: drop --batch (or use --search DIM to search another dimension)");
    if (search != "batch")
      for (const std::string& d : f->args.model.dims)
        if (d.rfind(search + "=", 0) == 0) throw InputError("fit searches " + search + ": drop --dim " + d);
    const EstimateOptions options = to_estimate_options(f->args);
    const std::string& gpu = f->args.gpu;
    if (gpu.empty() && f->memory.empty() && !f->args.arch.empty())
      throw InputError("--arch " + f->args.arch + ": the catalog table uses each GPU's own architecture; drop --arch "
                       "(or give --memory SIZE)");
    const GpuCatalog catalog = gpu_catalog_from(f->args.catalog);
    const uint64_t reserve = f->reserve.empty() ? catalog.context_reserve_bytes : parse_size(f->reserve, "--reserve");
    const Format format = f->format.resolve();
    // Flags are checked in the order they always were: the bindings (read at the first probe) come last.
    auto make_probe = [&] { return FitProbe(f->args.model.path, to_bindings(f->args.model), search, options); };

    if (gpu.empty() && f->memory.empty()) {
      FitProbe probe = make_probe();
      const FitTable t = fit_catalog(probe, f->settings, catalog, reserve);
      std::cout << (format == Format::Json       ? json_text(fit_table_to_json(t))
                    : format == Format::Markdown ? fit_table_to_markdown(t)
                                                 : fit_table_to_text(t));
      return kExitOk;
    }
    const FitBudget budget = gpu.empty() ? FitBudget{parse_size(f->memory, "--memory"), "--memory " + f->memory}
                                         : gpu_budget(catalog.find(gpu), reserve);
    FitProbe probe = make_probe();
    const FitAnswer a = fit_budget(probe, f->settings, budget);
    std::cout << (format == Format::Json       ? json_text(fit_to_json(a))
                  : format == Format::Markdown ? fit_to_markdown(a)
                                               : fit_to_text(a));
    return a.result.any_fits ? kExitOk : kExitLimitExceeded;
  };
}

}  // namespace memplan::cli
