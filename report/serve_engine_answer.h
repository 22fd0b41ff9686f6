// What serve --engine sglang | trtllm | ortgenai answers (report/serve_engines.h: the rules, the formats), and what
// every engine's answer takes from the vLLM analysis.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost_models/mxfp4_experts.h"
#include "cost_models/sglang_engine.h"
#include "cost_models/sglang_swa.h"
#include "cost_models/trtllm_engine.h"
#include "report/serve_vllm.h"

namespace memplan {

struct SglangAnswer {
  double gpu_mem_mib = 0;              // the GPU's memory in MiB, as SGLang's get_device_memory_capacity reads it
  int64_t chunked_prefill_size = 0, cuda_graph_max_bs = 0;
  bool default_chunked_prefill_size = false;
  double mem_fraction_static = 0, reserved_mib = 0;  // reserved_mib 0: --mem-fraction-static given
  int64_t page_size = 1, max_total_tokens = 0;       // max_total_tokens 0: not given
  uint64_t rotary_cache_bytes = 0;     // RotaryEmbedding's cos_sin_cache in float32 (0: the position limit unknown)
  // Multi-head latent attention (cost_models/sglang_mla.h): the attention backend SGLang picks ("" for any other
  // model) and the w_kc / w_vc copies post_load_weights adds to kv_b_proj, both in the weights.
  std::string mla_backend;
  uint64_t mla_absorbed_bytes = 0;
  // Quantized weights (cost_models/sglang_weights.h; method "": none): the linear modules as SGLang holds them in
  // place of the analysis's vLLM layout (vllm_linear_bytes), routers SGLang keeps in the model's type among them, and
  // the fp8 experts, whose layout is vLLM's (in both weights terms).
  struct Quantization {
    std::string method, source, layout;
    int modules = 0, routers = 0;
    uint64_t linear_bytes = 0, vllm_linear_bytes = 0, router_bytes = 0, expert_bytes = 0;
    uint64_t kv_scale_bytes = 0;  // fp8: Fp8KVCacheMethod's k_scale and v_scale, in the weights
  } quantization;
  // gpt-oss's MXFP4 experts (cost_models/mxfp4_experts.h; backend "": none): SGLang's MoE runner backend, one
  // sparse layer as its Mxfp4MoEMethod holds it, all layers' bytes, and the analysis's vLLM layout they replace.
  struct Mxfp4 {
    std::string backend;
    int64_t layers = 0;
    Mxfp4ExpertsLayer layer;
    uint64_t bytes = 0, vllm_bytes = 0;
  } mxfp4;
  SglangTokenPool pool;
  // A windowed model (sliding_window > 0): whether SGLang gives it its hybrid pool (cost_models/sglang_swa.h: gpt_oss
  // without --disable-hybrid-swa-memory), its layers of each kind, and the split; otherwise one pool over every layer.
  int64_t sliding_window = 0, swa_layers = 0, full_layers = 0;
  bool hybrid_swa = false;
  double swa_full_tokens_ratio = 0;
  SglangSwaSplit swa;
};

struct TrtllmAnswer {
  double free_gpu_memory_fraction = 0;     // as the estimate reads it (0.9 when not set)
  bool free_gpu_memory_fraction_set = false;
  int64_t kv_heads_per_rank = 0;           // the pool's whole heads a rank
  // A block-wise fp8 checkpoint (cost_models/trtllm_engine.h trtllm_quantization_check): its modules, vLLM's
  // fp8 weights and scale grids for them (the same bytes), and FP8BlockScalesLinearMethod's two float32 scalars each.
  // A ModelOpt FP8 checkpoint: the same modules' fp8 weights and FP8QDQLinearMethod's scalars instead of vLLM's two,
  // and its kv_cache_quant_algo FP8 cache (checkpoint_fp8_cache) where --kv-cache-dtype did not ask for one.
  struct Quantization {
    std::string method, source;  // "" none
    int64_t modules = 0;
    uint64_t linear_bytes = 0, scalar_bytes = 0;
    std::string layout;          // FP8BlockScalesLinearMethod, FP8QDQLinearMethod
    bool checkpoint_fp8_cache = false;
  } quantization;
  int64_t tokens_per_block = 0, max_num_tokens = 0;
  TrtllmKvCache cache;
};

// ONNX Runtime GenAI (microsoft/onnxruntime-genai at a0c04eb, 0.16.0-dev: src/models/kv_cache.cpp
// DefaultKeyValueCache::DefaultKeyValueCache, src/config.cpp, src/generators.cpp): with past_present_share_buffer
// (genai_config.json's search option, which the model builder writes for CUDA; GeneratorParams::
// IsPastPresentShareBufferEnabled: with num_beams 1) each layer's key and value are one buffer
// [batch_size x num_beams, num_key_value_heads, max_length, head_size], allocated and zeroed when the generator is
// made; search.max_length 0 means model.context_length. The graph runs as exported, on ONNX Runtime's allocator:
// memory = weights + the buffers at max_length + the graph's activation peak (memplan's estimate of the prompt step,
// --runtime onnxruntime, a prompt filling max_length, the buffers held apart). No memory fraction: the answer is
// the largest search.batch_size whose total fits the budget (the GPU less --reserve, or --memory), exact: one more
// sequence does not fit.
struct OrtGenaiAnswer {
  uint64_t budget_bytes = 0;
  int64_t max_length = 0;
  int64_t kv_heads = 0, head_dim = 0;     // the buffers' shape (0: not [batch, heads, tokens, head_dim])
  int64_t max_batch_size = 0;             // 0: not one sequence fits
  uint64_t kv_buffer_bytes = 0;           // at max_batch_size: batch x max_length x bytes_per_token
  uint64_t step_required_bytes = 0;       // the prompt step at max_batch_size, weights included
  uint64_t total_bytes = 0;               // the two: what max_batch_size needs
  bool next_evaluated = false;
  uint64_t total_bytes_next = 0;          // max_batch_size + 1
};

struct EngineAnswer {
  std::string engine;                 // "sglang", "trtllm" or "ortgenai"
  std::string rules;                  // the engine version whose rule applies
  std::string model, gpu, budget_source;
  std::string dtype, kv_cache_dtype;
  int tp = 1;
  int64_t context = 0;                // tokens of one request (--context, else the model's position limit)
  std::string context_source;
  uint64_t total_bytes = 0;           // the GPU's memory
  uint64_t weights_bytes = 0;         // one rank's, in the served type
  uint64_t activation_peak_bytes = 0; // the profiling forward's peak above the weights (trtllm; sglang runs none)
  uint64_t non_torch_bytes = 0;       // --reserve: CUDA context, NCCL, outside PyTorch's allocator
  uint64_t kv_bytes_per_token = 0;    // one rank's, every layer
  int64_t kv_layers = 0;
  std::optional<SglangAnswer> sglang;
  std::optional<TrtllmAnswer> trtllm;
  std::optional<OrtGenaiAnswer> ortgenai;
  int64_t kv_tokens = 0;              // the tokens the cache holds
  uint64_t kv_cache_bytes = 0;        // kv_tokens x kv_bytes_per_token
  double max_concurrency = 0;         // requests of `context` tokens the cache holds at once (memplan's figure)
  int64_t max_concurrent_sequences = 0;
  bool starts = false;
  std::string refusal;                // the engine's reason, when it does not start
  std::vector<std::string> prints;    // the start-up lines the engine logs, with memplan's numbers
};

// The fields every engine's answer takes from the analysis `v`, after refusing what `engine`'s rules here do not
// model (InputError): the weights without vLLM's own additions, the budget, the KV bytes a token.
EngineAnswer engine_answer_common(const VllmAnswer& v, const std::string& engine, const std::string& model_type);

}  // namespace memplan
