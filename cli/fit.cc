// memplan fit: the largest batch (or any symbolic dimension) whose predicted peak fits a GPU or a budget.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/json_text.h"
#include "cli/estimate_options.h"
#include "onnx_import/errors.h"
#include "onnx_import/import.h"
#include "report/estimate_format.h"
#include "report/fit.h"
#include "report/gpu_catalog.h"
#include "report/sizes.h"

namespace memplan::cli {
namespace {

inline constexpr const char* kFitSchema = "memplan.fit/1";

struct FitArgs {
  EstimateArgs args;
  FormatArgs format;
  std::string gpu, memory, search = "batch", catalog, reserve;
  double headroom = 0;
  int64_t global_batch = 0;
  int64_t max_value = int64_t{1} << 20;
};

// Estimates with the searched dimension bound to `value`.
Estimate estimate_at(const FitArgs& f, const EstimateOptions& options, int64_t value) {
  Bindings b = to_bindings(f.args.model);
  if (f.search == "batch") b.batch = value;
  else b.dims[f.search] = value;
  return estimate_graph(import_model(f.args.model.path, b), options);
}

uint64_t apply_headroom(uint64_t budget, double pct) {
  return static_cast<uint64_t>(static_cast<double>(budget) * (1.0 - pct / 100.0));
}

nlohmann::ordered_json brief(const Estimate& e) {
  return {{"total_bytes", e.total_bytes}, {"allocated_bytes", e.allocated_bytes}, {"reserved_bytes", e.reserved_bytes}};
}

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
  auto* gpu = cmd->add_option("--gpu", f->gpu, "A GPU from the catalog: its memory minus the catalog's context reserve");
  auto* mem = cmd->add_option("--memory", f->memory, "The budget exactly as given, e.g. 24GiB (= 24 x 2^30), 24GB (= 24 x 10^9)");
  gpu->excludes(mem);
  cmd->add_option("--search", f->search, "The dimension to maximise: batch (binds --batch) or a symbolic dim name")
      ->capture_default_str();
  cmd->add_option("--headroom", f->headroom, "Keep this percent of the budget free")
      ->check(CLI::Range(0.0, 99.0))
      ->capture_default_str();
  cmd->add_option("--global-batch", f->global_batch, "Also say the gradient accumulation that reaches this global batch")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--catalog", f->catalog, "A GPU catalog file replacing the built-in one (schema: report/gpu_catalog.json)");
  cmd->add_option("--reserve", f->reserve, "Memory outside the allocator per GPU (CUDA context); default: the catalog's");
  cmd->add_option("--max", f->max_value, "Largest value to consider")->check(CLI::PositiveNumber)->capture_default_str();
  add_format_options(cmd, f->format);

  return [f]() -> int {
    if (f->search == "batch" && f->args.model.batch >= 0)
      throw InputError("fit searches the batch: drop --batch (or use --search DIM to search another dimension)");
    if (f->search != "batch")
      for (const std::string& d : f->args.model.dims)
        if (d.rfind(f->search + "=", 0) == 0) throw InputError("fit searches " + f->search + ": drop --dim " + d);
    const EstimateOptions options = to_estimate_options(f->args);
    const GpuCatalog catalog = f->catalog.empty() ? builtin_gpu_catalog() : load_gpu_catalog(f->catalog);
    const uint64_t reserve = f->reserve.empty() ? catalog.context_reserve_bytes : parse_size(f->reserve, "--reserve");
    auto bytes_at = [&](int64_t v) { return estimate_at(*f, options, v).total_bytes; };
    const Format format = f->format.resolve();

    if (f->gpu.empty() && f->memory.empty()) {
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      std::string table = fmt::format("largest {} that fits, {}\n  {:<12}{:>12}{:>12}{:>10}\n", f->search,
                                      f->args.mode, "GPU", "memory", "budget", f->search);
      std::string md = fmt::format("| GPU | memory | budget | largest {} |\n|---|---:|---:|---:|\n", f->search);
      for (const GpuSpec& g : catalog.gpus) {
        const uint64_t budget = apply_headroom(g.memory_bytes > reserve ? g.memory_bytes - reserve : 0, f->headroom);
        const FitResult r = fit_search(bytes_at, budget, 1, f->max_value);
        const std::string v = r.any_fits ? std::to_string(r.value) : "none";
        table += fmt::format("  {:<12}{:>12}{:>12}{:>10}\n", g.name, format_bytes(g.memory_bytes), format_bytes(budget), v);
        md += fmt::format("| {} | {} | {} | {} |\n", g.name, format_bytes(g.memory_bytes), format_bytes(budget), v);
        rows.push_back({{"gpu", g.name}, {"memory_bytes", g.memory_bytes}, {"budget_bytes", budget},
                        {"value", r.any_fits ? nlohmann::ordered_json(r.value) : nlohmann::ordered_json(nullptr)}});
      }
      if (format == Format::Json)
        std::cout << json_text(nlohmann::ordered_json{{"schema", kFitSchema}, {"model", f->args.model.path}, {"search", f->search},
                                            {"reserve_bytes", reserve}, {"gpus", rows}});
      else
        std::cout << (format == Format::Markdown ? md : table + fmt::format("  (budget = memory - {} reserve for the "
                                                                            "CUDA context; GiB = 2^30 bytes)\n",
                                                                            format_bytes(reserve)));
      return 0;
    }

    uint64_t budget = 0;
    std::string budget_source;
    if (!f->gpu.empty()) {
      const GpuSpec& g = catalog.find(f->gpu);
      budget = g.memory_bytes > reserve ? g.memory_bytes - reserve : 0;
      budget_source = fmt::format("{} ({} - {} context reserve)", g.name, format_bytes(g.memory_bytes), format_bytes(reserve));
    } else {
      budget = parse_size(f->memory, "--memory");
      budget_source = "--memory " + f->memory;
    }
    budget = apply_headroom(budget, f->headroom);
    const FitResult r = fit_search(bytes_at, budget, 1, f->max_value);

    nlohmann::ordered_json j{{"schema", kFitSchema}, {"model", f->args.model.path}, {"search", f->search},
                             {"budget_bytes", budget}, {"budget_source", budget_source}, {"headroom_percent", f->headroom}};
    std::string text;
    if (!r.any_fits) {
      j["value"] = nullptr;
      j["estimate_at_min"] = {{"total_bytes", r.bytes_at_value}};
      text = fmt::format("nothing fits: {} = 1 needs {}, the budget is {} ({})\n", f->search, format_bytes(r.bytes_at_value),
                         format_bytes(budget), budget_source);
    } else {
      const Estimate at = estimate_at(*f, options, r.value);
      j["value"] = r.value;
      j["estimate_at_value"] = brief(at);
      text = fmt::format("largest {} that fits: {}\n  {} = {} needs {} ({} B)\n", f->search, r.value, f->search,
                         r.value, format_bytes(at.total_bytes), format_count(at.total_bytes));
      if (r.next_evaluated) {
        j["estimate_at_next"] = {{"total_bytes", r.bytes_at_next}};
        text += fmt::format("  {} = {} needs {} ({} B)\n", f->search, r.value + 1, format_bytes(r.bytes_at_next),
                            format_count(r.bytes_at_next));
      } else {
        j["estimate_at_next"] = nullptr;
        text += fmt::format("  (the search stopped at --max {})\n", f->max_value);
      }
      text += fmt::format("  budget {} ({} B): {}\n", format_bytes(budget), format_count(budget), budget_source);
      if (f->global_batch > 0 && f->search == "batch") {
        const int64_t per_step = r.value * f->args.gpus;
        const int64_t accum = (f->global_batch + per_step - 1) / per_step;
        const int64_t micro = (f->global_batch + accum * f->args.gpus - 1) / (accum * f->args.gpus);
        j["global_batch"] = {{"global_batch", f->global_batch}, {"micro_batch", micro}, {"grad_accum", accum},
                             {"gpus", f->args.gpus}};
        text += fmt::format("  global batch {}: micro-batch {} x {} accumulation steps x {} GPU(s)\n", f->global_batch,
                            micro, accum, f->args.gpus);
      }
    }
    j["evaluations"] = r.evaluations;
    if (format == Format::Json) std::cout << json_text(j);
    else if (format == Format::Markdown) std::cout << "```\n" << text << "```\n";
    else std::cout << text;
    return r.any_fits ? kExitOk : kExitLimitExceeded;
  };
}

}  // namespace memplan::cli
