// SGLang's multi-head latent attention (DeepseekV2ForCausalLM and DeepseekV3ForCausalLM, bf16 or fp16 weights, or a
// block-fp8 checkpoint's, DeepSeek-V3/R1's: cost_models/sglang_weights.h):
// what its token pool, its attention backend and its weights hold beyond the rule of cost_models/sglang_engine.h,
// each from the SGLang source it follows (sgl-project/sglang, python/sglang/srt; the 0.5 series that rule pins).
//  - The pool (mem_cache/memory_pool.py MLATokenToKVPool.__init__, at 000ccdba; the same layout through the 0.5
//    series): every layer one buffer [size + page_size, 1, kv_lora_rank + qk_rope_head_dim] of the KV type, the
//    latent and the rope key, no separate values; the cell size (model_executor/model_runner_kv_cache_mixin.py at
//    001ccef, ModelRunnerKVCacheMixin.get_cell_size_per_token, its use_mla_backend branch) is
//    (kv_lora_rank + qk_rope_head_dim) x layers x the element size, not divided by the tensor-parallel size: every
//    rank holds the whole latent. DeepSeek-V2-Lite in bf16: 27 x (512 + 64) x 2 = 31,104 B a token.
//  - The attention backend when none is given (server_args.py ServerArgs._handle_attention_backend_compatibility,
//    its "MLA architecture" branch, and _handle_model_specific_adjustments; read in a stored 0.5 copy whose
//    _handle_gpu_memory_settings is the one sglang_engine.h follows, 037c398 itself not being stored): FA3 on
//    Hopper (is_hopper_with_cuda_12_3: compute capability 9.x, CUDA 12.3 or later, which SGLang 0.5's wheels are),
//    FlashInfer's MLA on Blackwell (is_sm100_supported: capability 10.x), Triton elsewhere on CUDA. None of the three
//    forces a page size (only flashmla 64, cutlass_mla 128 and trtllm_mla 32 or 64 do), so --page-size stays
//    (_handle_page_size: None becomes 1). DeepseekV3ForCausalLM on capability 10.x is set to trtllm_mla (page 64)
//    and, with no quantization_config, to quantization "fp8": SGLang quantizes the bf16 weights itself there, which
//    is not modelled (sglang_mla_backend's refusal).
//  - The weights (models/deepseek_v2.py DeepseekV2ForCausalLM.post_load_weights at 00114ae, the same lines in the
//    stored 0.5-series copies; bf16 or fp16 kv_b_proj, no DeepGEMM bmm): w = kv_b_proj.weight
//    [heads_per_rank x (nope + v), kv_lora_rank], unflattened to [heads, nope + v, rank] and split into w_kc
//    [heads, nope, rank] and w_vc [heads, v, rank]; self_attn.w_kc is set (bind_or_assign onto None) to
//    w_kc.transpose(1, 2).contiguous().transpose(1, 2), a copy, and self_attn.w_vc to w_vc.contiguous()
//    .transpose(1, 2), a copy unless w_vc is already contiguous, which a slice of dim 1 is only when the rank holds
//    one head. kv_b_proj itself stays (forward_normal's prefill decompresses through it). So a layer holds
//    heads x nope x rank more elements, and heads x v x rank more when heads > 1. vLLM's MLA (cost_models/vllm_mla.h)
//    reads W_UK_T and W_UV as views of an unquantized kv_b_proj: nothing of this in its weights term.
//    A block-fp8 kv_b_proj (weight_block_size [128, 128] on CUDA, the DeepSeek-V3/R1 checkpoints; post_load_weights
//    in deepseek_v2.py at 3e4a39ee, and the same lines in DeepseekV2WeightLoaderMixin.post_load_weights,
//    models/deepseek_common/deepseek_weight_loader.py at 0201c04e): without SGL_USE_DEEPGEMM_BMM (default "false")
//    w = block_quant_dequant(weight, weight_scale_inv, [128, 128], torch.bfloat16), a new bfloat16 tensor
//    [heads_per_rank x (nope + v), kv_lora_rank] (whatever the served type), split and copied as above: w_kc a bf16
//    copy; w_vc a bf16 copy when heads > 1 (w itself then freed), else a view that keeps all of w alive, so one head a
//    rank holds (2 nope + v) x rank elements a layer. w_scale stays the float 1.0. kv_b_proj's fp8 weight and
//    float32 scale grid stay (forward_normal's prefill runs it). Other block sizes take block_quant_to_tensor_quant
//    (fp8 copies and a per-tensor scale), a per-tensor fp8 kv_b_proj channel_quant_to_tensor_quant, DeepGEMM's bmm
//    (SGL_USE_DEEPGEMM_BMM) fp8 copies with block scales: not sized (cost_models/sglang_weights.cc refuses the first
//    two; the environment variable is not memplan's). vLLM dequantizes the same kv_b_proj into one tensor of the
//    model's type (cost_models/vllm_fp8_block.h), which sglang_answer takes out of vLLM's weights. The sparse
//    layers' MoEGate.e_score_correction_bias (topk_method noaux_tc) is float32 in the 0.5 copies
//    (correction_bias_dtype), as vLLM's: the analysis's float32 bytes stay.
#pragma once

#include <cstdint>
#include <string>

namespace memplan {

struct SglangMlaBackend {
  std::string name;     // "fa3", "flashinfer", "triton"; "" with a refusal
  std::string refusal;  // what is not modelled on this GPU ("" when modelled)
};
// `capability`: major x 10 + minor; `deepseek_v3`: the architecture is DeepseekV3ForCausalLM (model_type deepseek_v3).
SglangMlaBackend sglang_mla_backend(int capability, bool deepseek_v3);

// w_kc and w_vc over every layer, one rank's (`heads_per_rank` = num_attention_heads / tp), `element_bytes` the
// weights' type; `dequantized`: kv_b_proj is block fp8, w is block_quant_dequant's new bfloat16 tensor (element_bytes
// is then 2) and one head a rank keeps all of it through w_vc's view.
uint64_t sglang_mla_absorbed_bytes(int64_t layers, int64_t heads_per_rank, int64_t qk_nope_head_dim,
                                   int64_t v_head_dim, int64_t kv_lora_rank, uint64_t element_bytes,
                                   bool dequantized = false);

}  // namespace memplan
