#include "report/serve_sglang.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "cost_models/mxfp4_experts.h"
#include "cost_models/sglang_mla.h"
#include "cost_models/sglang_weights.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

const char* kSglangRules = "SGLang 0.5 (after PR #10975): server_args.py _handle_gpu_memory_settings, "
                           "model_runner_kv_cache_mixin.py profile_max_num_token";

}  // namespace

EngineAnswer sglang_answer(const VllmAnswer& v, const ServeSettings& s, int capability, bool cuda,
                           const std::string& model_type) {
  EngineAnswer a = engine_answer_common(v, "sglang", model_type);
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
  if (v.moe.mxfp4) {  // gpt-oss's MXFP4 experts as SGLang's Mxfp4MoEMethod holds them, in place of vLLM's
    g.mxfp4.backend = sglang_mxfp4_backend(capability, v.model);
    g.mxfp4.layer = sglang_mxfp4_layer(v.moe.experts, v.moe.hidden, v.moe.intermediate_per_rank, capability, v.model);
    g.mxfp4.layers = v.moe.blocks;
    g.mxfp4.bytes = checked_mul(g.mxfp4.layer.total(), static_cast<uint64_t>(v.moe.blocks), "expert bytes");
    g.mxfp4.vllm_bytes = v.moe.expert_weight_bytes;
    if (a.weights_bytes < g.mxfp4.vllm_bytes) throw std::logic_error("serve --engine sglang: the analysis's experts");
    a.weights_bytes = checked_add(a.weights_bytes - g.mxfp4.vllm_bytes, g.mxfp4.bytes, "weights bytes");
  } else if (!v.quantization.method.empty()) {  // cost_models/sglang_weights.h: the linear modules as SGLang holds them
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

}  // namespace memplan
