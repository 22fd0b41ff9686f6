// The commands' own rules (report/option_checks.h command_rules): two options that exclude each other, or one a
// command needs, each written once and reached by the CLI and Python alike (validate_options).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "report/command_rules.h"
#include "report/option_choices.h"

namespace memplan {
namespace {

bool vllm(const CommandArgs& a) { return kServeEngineChoices.is(a.serve.engine, ServeEngine::Vllm); }
bool eager(const CommandArgs& a) { return kServeEngineChoices.is(a.serve.engine, ServeEngine::Eager); }
bool ortgenai(const CommandArgs& a) { return kServeEngineChoices.is(a.serve.engine, ServeEngine::Ortgenai); }

// An engine's own options (the schema rows' `engines`) under another engine: the first one given, named with its
// engines. --engine all takes an option when one of its rows' engines does (report/serve_engines.h: vllm, sglang,
// trtllm and ortgenai; eager is not a row).
std::string other_engines_option(const CommandArgs& a) {
  static const CommandArgs defaults;
  const std::string& engine = a.serve.engine;
  const bool all = kServeEngineChoices.is(engine, ServeEngine::All);
  for (const OptionSpec& row : option_schema()) {
    if (row.engines.empty() || !row.applies_to(kServe) || field_text(row, a) == field_text(row, defaults)) continue;
    const auto& e = row.engines;
    const bool applies = std::find(e.begin(), e.end(), engine) != e.end() ||
                         (all && std::any_of(e.begin(), e.end(), [](const std::string& x) { return x != "eager"; }));
    if (applies) continue;
    std::string names;
    for (size_t k = 0; k < e.size(); ++k) names += (k == 0 ? "" : k + 1 == e.size() ? " or " : ", ") + e[k];
    return row.message_name() + " applies to --engine " + names + " (this is --engine " + engine + ")";
  }
  return "";
}

}  // namespace

const std::vector<CommandRule>& command_rules() {
  using A = const CommandArgs&;
  static const std::vector<CommandRule> all = {
      {kCheck, "--metric applies to --baseline and --write-baseline; the ideal runtime reports total only",
       [](A a) -> std::string {
         if (a.metric == CheckArgs{}.metric) return "";
         if (a.baseline.empty() && a.write_baseline.empty())
           return "--metric " + a.metric + " chooses what --baseline compares and --write-baseline records: give one";
         return kRuntimeChoices.is(a.estimate.runtime, Runtime::Ideal)
                    ? "--metric " + a.metric + " with --runtime ideal: the ideal runtime has no allocator and reports "
                      "total only (--runtime pytorch or onnxruntime reports allocated, reserved and device)"
                    : "";
       }},
      {kFit | kServe, "--gpu and --memory exclude each other: one budget, a catalog GPU's or a size",
       [](A a) -> std::string {
         return !a.estimate.gpu.empty() && !a.memory.empty() ? "--gpu and --memory exclude each other: give one budget" : "";
       }},
      {kFit | kServe, "--arch needs --memory: without a budget the table runs each catalog GPU at its own architecture",
       [](A a) -> std::string {
         return a.estimate.gpu.empty() && a.memory.empty() && !a.estimate.arch.empty()
                    ? "--arch " + a.estimate.arch + ": the catalog table uses each GPU's own architecture; drop --arch "
                      "(or give --memory SIZE)"
                    : "";
       }},
      {kServe, "serve --engine eager needs --context (vllm takes the model's position limit)",
       [](A a) -> std::string {
         return !eager(a) || a.serve.context > 0
                    ? ""
                    : "serve --engine eager needs --context N: the tokens of one sequence (prompt and generated)";
       }},
      {kServe, "--max-loras and --max-lora-rank need --enable-lora",
       [](A a) -> std::string {
         const ServeSettings d;
         if (!a.serve.enable_lora && (a.serve.max_loras != d.max_loras || a.serve.max_lora_rank != d.max_lora_rank))
           return "--max-loras and --max-lora-rank need --enable-lora";
         return "";
       }},
      {kServe, "--quant-bits and --quant-group-size need --quantization gptq or awq",
       [](A a) -> std::string {
         const bool grouped = a.serve.quantization == "gptq" || a.serve.quantization == "awq";
         if (!grouped && (a.serve.quant_bits != 0 || a.serve.quant_group_size != 0))
           return "--quant-bits and --quant-group-size need --quantization gptq or awq";
         if (a.serve.quant_group_size == 0 && grouped) return "";
         if (a.serve.quantization == "awq" && a.serve.quant_group_size < 0)
           return "--quant-group-size " + std::to_string(a.serve.quant_group_size) + ": awq's groups are positive";
         return "";
       }},
      {kServe, "an engine's own options apply to that engine (--engine all: to one of its rows' engines)",
       [](A a) -> std::string { return other_engines_option(a); }},
      {kServe, "--free-gpu-memory-fraction is more than 0 and below 1",
       [](A a) -> std::string {
         const double f = a.serve.free_gpu_memory_fraction;  // 0: not set (None)
         return f < 0 || f >= 1 ? fmt::format("--free-gpu-memory-fraction {}: TensorRT-LLM needs more than 0 and less "
                                               "than 1 (KVCacheManager.calculate_max_num_blocks asserts it)", f)
                                  : "";
       }},
      {kServe, "--gpu-memory-utilization is more than 0",
       [](A a) -> std::string {
         // -1 (below the row's range, which a given value is checked against) is "not given".
         return a.serve.gpu_memory_utilization == 0 ? "--gpu-memory-utilization 0: vLLM needs more than 0 (at most 1)"
                                                    : "";
       }},
      {kServe, "--engine vllm runs on PyTorch: --runtime applies to --engine eager",
       [](A a) -> std::string {
         if (ortgenai(a))  // it runs on ONNX Runtime: the default (pytorch) is read as onnxruntime
           return kRuntimeChoices.is(a.estimate.runtime, Runtime::Ideal)
                      ? "--runtime ideal with --engine ortgenai: ONNX Runtime GenAI runs on ONNX Runtime's allocator"
                      : "";
         return !eager(a) && !kRuntimeChoices.is(a.estimate.runtime, Runtime::PyTorch)
                    ? "--runtime " + a.estimate.runtime + " with --engine " + a.serve.engine + ": vLLM, SGLang and "
                      "TensorRT-LLM's PyTorch backend run on PyTorch's caching allocator (--runtime applies to --engine "
                      "eager)"
                    : "";
       }},
      {kServe, "--moe-routing in serve applies to --engine eager",
       [](A a) -> std::string {
         return vllm(a) && !a.estimate.model.moe_routing.empty()
                    ? "--moe-routing with --engine vllm: vLLM's fused MoE kernel sizes its buffers by tokens x top-k "
                      "whatever the routing (--moe-routing applies to --engine eager)"
                    : "";
       }},
      {kServe, "--experts-implementation in serve applies to --engine eager",
       [](A a) -> std::string {
         return !eager(a) && !a.estimate.model.experts.empty()
                    ? "--experts-implementation with --engine " + a.serve.engine + ": the engine replaces the "
                      "experts with its own fused MoE kernel (--experts-implementation chooses transformers' "
                      "experts, --engine eager)"
                    : "";
       }},
      {kServe, "--tp in serve applies to --engine vllm",
       [](A a) -> std::string {
         if (ortgenai(a) && a.estimate.tp > 1) return "--tp with --engine ortgenai: not modelled (one GPU)";
         return eager(a) && a.estimate.tp > 1 ? "--tp with --engine eager: not modelled (serve --engine vllm models "
                                                 "vLLM's tensor parallelism)"
                                              : "";
       }},
  };
  return all;
}

}  // namespace memplan
