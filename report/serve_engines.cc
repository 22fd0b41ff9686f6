#include "report/serve_engines.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "cost_models/sglang_weights.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "report/option_choices.h"
#include "report/serve_sglang.h"
#include "report/sizes.h"

namespace memplan {
namespace {

const char* kTrtllmRules = "TensorRT-LLM 1.0, PyTorch backend: _torch/pyexecutor/_util.py KvCacheCreator";

EngineAnswer trtllm_answer(const VllmAnswer& v, const ServeSettings& s, const std::string& model_type) {
  EngineAnswer a = engine_answer_common(v, "trtllm", model_type);
  a.rules = kTrtllmRules;
  TrtllmAnswer t;
  if (v.quantization.modelopt) {  // ModelOpt FP8 (trtllm_quantization_check): vLLM's fp8 weights, other scalars
    t.quantization = {v.quantization.method, v.quantization_source, v.quantized.modules, v.quantized.linear_bytes,
                      trtllm_fp8_qdq_scalar_bytes(v.quantized.modules), "FP8QDQLinearMethod"};
    const uint64_t vllm_scalars = checked_mul(static_cast<uint64_t>(v.quantized.modules),
                                              vllm_fp8_tensor_scale_bytes(true), "weights bytes");
    if (a.weights_bytes < vllm_scalars) throw std::logic_error("serve --engine trtllm: the analysis's fp8 scales");
    a.weights_bytes = checked_add(a.weights_bytes - vllm_scalars, t.quantization.scalar_bytes, "weights bytes");
    // kv_cache_quant_algo FP8 from hf_quant_config.json: an fp8 cache (has_fp8_kv_cache), whatever --kv-cache-dtype.
    const std::optional<DType> type = dtype_from_name(a.dtype);
    if (v.quantization.modelopt_kv_fp8 && !kKvCacheDtypeChoices.parse(a.kv_cache_dtype, "--kv-cache-dtype") && type) {
      a.kv_bytes_per_token /= static_cast<uint64_t>(dtype_bits(*type)) / 8;
      a.kv_cache_dtype = "fp8";
      t.quantization.checkpoint_fp8_cache = true;
    }
  } else if (!v.quantization.method.empty()) {  // block-wise fp8 (serve_engine ran trtllm_quantization_check):
    // vLLM's grid and two float32 scalars a module
    if (v.quantization.method != "fp8" || v.quantization.block.n != 128 || v.quantization.block.k != 128)
      throw std::logic_error("serve --engine trtllm: " + v.model + "'s quantization passed unchecked");
    t.quantization = {v.quantization.method, v.quantization_source, v.quantized.modules, v.quantized.linear_bytes,
                      trtllm_fp8_block_scalar_bytes(v.quantized.modules), "FP8BlockScalesLinearMethod"};
    a.weights_bytes = checked_add(a.weights_bytes, t.quantization.scalar_bytes, "weights bytes");
  }
  // KvCacheConfig.free_gpu_memory_fraction None (--free-gpu-memory-fraction not given): _util.py
  // _get_free_gpu_memory_fraction reads it as 0.9.
  t.free_gpu_memory_fraction_set = s.free_gpu_memory_fraction > 0;
  t.free_gpu_memory_fraction = t.free_gpu_memory_fraction_set ? s.free_gpu_memory_fraction
                                                               : kTrtllmDefaultFreeGpuMemoryFraction;
  t.tokens_per_block = s.tokens_per_block;
  t.max_num_tokens = s.max_num_tokens;
  // The profiling forward over max_num_tokens (the vLLM analysis shaped so): its peak above the weights; both sides
  // hold vLLM's additions alike, so they cancel.
  a.activation_peak_bytes = v.forward_peak_allocated > v.memory.weights ? v.forward_peak_allocated - v.memory.weights : 0;
  // The estimate's bytes a token (_get_cache_size_per_token: 2 B an element, 1 with an fp8 cache, head_dim x
  // num_key_value_heads // tp a layer) against the pool's, the analysis's (whole KV heads a rank, replicated where
  // tp exceeds them: vllm_kv_heads_per_rank, which is TensorRT-LLM's (num_key_value_heads + tp - 1) // tp wherever
  // trtllm_kv_heads_per_rank lets the checkpoint load).
  const int64_t heads_per_rank = v.kv_heads_per_rank > 0 ? v.kv_heads_per_rank : v.kv.kv_heads;
  const bool fp8_cache = kKvCacheDtypeChoices.parse(a.kv_cache_dtype, "--kv-cache-dtype");
  uint64_t estimate = 0;
  if (heads_per_rank > 0 && v.kv.head_dim > 0) {
    const uint64_t elements = checked_mul(static_cast<uint64_t>(2 * std::max<int64_t>(a.kv_layers, 0)),
                                          static_cast<uint64_t>(heads_per_rank * v.kv.head_dim), "KV elements");
    if (elements == 0 || a.kv_bytes_per_token % elements != 0)
      throw std::logic_error("serve --engine trtllm: " + v.model + "'s KV bytes a token are not 2 x layers x heads x "
                             "head_dim elements");
    estimate = trtllm_estimate_kv_per_token(a.kv_layers, v.kv.head_dim, v.kv.kv_heads, a.tp,
                                            a.kv_bytes_per_token / elements == 1);
  } else {  // a cache laid out otherwise, on one rank (the analysis refuses --tp without the heads): its elements
    const std::optional<DType> type = dtype_from_name(a.dtype);
    const uint64_t element = fp8_cache ? 1 : type ? static_cast<uint64_t>(dtype_bits(*type)) / 8 : 0;
    if (a.tp > 1 || element == 0 || a.kv_bytes_per_token % element != 0)
      throw InputError("serve --engine trtllm: the KV heads and head_dim of " + v.model + " are not found (past "
                       "inputs shaped [batch, kv_heads, tokens, head_dim]), which TensorRT-LLM's estimate counts");
    estimate = a.kv_bytes_per_token / element * (fp8_cache ? 1 : 2);
  }
  t.kv_heads_per_rank = heads_per_rank;
  t.cache = trtllm_kv_cache(a.total_bytes, a.weights_bytes, a.activation_peak_bytes, a.non_torch_bytes,
                            t.free_gpu_memory_fraction, t.free_gpu_memory_fraction_set, estimate,
                            a.kv_bytes_per_token, t.tokens_per_block);
  a.starts = t.cache.starts;
  a.kv_tokens = t.cache.tokens;
  const int64_t blocks_per_request = (a.context + t.tokens_per_block - 1) / t.tokens_per_block;
  a.max_concurrency = static_cast<double>(t.cache.blocks) / static_cast<double>(blocks_per_request);
  a.max_concurrent_sequences = t.cache.blocks / blocks_per_request;
  if (t.cache.blocks <= 0)
    a.refusal = "no KV cache block fits: the weights, the profiling run's peak and the memory outside PyTorch leave "
                "nothing (\"Impossible to fit in any sequence in kvCache\")";
  else if (!t.cache.pool_fits)
    a.refusal = fmt::format("the pool of {} tokens at {} B a token ({} B) is more than the {} B the weights and the "
                            "memory outside PyTorch leave: the estimate counted {} B a token (2 B an element, 1 in "
                            "fp8, head_dim x KV heads // tp a layer) where each rank holds {} whole KV head(s), and with free_gpu_memory_fraction "
                            "not set the cache manager takes the estimate as it is (calculate_max_num_blocks); "
                            "allocating the pool fails",
                            format_count(uint64_t(t.cache.tokens)), a.kv_bytes_per_token,
                            format_count(t.cache.pool_bytes), format_count(t.cache.free_after),
                            t.cache.estimate_kv_per_token, heads_per_rank);
  const double gib = static_cast<double>(uint64_t{1} << 30);
  a.prints.push_back(fmt::format("Peak memory during memory usage profiling (torch + non-torch): {:.2f} GiB, available "
                                 "KV cache memory when calculating max tokens: {:.2f} GiB, fraction is set {}, kv size "
                                 "is {}",
                                 static_cast<double>(t.cache.peak_memory) / gib, t.cache.available_bytes / gib,
                                 t.free_gpu_memory_fraction, t.cache.estimate_kv_per_token));
  a.prints.push_back(fmt::format("Estimated max tokens in KV cache : {}", t.cache.max_tokens));
  a.trtllm = t;
  return a;
}

}  // namespace

EngineAnswer serve_engine(ServeProbe& probe, const ServeSettings& s, ServeEngine engine, int tp, uint64_t total_memory,
                          const std::string& gpu_name, const std::string& budget_source, uint64_t non_torch,
                          int capability, bool cuda) {
  if (const StoredQuantization& stored = probe.stored_quantization(); engine != ServeEngine::Vllm &&
                                                                       stored.method == "nvfp4")
    throw InputError("serve --engine " + kServeEngineChoices.name_of(engine) + " on " +
                     probe.path() + ": " + stored.modelopt_path + " is a ModelOpt NVFP4 checkpoint, which memplan sizes "
                     "under --engine vllm only (its ModelOptNvFp4LinearMethod's layouts); this engine's NVFP4 "
                     "layouts are not read");
  if (engine == ServeEngine::Sglang) {  // before the analysis, whose refusals would name vLLM's layers
    const StoredQuantization& stored = probe.stored_quantization();
    const std::string method = s.quantization.empty() ? stored.method : s.quantization;
    sglang_quantization_check(method, !s.quantization.empty(), stored.method == "fp8",
                              stored.method == "fp8" && method == "fp8" && stored.block_n > 0, cuda, capability,
                              probe.path(), stored.modelopt);
    // ModelRunner.configure_kv_cache_dtype turns auto into fp8_e4m3 where the quant config holds kv_cache_quant_algo
    // "FP8": later SGLang copies' ModelOptFp8Config does (its ModelOptQuantConfig base keeps it), faeb968's does not
    // (it keeps kv_cache_quant_method): which 0.5 releases do which is not read (cost_models/sglang_weights.h).
    if (stored.modelopt_kv_fp8 && !kKvCacheDtypeChoices.parse(s.kv_cache_dtype, "--kv-cache-dtype"))
      throw InputError("serve --engine sglang on " + probe.path() + " with --kv-cache-dtype auto: " +
                       stored.modelopt_path + " states kv_cache_quant_algo FP8, which SGLang's auto follows "
                       "(configure_kv_cache_dtype) in the copies whose ModelOptFp8Config keeps kv_cache_quant_algo "
                       "and not in earlier 0.5 copies: give --kv-cache-dtype fp8 (what the checkpoint asks for)");
  }
  if (engine == ServeEngine::Trtllm) {  // before vLLM's own checks name vLLM
    const bool mla = probe.mla().kv_lora_rank > 0;
    if (tp > 1 && probe.kv().kv_heads > 0 && !mla) trtllm_kv_heads_per_rank(probe.kv().kv_heads, tp, probe.path());
    const StoredQuantization& stored = probe.stored_quantization();
    trtllm_quantization_check(stored.method, stored.block_n, stored.block_k, capability, mla ? 0 : probe.kv().kv_heads,
                              tp, probe.path(), stored.modelopt, stored.modelopt_file);
  }
  ServeSettings analysis = s;
  // TensorRT-LLM profiles max_num_tokens tokens; SGLang profiles nothing, the analysis's step is the default one.
  if (engine == ServeEngine::Trtllm) analysis.max_batched_tokens = s.max_num_tokens;
  // gpt-oss's MXFP4 experts: SGLang puts its own layout in place of the analysis's (sglang_answer), so the analysis
  // takes vLLM's Marlin layout, which every CUDA GPU and release runs, rather than the release's choice, which vLLM
  // refuses to size on some (cost_models/mxfp4_experts.h vllm_mxfp4_backend).
  if (probe.stored_quantization().method == "mxfp4") analysis.mxfp4_backend = "marlin";
  const VllmAnswer v = serve_vllm(probe, analysis, tp, total_memory, gpu_name, budget_source, non_torch, capability);
  EngineAnswer a = engine == ServeEngine::Sglang
                       ? sglang_answer(v, s, capability, cuda, probe.model_type())
                       : trtllm_answer(v, s, probe.model_type());
  a.kv_cache_bytes = static_cast<uint64_t>(a.kv_tokens) * a.kv_bytes_per_token;
  if (a.sglang && a.sglang->hybrid_swa)  // SWAKVPool's two pools, each over its own layers
    a.kv_cache_bytes = sglang_swa_pool_bytes(a.sglang->swa, a.kv_bytes_per_token / static_cast<uint64_t>(a.kv_layers),
                                             a.sglang->full_layers, a.sglang->swa_layers);
  return a;
}

EngineTable serve_engines_table(ServeProbe& probe, const ServeSettings& s, int tp, uint64_t total_memory,
                                const std::string& gpu_name, const std::string& budget_source,
                                const VllmNonTorch& non_torch, int capability, bool cuda) {
  const VllmAnswer v = serve_vllm(probe, s, tp, total_memory, gpu_name, budget_source, non_torch, capability);
  // SGLang and TensorRT-LLM size from the free memory, which the CUDA context has already taken: --reserve, else the
  // catalog's reserve.
  const uint64_t outside = non_torch.given.value_or(non_torch.context_reserve);
  EngineTable t;
  t.model = v.model;
  t.gpu = gpu_name;
  t.budget_source = budget_source;
  t.dtype = v.dtype;
  t.context = v.settings.engine.max_model_len;
  t.tp = tp;
  t.total_bytes = v.memory.total;
  t.kv_bytes_per_token = v.kv_bytes_per_token;
  t.non_torch_bytes = outside;
  t.weights_bytes = vllm_shared_weights(v);
  if (v.mla.on && !cuda)  // as report/serve.cc refuses --engine vllm there
    t.rows.push_back({"vllm", "", 0, 0, 0, 0, false, "",
                      "vLLM's MLA backends on ROCm (AITER, Triton MLA) and their block sizes are not modelled"});
  else
    t.rows.push_back({"vllm", vllm_rules_name(v.settings.version, v.settings.runner),
                      uint64_t(std::max<int64_t>(v.capacity.num_blocks, 0)) * v.block_bytes, v.capacity.tokens,
                      v.settings.engine.block_size, v.capacity.starts ? v.capacity.max_concurrency : 0,
                      v.capacity.starts,
                      fmt::format("GPU KV cache size: {} tokens",
                                  format_count(uint64_t(std::max<int64_t>(v.capacity.tokens, 0)))),
                      ""});
  for (ServeEngine e : {ServeEngine::Sglang, ServeEngine::Trtllm}) {
    EngineAnswer a;
    try {
      a = serve_engine(probe, s, e, tp, total_memory, gpu_name, budget_source, outside, capability, cuda);
    } catch (const InputError& error) {  // this engine's row only: what its rule here does not model
      t.rows.push_back({e == ServeEngine::Sglang ? "sglang" : "trtllm", "", 0, 0, 0, 0, false, "", error.what()});
      continue;
    }
    const int64_t block = a.sglang ? a.sglang->page_size : a.trtllm->tokens_per_block;
    const std::string prints = a.sglang && a.sglang->hybrid_swa && a.prints.size() >= 2  // the split's, the scheduler's
                                   ? a.prints[a.prints.size() - 2] + "; " + a.prints.back() : a.prints.back();
    t.rows.push_back({a.engine, a.rules, a.kv_cache_bytes, a.kv_tokens, block, a.starts ? a.max_concurrency : 0,
                      a.starts, prints, ""});
  }
  return t;
}

}  // namespace memplan
