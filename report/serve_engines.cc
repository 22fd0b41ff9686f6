#include "report/serve_engines.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "cost_models/sglang_mla.h"
#include "cost_models/sglang_weights.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "report/option_choices.h"
#include "report/sizes.h"

namespace memplan {
namespace {

const char* kSglangRules = "SGLang 0.5 (after PR #10975): server_args.py _handle_gpu_memory_settings, "
                           "model_runner_kv_cache_mixin.py profile_max_num_token";
const char* kTrtllmRules = "TensorRT-LLM 1.0, PyTorch backend: _torch/pyexecutor/_util.py KvCacheCreator";

// What the vLLM analysis holds that the other engines' rules here do not model: refused rather than guessed.
void check_modelled(const VllmAnswer& v, const std::string& engine, const std::string& model_type) {
  const std::string who = "serve --engine " + engine + ": ";
  if (v.sliding_window > 0 && engine != "sglang")  // SGLang's: cost_models/sglang_swa.h (sglang_answer)
    throw InputError(who + v.model + "'s attention slides over a window of " + std::to_string(v.sliding_window) +
                     " tokens; TensorRT-LLM's variable-window cache (VSWA) is not modelled (serve --engine vllm "
                     "models vLLM's, --engine sglang SGLang's)");
  // SGLang's quantized weights: cost_models/sglang_weights.h (sglang_answer); TensorRT-LLM's: trtllm_quantization_check
  // (serve_engine, before the analysis) and trtllm_answer.
  if (!v.quantization.method.empty() && engine != "sglang" && engine != "trtllm")
    throw InputError(who + v.model + " is quantized (" + v.quantization.method + "): how " + engine +
                     " lays out quantized weights is not modelled (serve --engine vllm models vLLM's, --engine "
                     "sglang SGLang's)");
  // TensorRT-LLM's profiling run over a mixture of experts runs its own fused MoE module (_torch/modules/fused_moe,
  // whose C++ runner sizes its permuted rows and GEMM buffers), not vLLM's Triton kernel whose buffers the analysis
  // holds at the fullest router: answering with those would be another engine's peak.
  if (v.moe.blocks > 0 && engine == "trtllm" && !v.mla.on)
    throw InputError(who + v.model + " is a mixture of experts: TensorRT-LLM's profiling run runs its own fused MoE "
                     "(_torch/modules/fused_moe), whose buffers memplan does not size (the vLLM analysis holds vLLM's "
                     "Triton kernel's); --engine vllm and --engine sglang answer it");
  // TensorRT-LLM's KV heads a rank where tp does not divide them: trtllm_kv_heads_per_rank (serve_engine, before the
  // analysis) and trtllm_answer (the estimate's fraction of a head, the pool's whole replicated heads).
  // TensorRT-LLM's PyTorch backend serves multi-head latent attention only as DeepseekV3ForCausalLM:
  // _torch/models/modeling_deepseekv3.py registers DeepseekV3ForCausalLM (and DeepseekV32ForCausalLM), and no module
  // of _torch/models registers DeepseekV2ForCausalLM (the 1.0-era and current copies, index ids 1539226111 and
  // 227015512), so a deepseek_v2 checkpoint does not load there at all.
  // Its deepseek_v3 cache is one latent head of kv_lora_rank + qk_rope_head_dim, kv_factor 1, not split by tp
  // (_torch/pyexecutor/_util.py KvCacheCreator._get_cache_size_per_token and _create_kv_cache_manager: SELFKONLY),
  // the same bytes a token as the analysis's; but its profiling run's context attention
  // (_torch/modules/attention.py MLA.forward_context_default: kv_b_proj over the context tokens, k from
  // empty_like(q), q, k and v concatenated for a fused backend) is not the vLLM analysis's simulated decompression,
  // and its shared experts are split over gcd(shared intermediate / 128, tp) ranks only (modeling_deepseekv3.py
  // Deepseekv3MoE.__init__), neither sized here.
  if (v.mla.on && engine == "trtllm") {
    if (model_type == "deepseek_v2")
      throw InputError(who + v.model + " is a DeepseekV2ForCausalLM (deepseek_v2), which TensorRT-LLM's PyTorch "
                       "backend does not load: its modeling_deepseekv3.py registers DeepseekV3ForCausalLM and "
                       "DeepseekV32ForCausalLM only; --engine sglang and --engine vllm serve it");
    throw InputError(who + v.model + " (multi-head latent attention) is not modelled: TensorRT-LLM's profiling "
                     "run decompresses the latent of its context tokens through kv_b_proj "
                     "(MLA.forward_context_default), which memplan does not size, so its cache (one latent head, "
                     "kv_factor 1) is not answered; --engine sglang and --engine vllm size theirs");
  }
}

EngineAnswer common(const VllmAnswer& v, const std::string& engine, const std::string& model_type) {
  check_modelled(v, engine, model_type);
  EngineAnswer a;
  a.engine = engine;
  a.model = v.model;
  a.gpu = v.gpu;
  a.budget_source = v.budget_source;
  a.dtype = v.dtype;
  a.kv_cache_dtype = v.kv_cache_dtype;
  a.tp = v.settings.tp;
  a.context = v.settings.engine.max_model_len;
  a.context_source = v.settings.max_model_len_source;
  a.total_bytes = v.memory.total;
  // The graph's weights in the served type: vLLM's weights term less what vLLM's own layers add.
  a.weights_bytes = v.memory.weights - v.lora_stacks_bytes - v.rotary_cache_bytes - v.vocab_padding_bytes;
  a.non_torch_bytes = v.memory.non_torch;
  a.kv_bytes_per_token = v.kv_bytes_per_token;
  a.kv_layers = v.kv_layers;
  return a;
}

EngineAnswer sglang_answer(const VllmAnswer& v, const ServeSettings& s, int capability, bool cuda,
                           const std::string& model_type) {
  EngineAnswer a = common(v, "sglang", model_type);
  a.rules = kSglangRules;
  SglangAnswer g;
  const bool deepseek_v3 = model_type == "deepseek_v3";
  // RotaryEmbedding.__init__ (layers/rotary_embedding.py, the 0.5 series): "cache needs to be in FP32 for numerical
  // stability", kept in float32 on CUDA (cast to the model's type elsewhere: ROCm): the rows and rotated dimensions
  // of vLLM's cache (the same get_rope classes, DeepseekScalingRotaryEmbedding's original x factor rows included).
  const std::optional<DType> type = dtype_from_name(a.dtype);  // the head's type as served ("" without a head)
  const uint64_t served = type ? static_cast<uint64_t>(dtype_bits(*type)) / 8 : 0;
  if (served == 0 && (v.rotary_cache_bytes > 0 || v.mla.on || !v.quantization.method.empty()))
    throw std::logic_error("serve --engine sglang: no served type for " + v.model + "'s rotary cache, MLA or "
                           "quantized weights");
  if (v.rotary_cache_bytes > 0) g.rotary_cache_bytes = cuda ? v.rotary_cache_bytes / served * 4 : v.rotary_cache_bytes;
  a.weights_bytes = checked_add(a.weights_bytes, g.rotary_cache_bytes, "weights bytes");
  if (!v.quantization.method.empty()) {  // cost_models/sglang_weights.h: the linear modules as SGLang holds them
    sglang_quantized_model_check(v.quantization, v.moe.blocks > 0, model_type, v.mla.on, v.model);
    const SglangQuantizedLinears q = sglang_quantized_linears(v.quantized.module_shapes, v.quantization,
                                                              v.fp8_block.router_nodes, served);
    if (a.weights_bytes < v.quantized.linear_bytes)
      throw std::logic_error("serve --engine sglang: the analysis's quantized modules exceed its weights");
    a.weights_bytes = checked_add(a.weights_bytes - v.quantized.linear_bytes, q.bytes, "weights bytes");
    g.quantization = {v.quantization.method, v.quantization_source, q.layout, q.modules, q.routers, q.bytes,
                      v.quantized.linear_bytes, q.router_bytes,
                      v.fp8_block.on ? checked_add(v.fp8_block.expert_weight_bytes, v.fp8_block.expert_scale_bytes,
                                                   "expert bytes")
                                     : 0};
    // Fp8KVCacheMethod's k_scale and v_scale on every RadixAttention: MLA's two a layer (attn_mqa, attn_mha).
    // ModelOpt's (ModelOptFp8KVCacheMethod) only where the checkpoint states kv_cache_quant_algo.
    if (v.quantization.method == "fp8" && (!v.quantization.modelopt || v.quantization.modelopt_kv_fp8))
      g.quantization.kv_scale_bytes = sglang_fp8_kv_scale_bytes(a.kv_layers * (v.mla.on ? 2 : 1));
    a.weights_bytes = checked_add(a.weights_bytes, g.quantization.kv_scale_bytes, "weights bytes");
  }
  if (v.mla.on) {  // cost_models/sglang_mla.h: the latent pool (v.kv_bytes_per_token), the backend, w_kc and w_vc
    if (!cuda)
      throw InputError("serve --engine sglang on " + v.model + ": SGLang's MLA backends on ROCm (aiter, which also "
                       "scales mem_fraction_static by 0.85 past 8,192 tokens of context) are not modelled");
    const SglangMlaBackend backend = sglang_mla_backend(capability, deepseek_v3);
    if (!backend.refusal.empty()) throw InputError("serve --engine sglang on " + v.model + ": " + backend.refusal);
    g.mla_backend = backend.name;
    const VllmMlaShape& m = v.mla.shape;
    // Block fp8 (sglang_quantized_model_check): w_kc and w_vc from the dequantized bf16 kv_b_proj, in place of vLLM's.
    const bool fp8 = v.quantization.method == "fp8";
    g.mla_absorbed_bytes = sglang_mla_absorbed_bytes(m.layers, m.heads_per_rank, m.qk_nope_head_dim, m.v_head_dim,
                                                     m.kv_lora_rank, fp8 ? 2 : served, fp8);
    if (a.weights_bytes < v.fp8_block.mla_absorbed_bytes) throw std::logic_error("serve --engine sglang: MLA weights");
    a.weights_bytes = checked_add(a.weights_bytes - v.fp8_block.mla_absorbed_bytes, g.mla_absorbed_bytes, "weights");
  }
  // get_device_memory_capacity: the GPU's total in whole MiB as nvidia-smi's memory.total prints it, which is a
  // little above the CUDA total the catalog holds (H100: 81,559 MiB against 81,106; report/gpu_catalog.json): the
  // catalog's total in whole MiB here, which can lower the default fraction by 0.001.
  g.gpu_mem_mib = static_cast<double>(a.total_bytes >> 20);
  const SglangGpuDefaults d = sglang_gpu_defaults(g.gpu_mem_mib, a.tp);
  g.default_chunked_prefill_size = s.chunked_prefill_size == 0;
  g.chunked_prefill_size = g.default_chunked_prefill_size ? d.chunked_prefill_size : s.chunked_prefill_size;
  g.cuda_graph_max_bs = d.cuda_graph_max_bs;
  if (s.mem_fraction_static > 0) {
    g.mem_fraction_static = s.mem_fraction_static;
  } else {
    const SglangMemFraction f = sglang_default_mem_fraction(g.gpu_mem_mib, g.chunked_prefill_size, g.cuda_graph_max_bs, a.tp);
    g.mem_fraction_static = f.mem_fraction_static;
    g.reserved_mib = f.reserved_mib;
  }
  g.page_size = s.page_size;
  g.max_total_tokens = s.max_total_tokens;
  const uint64_t free_before = a.total_bytes > a.non_torch_bytes ? a.total_bytes - a.non_torch_bytes : 0;
  g.pool = sglang_token_pool(free_before, a.weights_bytes, g.mem_fraction_static, a.kv_bytes_per_token,
                             g.max_total_tokens, g.page_size, a.context);
  // A windowed model (cost_models/sglang_swa.h): SGLang's hybrid pool for gpt_oss, one pool over every layer for the
  // others; the analysis's layers share one K and V shape, so F = S = the bytes a token / the layers.
  g.sliding_window = v.sliding_window, g.swa_full_tokens_ratio = s.swa_full_tokens_ratio;
  g.swa_layers = v.sliding_window > 0 ? v.sliding_layer_count : 0;
  g.full_layers = v.sliding_window > 0 ? v.kv_layers - v.sliding_layer_count : 0;
  g.hybrid_swa = v.sliding_window > 0 && sglang_hybrid_swa_model(model_type) && !s.disable_hybrid_swa_memory;
  if (g.hybrid_swa) {
    if (a.kv_layers <= 0 || a.kv_bytes_per_token % static_cast<uint64_t>(a.kv_layers) != 0)
      throw std::logic_error("serve --engine sglang: " + v.model + "'s KV bytes a token are not alike over its layers");
    g.swa = sglang_hybrid_swa_pool(g.pool, a.kv_bytes_per_token / static_cast<uint64_t>(a.kv_layers), g.full_layers,
                                   g.swa_layers, g.swa_full_tokens_ratio, g.page_size);
  }
  a.starts = g.pool.starts;
  a.refusal = g.pool.refusal;
  a.kv_tokens = std::max<int64_t>(g.pool.max_total_num_tokens, 0);
  // A request holds exactly its tokens in a pool of pages of page_size: cdiv(context, page_size) pages.
  const int64_t pages_per_request = (a.context + g.page_size - 1) / g.page_size;
  a.max_concurrency = a.starts ? static_cast<double>(a.kv_tokens / g.page_size) / static_cast<double>(pages_per_request) : 0;
  a.max_concurrent_sequences = a.starts ? (a.kv_tokens / g.page_size) / pages_per_request : 0;
  if (g.hybrid_swa && a.starts) {  // the two pools' bound (sglang_swa_concurrency) and SGLang's line for the split
    const SglangSwaConcurrency c = sglang_swa_concurrency(g.swa, g.full_layers, a.context, g.sliding_window, g.page_size);
    a.max_concurrency = c.requests;
    a.max_concurrent_sequences = c.whole_requests;
    a.prints.push_back(sglang_swa_print(g.swa, g.full_layers));
  }
  if (a.starts)
    // The scheduler's start-up line (ServerArgs.max_prefill_tokens 16384); its available_gpu_mem, the memory free
    // after the CUDA graphs, is not modelled.
    a.prints.push_back(fmt::format("max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens=16384, "
                                   "max_running_requests={}, context_len={}",
                                   g.pool.max_total_num_tokens, g.chunked_prefill_size, g.pool.max_running_requests,
                                   a.context));
  else
    a.prints.push_back(fmt::format("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                                   "Current value: server_args.mem_fraction_static={}",
                                   g.mem_fraction_static));
  a.sglang = g;
  return a;
}

EngineAnswer trtllm_answer(const VllmAnswer& v, const ServeSettings& s, const std::string& model_type) {
  EngineAnswer a = common(v, "trtllm", model_type);
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
                                const std::string& gpu_name, const std::string& budget_source, uint64_t non_torch,
                                int capability, bool cuda) {
  const VllmAnswer v = serve_vllm(probe, s, tp, total_memory, gpu_name, budget_source, non_torch, capability);
  EngineTable t;
  t.model = v.model;
  t.gpu = gpu_name;
  t.budget_source = budget_source;
  t.dtype = v.dtype;
  t.context = v.settings.engine.max_model_len;
  t.tp = tp;
  t.total_bytes = v.memory.total;
  t.kv_bytes_per_token = v.kv_bytes_per_token;
  t.non_torch_bytes = v.memory.non_torch;
  t.weights_bytes = v.memory.weights - v.lora_stacks_bytes - v.rotary_cache_bytes - v.vocab_padding_bytes;
  if (v.mla.on && !cuda)  // as report/serve.cc refuses --engine vllm there
    t.rows.push_back({"vllm", "", 0, 0, 0, 0, false, "",
                      "vLLM's MLA backends on ROCm (AITER, Triton MLA) and their block sizes are not modelled"});
  else
    t.rows.push_back({"vllm", vllm_rules_name(v.settings.version),
                      uint64_t(std::max<int64_t>(v.capacity.num_blocks, 0)) * v.block_bytes, v.capacity.tokens,
                      v.settings.engine.block_size, v.capacity.starts ? v.capacity.max_concurrency : 0,
                      v.capacity.starts,
                      fmt::format("GPU KV cache size: {} tokens",
                                  format_count(uint64_t(std::max<int64_t>(v.capacity.tokens, 0)))),
                      ""});
  for (ServeEngine e : {ServeEngine::Sglang, ServeEngine::Trtllm}) {
    EngineAnswer a;
    try {
      a = serve_engine(probe, s, e, tp, total_memory, gpu_name, budget_source, non_torch, capability, cuda);
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
