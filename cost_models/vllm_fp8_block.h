// vLLM's block-wise fp8 checkpoints (quantization_config {quant_method: fp8, weight_block_size: [block_n, block_k]}:
// DeepSeek-V3's, Qwen's *-FP8 releases): what one tensor-parallel rank holds and what the profile run allocates
// beside the bfloat16 model, for serve --engine vllm on compute capability 8.9 and 9.0 without the deep_gemm
// package, and a per-tensor fp8 checkpoint's experts (no weight_block_size; their linear layers are
// cost_models/vllm_weights.h's). Read in vLLM at 1436674 (vllm/model_executor/layers/quantization/fp8.py), 007d500
// (quantization/utils/fp8_utils.py), 13cb3e4 (fused_moe/fused_moe.py) and 90b0a26
// (model_executor/layers/attention/mla_attention.py):
//  - Fp8Config.__init__ refuses block-wise scales with activation_scheme static; get_quant_method gives
//    Fp8LinearMethod to every LinearBase, Fp8MoEMethod to every FusedMoE, and nothing to the embedding, the LM
//    head (ParallelLMHead is no LinearBase) or norms. A router is a LinearBase: DeepSeek's DeepSeekV2Gate asserts
//    quant_config None (deepseek_v2.py at b863fe5); qwen3_moe's gate takes the model's (qwen3_moe.py at 2e0831b),
//    so it is fp8 unless ignored_layers / modules_to_not_convert lists it.
//  - A linear module (Fp8LinearMethod.create_weights: create_fp8_weight_parameter, create_fp8_scale_parameter with
//    BlockQuantScaleParameter): weight float8_e4m3fn [out_p, in_p] and weight_scale_inv float32
//    [ceil(out_p / block_n), ceil(in_p / block_k)], out_p the module's logical shards summed (fused QKV, merged
//    gate_up: one scale grid). process_weights_after_loading (process_fp8_weight_block_strategy) keeps both on
//    CUDA (the ROCm padding and fnuz rescale aside) and renames the scale weight_scale; maybe_post_process_fp8_
//    weight_block relayouts them only when should_use_deepgemm_for_fp8_linear (deep_gemm installed).
//  - validate_fp8_block_shape refuses, at tp > 1, a row-parallel in_p not a multiple of block_k and a
//    column-parallel shard not a multiple of block_n; a merged module's shards but the last one at tp 1.
//  - The forward (W8A8BlockFp8LinearOp.apply, _run_cutlass on 9.0, _run_triton on 8.9) quantizes its input per
//    token and group of block_n (GroupShape(1, weight_block_size[0])): per_token_group_quant_fp8's x_q fp8 [M, K]
//    and x_s float32 [M, K / block_n] (column-major on the CUTLASS path: the same bytes); it asserts K a multiple of
//    the group. Hopper's padded_cutlass copies both into [round_up(M, 4), ...] tensors when M is not a multiple of 4.
//  - Experts (Fp8MoEMethod.create_weights, block_quant): w13_weight fp8 [E, 2 I_p, H], w2_weight fp8 [E, H, I_p],
//    w13_weight_scale_inv float32 [E, 2 ceil(I_p / block_n), ceil(H / block_k)], w2_weight_scale_inv float32
//    [E, ceil(H / block_n), ceil(I_p / block_k)]; it raises when I_p is not a multiple of block_n, or at tp > 1 of
//    block_k. get_fp8_moe_backend on 8.9 / 9.0 without VLLM_USE_FLASHINFER_MOE_FP8 and deep_gemm: TRITON, whose
//    process_weights_after_loading keeps the four tensors as loaded.
//  - fused_experts_impl (Triton, use_fp8_w8a8 with block_shape) beside the unquantized kernel's buffers: get_default_
//    config's BLOCK_SIZE_M 64 for fp8_w8a8 with a block shape; moe_kernel_quantize_input of the chunk
//    (qcurr_hidden_states fp8 [M, H], a1q_scale float32 [M, H / block_k]) and of intermediate_cache2
//    (qintermediate_cache2 fp8 [M k, I_p], a2q_scale float32 [M k, I_p / block_k]), all alive at the second GEMM.
//  - Per-tensor experts (no weight_block_size: AutoFP8's and llm-compressor's Mixtral-8x7B-Instruct-v0.1-FP8, or
//    --quantization fp8 on a bfloat16 checkpoint), Fp8MoEMethod at 1436674: create_weights makes w13_weight fp8
//    [E, 2 I_p, H], w2_weight fp8 [E, H, I_p], w13_weight_scale float32 [E, 2] (one a shard, "combined to a single
//    scale after weight loading"), w2_weight_scale float32 [E] and, under activation_scheme static, w13_input_scale
//    and w2_input_scale float32 [E]. process_weights_after_loading (CUDA, not FlashInfer, not Marlin): each input
//    scale becomes its max over the experts, a 0-dim tensor (4 B); max_w13_scales = w13_weight_scale.max(dim=1)
//    .values, float32 [E], replaces the [E, 2] scale; each expert's two shards are dequantized and requantized into
//    w13_weight itself (per_tensor_dequantize's temporaries and scaled_fp8_quant's output of one [I_p, H] shard at a
//    time, freed before the next): nothing of the loop persists. A bfloat16 checkpoint (--quantization fp8) is
//    quantized the same way into empty_like fp8 tensors that replace the loaded ones, w13_weight_scale re-made
//    float32 [E], no input scales. get_fp8_moe_backend(block_quant False) on 8.9 and above without
//    VLLM_USE_FLASHINFER_MOE_FP8 (envs.py: default "0"): TRITON (fused_experts), no shape checks.
//  - fused_experts_impl with use_fp8_w8a8 and no block shape: get_default_config's unquantized rule for
//    BLOCK_SIZE_M (16 when M <= E, else 64); moe_kernel_quantize_input -> _fp8_quantize -> ops.scaled_fp8_quant
//    (per_act_token_quant False: fp8_w8a8_moe_quant_config's default; fused_moe/utils.py at 285a3ab,
//    _custom_ops.py at 7bcae67): qcurr_hidden_states fp8 [M, H] and qintermediate_cache2 fp8 [M k, I_p], each with
//    a new float32 [1] scale when dynamic (static: the layer's input scale, nothing new), both alive at the second
//    GEMM.
//  - MLA (MLACommonBaseImpl.process_weights_after_loading): get_and_maybe_dequant_weights(kv_b_proj) returns a new
//    [kv_lora_rank, heads_p (nope + v)] tensor in the model's type for a quantized kv_b_proj (its own weight, no
//    copy, unquantized); W_UV and W_UK_T are views of it, held for every layer beside the fp8 kv_b_proj the prefill
//    still runs.
#pragma once

#include <cstdint>
#include <string>

namespace memplan {

struct VllmFp8Block {
  int64_t n = 0, k = 0;  // weight_block_size [block_n, block_k]; 0: per-tensor fp8
  bool on() const { return n > 0 && k > 0; }
};

// One linear module's fp8 weight and float32 weight_scale_inv grid.
uint64_t vllm_fp8_block_linear_bytes(int64_t out_p, int64_t in_p, const VllmFp8Block& b);

// per_token_group_quant_fp8's x_q and x_s for `tokens` rows of `features` (padded_cutlass's copies beside them on
// compute capability 9.0 when the rows are not a multiple of 4).
uint64_t vllm_fp8_block_input_quant_bytes(int64_t tokens, int64_t features, const VllmFp8Block& b, int capability);

struct VllmFp8BlockExperts {
  uint64_t weight_bytes = 0;  // w13_weight + w2_weight
  uint64_t scale_bytes = 0;   // w13_weight_scale_inv + w2_weight_scale_inv
  uint64_t total() const { return weight_bytes + scale_bytes; }
};

// One sparse layer's experts on one rank (I_p = intermediate_per_rank). Throws InputError naming `model` where
// Fp8MoEMethod.create_weights raises, or where the kernel's group quantization of H or I_p would assert.
VllmFp8BlockExperts vllm_fp8_block_experts(int64_t experts, int64_t hidden, int64_t intermediate_per_rank, int tp,
                                           const VllmFp8Block& b, const std::string& model);

// fused_experts_impl's quantized activations and their scales for a chunk of `chunk_tokens` tokens.
uint64_t vllm_fp8_block_moe_quant_bytes(int64_t chunk_tokens, int64_t hidden, int64_t top_k,
                                        int64_t intermediate_per_rank, const VllmFp8Block& b);

// Per-tensor fp8 experts of one sparse layer on one rank (`experts`: the rank's, E_local under expert parallelism),
// as they stay after process_weights_after_loading (scale_bytes: the [E] weight scales and the static input scalars).
VllmFp8BlockExperts vllm_fp8_tensor_experts(int64_t experts, int64_t hidden, int64_t intermediate_per_rank,
                                            bool static_activations);

// fused_experts_impl's per-tensor quantized chunk and intermediate (with their dynamic scales) for `chunk_tokens`.
uint64_t vllm_fp8_tensor_moe_quant_bytes(int64_t chunk_tokens, int64_t hidden, int64_t top_k,
                                         int64_t intermediate_per_rank, bool static_activations);

// MLA's dequantized kv_b_proj (W_UV and W_UK_T's storage), every layer's, in `element_bytes`.
uint64_t vllm_fp8_block_mla_absorbed_bytes(int64_t layers, int64_t kv_lora_rank, int64_t heads_per_rank,
                                           int64_t qk_nope_head_dim, int64_t v_head_dim, uint64_t element_bytes);

}  // namespace memplan
