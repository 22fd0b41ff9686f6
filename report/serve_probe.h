// serve's settings and its probe of a decoder's steps: what both engines (report/serve.h's eager search,
// report/serve_vllm.h's vLLM rule) read the model through.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cost_models/engine_kernels.h"
#include "cost_models/kv_cache.h"
#include "cost_models/paged_kv.h"
#include "cost_models/trtllm_engine.h"
#include "cost_models/vllm_engine.h"
#include "onnx_import/model_session.h"
#include "report/estimate.h"
#include "report/estimate_config.h"
#include "report/gpu_catalog.h"

namespace memplan {

// Whether an engine answers over vLLM's analysis (report/serve_vllm.h): vllm, sglang, trtllm and all do; eager and
// ortgenai run the exported graph as it is.
inline bool uses_vllm_analysis(const std::string& engine) { return engine != "eager" && engine != "ortgenai"; }

struct ServeSettings {
  // --engine: vllm (vLLM's V1 engine sizing its cache as it does at start-up: report/serve_vllm.h), eager
  // (PyTorch eager running the exported graph, its steps searched as below), sglang, trtllm, ortgenai or all
  // (report/serve_engines.h).
  std::string engine = "vllm";
  int64_t context = 0;             // --context N: tokens per sequence (prompt and generated); 0: the model's limit
  int64_t max_batched_tokens = 0;  // --max-batched-tokens T: the prefill step's tokens; 0: the context
  int64_t block_size = kDefaultBlockSize;
  bool block_size_given = false;   // --block-size given (report/option_checks.cc settle_options): vLLM's MLA backends
                                   // from 0.17.1 take their own preferred block when it is not (vllm_mla_choice)
  std::string kv_dim;              // --kv-dim NAME: the dimension of cached tokens, when several qualify
  // --kv-cache-dtype: auto (the cache in the model's storage type) or an fp8 type. vLLM stores every fp8 choice
  // as one byte per element (vllm/utils STR_DTYPE_TO_TORCH_DTYPE: "fp8", "fp8_e4m3", "fp8_e5m2" -> torch.uint8)
  // with one scalar scale per layer's keys and values (Attention's _k_scale/_v_scale), which is not counted.
  std::string kv_cache_dtype = "auto";
  double headroom_percent = 0;     // eager: keep this percent of the budget free
  // vllm: --gpu-memory-utilization (-1, below its range: not given, the release's default, vllm_gpu_memory_utilization)
  // and --max-num-seqs (0: vLLM's default for the GPU).
  double gpu_memory_utilization = -1;
  int64_t max_num_seqs = 0;
  // vllm: --enable-lora with vLLM's --max-loras (1) and --max-lora-rank (16) defaults (vllm/config/lora.py).
  bool enable_lora = false;
  int64_t max_loras = 1, max_lora_rank = 16;
  // vllm: --enable-expert-parallel (vLLM's; a mixture of experts' FusedMoE layers split by whole experts over the
  // --tp GPUs, cost_models/vllm_expert_parallel.h).
  bool enable_expert_parallel = false;
  // vllm: --data-parallel-size (vLLM's, default 1): engines of --tp GPUs each, every one with its own KV cache; a
  // mixture of experts' experts over all dp x tp GPUs with --enable-expert-parallel (cost_models/
  // vllm_expert_parallel.h); a dense model's ranks are replicas of the one-rank answer.
  int data_parallel_size = 1;
  // vllm: --quantization (vLLM's; "": the checkpoint's quantization_config, if any), with the layout's bits and
  // group size where the file does not state them (0: the config's, else 4 bits and groups of 128).
  std::string quantization;
  int64_t quant_bits = 0, quant_group_size = 0;
  // vllm: --engine-version (whose start-up rule: cost_models/vllm_engine.h VllmVersion) and --enforce-eager
  // (vLLM's: no CUDA graphs captured).
  std::string engine_version = "0.11";
  bool engine_version_given = false;  // --engine-version given (settle_options): the answer says when the default ran
  bool enforce_eager = false;
  // vllm: --usage-context serve|llm|engine, how vLLM is started (cost_models/vllm_engine.h VllmUsageContext).
  std::string usage_context = "serve";
  std::string performance_mode = "balanced";  // vllm: --performance-mode (cost_models/vllm_engine.h)
  // vllm: --cuda-graph-memory SIZE, the CUDA graphs' estimate vLLM logs and subtracts from 0.20 ("": not given).
  std::string cuda_graph_memory;
  std::string model_runner = "auto";  // vllm: --model-runner (cost_models/vllm_engine.h VllmModelRunner)
  std::string mxfp4_backend = "auto";  // vllm: --mxfp4-backend (cost_models/mxfp4_experts.h vllm_mxfp4_backend)
  std::string flashinfer = "auto";     // vllm: --flashinfer (report/serve_vllm.h VllmResolved::flashinfer)
  // sglang (cost_models/sglang_engine.h): --mem-fraction-static (0: SGLang's default for the GPU),
  // --max-total-tokens (0: none), --chunked-prefill-size (0: SGLang's default for the GPU) and --page-size (SGLang's
  // ServerArgs.page_size default 1).
  double mem_fraction_static = 0;
  int64_t max_total_tokens = 0, chunked_prefill_size = 0, page_size = 1;
  // sglang, a hybrid sliding-window model (cost_models/sglang_swa.h): --swa-full-tokens-ratio (ServerArgs'
  // default 0.8) and --disable-hybrid-swa-memory (one pool over every layer).
  double swa_full_tokens_ratio = 0.8;
  bool disable_hybrid_swa_memory = false;
  // trtllm (cost_models/trtllm_engine.h): --free-gpu-memory-fraction (0: not set, KvCacheConfig's None, which the
  // estimate reads as 0.9), --tokens-per-block and --max-num-tokens (the profiling run's tokens), TensorRT-LLM's
  // defaults.
  double free_gpu_memory_fraction = 0;
  int64_t tokens_per_block = kTrtllmDefaultTokensPerBlock, max_num_tokens = kTrtllmDefaultMaxNumTokens;
};

// One step's estimate, KV cache excluded.
struct ServeStep {
  int64_t batch = 0, cached_tokens = 0, new_tokens = 0;
  uint64_t required_bytes = 0;        // the estimate's required_bytes (weights included)
  uint64_t activation_peak_bytes = 0; // required_bytes - weights_bytes
};

// The model's steps at many batches and contexts: the file is read once (a ModelSession), every step remembered.
class ServeProbe {
 public:
  ServeProbe(std::string path, Bindings user, const ServeSettings& settings, EstimateOptions options);
  const KvCache& kv() const { return kv_; }
  // The weights: resident for the whole step, the same at every batch and context (estimated on first use: the
  // vLLM engine takes them from its own profile step).
  uint64_t weights_bytes();
  ServeStep prefill();
  // A prompt step: `batch` sequences of `tokens` new tokens each, nothing cached.
  ServeStep prompt(int64_t batch, int64_t tokens) { return step(batch, 0, tokens); }
  ServeStep decode(int64_t batch, int64_t cached_tokens);
  // The model shaped for one step (the cache's dimensions bound as kv_step_bindings binds them). The graphs of
  // these steps are kept for the probe's life: vLLM's profile run of a catalog's GPUs asks for the same one or two
  // steps (vllm_step_defaults' 8192 or 2048 tokens) once per GPU, each a full import of the model.
  std::shared_ptr<const Graph> shape_step(int64_t batch, int64_t cached, int64_t fresh);
  // find_engine_kernel_sites on a graph shape_step returned, with the cache's present outputs; found once a graph.
  const EngineKernelSites& kernel_sites(const std::shared_ptr<const Graph>& step);
  // The GPU a catalog table's row answers for: its architecture and, under vLLM's --dtype auto, the type auto serves
  // on it (bfloat16 from 8.0, float16 below), with the cache's bytes in that type.
  void use_gpu_architecture(const GpuSpec& gpu);
  const EstimateOptions& options() const { return options_; }
  // Whether the served type is vLLM's --dtype auto's (memplan's --dtype left as stored), and the stored type.
  bool auto_dtype() const { return auto_dtype_; }
  DType stored_float_dtype() { return session_.stored_float_dtype(); }
  const std::string& path() const { return session_.path(); }
  // A config.json's quantization_config (method "": none; an ONNX file states none).
  const StoredQuantization& stored_quantization() { return session_.quantization(); }
  // The model's position limit (ReadModel::max_positions: a config.json's max_position_embeddings); 0: unknown.
  int64_t max_positions() { return session_.max_positions(); }
  // The window vLLM gives the attention layers and which layers it windows (ReadModel::sliding_window and
  // sliding_layers: a mistral config.json's, read for --engine vllm); 0 and empty: none stated.
  int64_t sliding_window() { return session_.sliding_window(); }
  const std::vector<bool>& sliding_layers() { return session_.sliding_layers(); }
  // The rotated part of head_dim a config.json states (Phi-3's partial_rotary_factor); 0: not stated.
  int64_t rotary_dim() { return session_.rotary_dim(); }
  // The rotary tables of distinct configurations (Gemma 3: local and global) and whether a linear rope_scaling
  // stretches one; 0 and false for an ONNX file.
  int64_t rotary_tables() { return session_.rotary_tables(); }
  bool rotary_scaled() { return session_.rotary_scaled(); }
  // A deepseek_v3 config.json's multi-head latent attention (ReadModel::mla; kv_lora_rank 0: none).
  const MlaDims& mla() { return session_.mla(); }
  // A config.json's model_type ("" for an ONNX file).
  const std::string& model_type() { return session_.model_type(); }

 private:
  ServeStep step(int64_t batch, int64_t cached, int64_t fresh);
  // The served type (vLLM's --dtype auto's on options_'s architecture, when auto_dtype_) and the cache in it.
  void serve_in_type();
  DType auto_served_dtype();  // vLLM's --dtype auto's type on options_'s architecture (vllm_auto_dtype)

  ModelSession session_;
  Bindings user_;
  ServeSettings settings_;
  EstimateOptions options_;
  KvCache kv_;
  bool auto_dtype_ = false;
  std::optional<uint64_t> weights_bytes_;
  std::vector<std::shared_ptr<const Graph>> steps_shaped_;  // shape_step's graphs, kept
  std::map<const Graph*, EngineKernelSites> sites_;          // kernel_sites' answers, by graph of steps_shaped_
  // (arch, batch, cached, new) -> required bytes; nullopt: the shape overflows
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, std::optional<uint64_t>> memo_;
};

}  // namespace memplan
