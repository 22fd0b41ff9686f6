#include "report/serve_engine_answer.h"

#include <string>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

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

}  // namespace

EngineAnswer engine_answer_common(const VllmAnswer& v, const std::string& engine, const std::string& model_type) {
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
  a.weights_bytes = vllm_shared_weights(v);
  a.non_torch_bytes = v.memory.non_torch;
  a.kv_bytes_per_token = v.kv_bytes_per_token;
  a.kv_layers = v.kv_layers;
  return a;
}

}  // namespace memplan
