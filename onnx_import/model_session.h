// A model read once and shaped at many bindings. `estimate` shapes the user's binding and then, on a decoder with a
// KV cache, the cache's probes and its prefill and decode steps; `serve` and `fit` shape one file at the many
// values they search. The file is read and parsed once (read_model_file, on the first request), and a binding's
// Graph is shaped once and shared for as long as a caller holds it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "onnx_import/graph.h"
#include "onnx_import/hf_config.h"  // StoredQuantization, MlaDims, StatedKvCache
#include "onnx_import/import.h"

namespace memplan {

struct ReadModel;

// A graph input as the file declares it, before any binding: its name and each axis's symbolic dimension
// (dim_param), "" where the axis is a number or has neither; its numbers and element type. Initializers and
// inputs that declare no tensor shape are left out. What an analysis needs to choose the bindings it probes, or
// to read a stated cache's shapes (cost_models/kv_cache.h).
struct DeclaredInput {
  std::string name;
  std::vector<std::string> dims;
  std::vector<int64_t> values;  // each axis's dim_value where it states one, else -1
  DType dtype = DType::Undefined;  // its elem_type (Undefined where memplan does not know it)
};

class ModelSession {
 public:
  // Reads nothing yet. `graph`, `moe_routing`: --graph and --moe-routing, for a config.json (read_model_source,
  // onnx_import/hf_config.h). `vllm_serve`: read for serve --engine vllm (read_config_model's `vllm_serve`).
  // `experts`: --experts-implementation (read_config_model's).
  // `expert_parallel`: --ep N (read_config_model's).
  explicit ModelSession(std::string path, std::string graph = {}, std::string moe_routing = {}, bool vllm_serve = false,
                        std::string experts = {}, int expert_parallel = 1);
  ~ModelSession();
  ModelSession(const ModelSession&) = delete;
  ModelSession& operator=(const ModelSession&) = delete;

  const std::string& path() const { return path_; }
  // The parsed file (or the graph built from a config.json), read on the first call. Throws InputError as read_model_source does (every call, when it failed).
  const ReadModel& model();
  // import_model(model(), path(), bindings); while a caller still holds the graph of these bindings, that one.
  // Throws what import_model throws (the failure is not kept: asked again, the binding is shaped again).
  std::shared_ptr<const Graph> shape(const Bindings& bindings);
  // The model's position limit where its source states one (a config.json's max_position_embeddings), else 0
  // (from model(): throws as it does).
  int64_t max_positions();
  // The floating type the weights are stored in: a config.json's torch_dtype, else the type of most of the
  // floating initializers' bytes (Float32 when it has none, or names a type memplan does not know: "float32" is
  // what transformers assumes without one). From model(): throws as it does.
  DType stored_float_dtype();
  // A config.json's model_type; "" for an ONNX file.
  const std::string& model_type();
  // A config.json's quantization_config; method "" for an ONNX file or a config without one.
  const StoredQuantization& quantization();
  // ReadModel::sliding_window and sliding_layers: the window vLLM gives the layers, 0 and empty when none is stated.
  int64_t sliding_window();
  const std::vector<bool>& sliding_layers();
  // ReadModel::rotary_dim: the rotated part of head_dim a config.json states, else 0.
  int64_t rotary_dim();
  // ReadModel::rotary_tables and rotary_scaled (a config.json's; 0 and false for an ONNX file).
  int64_t rotary_tables();
  bool rotary_scaled();
  // ReadModel::mla: a deepseek_v3 config.json's latent attention (kv_lora_rank 0 for anything else).
  const MlaDims& mla();
  // ReadModel::kv_cache: the KV cache a config.json's decode graph states (no pairs for anything else).
  const StatedKvCache& stated_kv_cache();
  // The graph inputs as declared, in the file's order (from model(): throws as it does).
  const std::vector<DeclaredInput>& declared_inputs();

  int files_read() const { return files_read_; }     // 0 before the first request, then 1
  int graphs_shaped() const { return graphs_shaped_; }  // import_model calls so far

 private:
  std::string path_, graph_, moe_routing_, experts_;
  int expert_parallel_ = 1;
  bool vllm_serve_ = false;
  std::unique_ptr<const ReadModel> model_;
  std::optional<std::vector<DeclaredInput>> declared_inputs_;
  int files_read_ = 0, graphs_shaped_ = 0;
  // The graphs callers hold. A graph of a large model holds megabytes; keeping the graphs of a search after their
  // callers let go (serve's decode steps, fit's probes, never asked for twice) made serve on Llama-3.1-8B's
  // decoder half again slower, in malloc.
  std::map<Bindings, std::weak_ptr<const Graph>> graphs_;
};

// ModelSession::stored_float_dtype for the model at `path` without a session: a config.json's torch_dtype read
// without building its graph, an ONNX file's initializers. Throws InputError as read_model_source does.
DType stored_float_dtype_at(const std::string& path);

}  // namespace memplan
