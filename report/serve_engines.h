// serve --engine sglang | trtllm | all: the other engines' start-up answers, each a short rule (cost_models/
// sglang_engine.h, cost_models/trtllm_engine.h) over the analysis serve --engine vllm already makes
// (report/serve_vllm.h): one rank's KV bytes per token over the layers, the weights in the served type, the profile
// forward's activation peak (attention as a kernel, the LM head on sampled rows only) and the memory outside
// PyTorch (--reserve). The weights are the graph's in the served type, without vLLM's own additions (its padded
// vocabulary rows, rotary cache and LoRA stacks), which the other engines' layers are not shown to make; SGLang's
// own are added back (its float32 rotary cache; MLA's w_kc and w_vc: cost_models/sglang_mla.h). Quantized weights:
// SGLang's layout of the analysis's linear modules in place of vLLM's (cost_models/sglang_weights.h); TensorRT-LLM's
// are refused.
// "memplan.serve.engine/1" (one engine) and "memplan.serve.engines/1" (--engine all: one row an engine), docs/json.md;
// the formats are report/serve_engines_format.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/fit.h"
#include "report/option_choices.h"
#include "report/serve_engine_answer.h"
#include "report/serve_probe.h"
#include "report/serve_vllm.h"

namespace memplan {

inline constexpr const char* kServeEngineSchema = "memplan.serve.engine/1";
inline constexpr const char* kServeEnginesSchema = "memplan.serve.engines/1";

// One engine (ServeEngine::Sglang or Trtllm) on one GPU or a --memory total (`gpu_name` ""), from the vLLM analysis
// of the same settings (for trtllm, shaped at --max-num-tokens). Throws InputError for what it does not model.
// `cuda`: an NVIDIA GPU (false: AMD's, ROCm), which SGLang's rotary cache and MLA backends depend on.
EngineAnswer serve_engine(ServeProbe& probe, const ServeSettings& settings, ServeEngine engine, int tp,
                          uint64_t total_memory, const std::string& gpu_name, const std::string& budget_source,
                          uint64_t non_torch, int capability, bool cuda);

// ONNX Runtime GenAI on one budget (`gpu_name` "" for --memory): the probe shaped on ONNX Runtime in the graph's
// own types; its context (--context, else the model's position limit) is search.max_length.
EngineAnswer serve_ortgenai(ServeProbe& probe, const ServeSettings& settings, const FitBudget& budget,
                            const std::string& gpu_name);

// --engine all: one row an engine for one model and GPU.
struct EngineRow {
  std::string engine, rules;
  uint64_t kv_cache_bytes = 0;   // what the engine gives its KV cache
  int64_t kv_tokens = 0;
  int64_t block_tokens = 0;      // vLLM's --block-size, SGLang's --page-size, TRT-LLM's --tokens-per-block
  double max_concurrency = 0;
  bool starts = false;
  std::string prints;            // the line it logs
  std::string not_modelled;      // why this engine's answer is not given ("" when it is)
};
struct EngineTable {
  std::string model, gpu, budget_source, dtype;
  int64_t context = 0;
  int tp = 1;
  uint64_t total_bytes = 0, kv_bytes_per_token = 0, weights_bytes = 0, non_torch_bytes = 0;
  std::vector<EngineRow> rows;
};
EngineTable serve_engines_table(ServeProbe& probe, const ServeSettings& settings, int tp, uint64_t total_memory,
                                const std::string& gpu_name, const std::string& budget_source,
                                const VllmNonTorch& non_torch, int capability, bool cuda);

// --engine all's ONNX Runtime GenAI row, from `answer` (serve_ortgenai on its own probe: the graph's types, ONNX
// Runtime); tp > 1 or what it does not model makes a row that says why.
void add_ortgenai_row(EngineTable& t, const std::function<EngineAnswer()>& answer);

nlohmann::ordered_json engine_to_json(const EngineAnswer& a);
std::string engine_to_text(const EngineAnswer& a);
nlohmann::ordered_json engines_table_to_json(const EngineTable& t);
std::string engines_table_to_text(const EngineTable& t);
std::string engines_table_to_markdown(const EngineTable& t);

}  // namespace memplan
