#include "zoo_programs.h"

#include <algorithm>
#include <filesystem>

#include "cost_models/cost_model.h"
#include "onnx_import/import.h"

namespace memplan {

std::vector<ZooModel> zoo_models(const std::string& models_dir) {
  std::vector<ZooModel> out;
  for (const auto& entry : std::filesystem::directory_iterator(models_dir)) {
    if (entry.path().extension() != ".onnx") continue;
    const std::string stem = entry.path().stem().string();
    const bool training = stem.size() > 6 && stem.compare(stem.size() - 6, 6, "_train") == 0;
    out.push_back({stem, entry.path().string(), training});
  }
  std::sort(out.begin(), out.end(), [](const ZooModel& a, const ZooModel& b) { return a.name < b.name; });
  return out;
}

Program zoo_program(const ZooModel& model, int64_t batch) {
  Bindings bindings;
  bindings.batch = batch;
  // The zoo's text models (docs/zoo.md) take [batch, seq] token ids.
  const auto has = [&](const char* part) { return model.name.find(part) != std::string::npos; };
  if (has("_kv") || has("_gqa")) {
    // The KV-cache decoders (docs/zoo.md, "Decoders with a KV cache"): one new token after 127 cached; the
    // prefill graph has no past; the merged decoder at a prefill (past 0), where both If branches agree.
    const bool prefill = has("_kv_prefill") || has("_kv_merged");
    bindings.dims["sequence_length"] = prefill ? 128 : 1;
    bindings.dims["total_sequence_length"] = 128;
    if (!has("_kv_prefill")) bindings.dims["past_sequence_length"] = prefill ? 0 : 127;
  } else {
    for (const char* text : {"gpt", "bert", "llama", "mistral", "qwen2"})
      if (model.name.rfind(text, 0) == 0) bindings.dims["seq"] = 128;
  }
  const Graph graph = import_model(model.path, bindings);
  if (model.training) {
    TrainingOptions options;  // PyTorch, Adam (foreach), fp32, steady state, the output seeding backward
    options.optimizer = Optimizer::Adam;
    options.loss = LossKind::None;
    return build_training_program(graph, ExecutionOptions{}, options).program;
  }
  return build_inference_program(graph, ExecutionOptions{}, InferenceOptions{}).program;  // PyTorch, fp32
}

}  // namespace memplan
