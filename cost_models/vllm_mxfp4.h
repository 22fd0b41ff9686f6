// vLLM's MXFP4 experts (gpt-oss checkpoints: quantization_config {quant_method: mxfp4}): what one sparse layer's
// FusedMoE holds and what its kernel allocates a call, for serve --engine vllm, in place of the graph's bf16 experts
// and of the unquantized fused_experts kernel (cost_models/vllm_fused_moe.h). Read in vLLM at 007d500
// (vllm/model_executor/layers/quantization/mxfp4.py) and 04bec4c (fused_moe/gpt_oss_triton_kernels_moe.py):
//  - Mxfp4Config.from_config ignores modules_to_not_convert and get_quant_method quantizes FusedMoE layers only
//    (every LinearBase, attention and router included, gets UnquantizedLinearMethod): only the experts change;
//  - get_mxfp4_backend on CUDA: without VLLM_USE_FLASHINFER_MOE_MXFP4_BF16, a compute capability in [9.0, 11.0)
//    with triton_kernels runs the Triton backend (triton_kernel_moe_forward); Marlin (before 9.0, or
//    VLLM_MXFP4_USE_MARLIN) and FlashInfer (SM100 with flashinfer) pad and repack otherwise and are not sized here;
//  - Mxfp4MoEMethod.create_weights (Triton): I_pad = round_up(I_p, 64), w13_weight uint8 [E, 2·I_pad, H / 2] (two
//    E2M1 values a byte), w13_weight_scale uint8 [E, 2·I_pad, H / 32] (one E8M0 scale a block of 32), w13_bias bf16
//    [E, 2·I_pad], w2_weight uint8 [E, H, I_pad / 2], w2_weight_scale uint8 [E, H, I_pad / 32], w2_bias bf16 [E, H];
//    process_weights_after_loading (Triton) replaces both biases by float32 copies; its _swizzle_mxfp4 relayout of the
//    blocks and scales for triton_kernels is not sized (the same bytes assumed);
//  - triton_kernel_moe_forward a call on T tokens: output empty_like(hidden_states) [T, H] and intermediate_cache
//    [T·k, I_pad] (N / 2, N = w13's 2·I_pad) in the activation type (bfloat16, Mxfp4Config's only one); the routing
//    metadata triton_kernels' routing() builds (gather/scatter indices and gate scales, a few bytes a (token, slot))
//    is not sized.
#pragma once

#include <cstdint>
#include <string>

namespace memplan {

struct VllmMxfp4Layer {
  int64_t intermediate_padded = 0;  // I_pad
  uint64_t blocks_bytes = 0;        // w13_weight + w2_weight
  uint64_t scales_bytes = 0;        // w13_weight_scale + w2_weight_scale
  uint64_t bias_bytes = 0;          // w13_bias + w2_bias, float32 after loading
  uint64_t total() const;
};

// One sparse layer's experts on one GPU of compute capability `capability` (major x 10 + minor). Throws InputError
// naming `model` where vLLM would run another backend than Triton (capability below 90 or from 110).
VllmMxfp4Layer vllm_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate, int capability,
                                const std::string& model);

// triton_kernel_moe_forward's output and intermediate_cache on `tokens` tokens, bfloat16.
uint64_t vllm_mxfp4_kernel_bytes(int64_t tokens, int64_t hidden, int64_t top_k, int64_t intermediate_padded);

// The checkpoint's own bytes of one layer's experts (gpt-oss's safetensors: *_blocks uint8 [E, rows, cols / 32, 16],
// *_scales uint8 [E, rows, cols / 32], biases bf16), as transformers' integrations/mxfp4.py loads them.
uint64_t mxfp4_checkpoint_layer_bytes(int64_t experts, int64_t hidden, int64_t intermediate);

}  // namespace memplan
