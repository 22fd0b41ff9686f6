#include "cost_models/sglang_mla.h"

#include "onnx_import/checked.h"

namespace memplan {

SglangMlaBackend sglang_mla_backend(int capability, bool deepseek_v3) {
  const int major = capability / 10;
  if (major == 10 && deepseek_v3)
    return {"", "SGLang sets DeepseekV3ForCausalLM on compute capability 10.x to trtllm_mla and, without a "
                "quantization_config, quantizes the weights to fp8 itself (server_args.py "
                "_handle_model_specific_adjustments), which memplan does not size"};
  if (major == 9) return {"fa3", ""};
  if (major == 10) return {"flashinfer", ""};
  return {"triton", ""};
}

uint64_t sglang_mla_absorbed_bytes(int64_t layers, int64_t heads_per_rank, int64_t qk_nope_head_dim,
                                   int64_t v_head_dim, int64_t kv_lora_rank, uint64_t element_bytes, bool dequantized) {
  // w_kc: always a copy (the transposed view is never contiguous); w_vc: a copy unless one head a rank, when it is a
  // view of w: kv_b_proj's own weight (nothing more), or the dequantized bf16 w, all of it (nope + v) kept.
  const int64_t per_head = qk_nope_head_dim + (heads_per_rank > 1 ? v_head_dim
                                               : dequantized       ? qk_nope_head_dim + v_head_dim
                                                                   : 0);
  const char* what = "MLA w_kc/w_vc elements";
  const uint64_t elements =
      checked_mul(checked_mul(static_cast<uint64_t>(layers), static_cast<uint64_t>(heads_per_rank), what),
                  checked_mul(static_cast<uint64_t>(per_head), static_cast<uint64_t>(kv_lora_rank), what), what);
  return checked_mul(elements, element_bytes, "MLA w_kc/w_vc bytes");
}

}  // namespace memplan
