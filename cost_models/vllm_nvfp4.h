// vLLM's ModelOpt NVFP4 checkpoints (hf_quant_config.json quant_algo "NVFP4", group_size 16: W4A4, two FP4 values a
// byte and an fp8 scale per 16 values): what one tensor-parallel rank holds for each dense linear module and what
// its forward allocates at the profile run, for serve --engine vllm. Read in vLLM's
// vllm/model_executor/layers/quantization/modelopt.py (@00155cde: ModelOptNvFp4LinearMethod.create_weights and
// process_weights_after_loading), quantization/utils/nvfp4_utils.py (@0b70ce18: swizzle_blockscale,
// pad_nvfp4_weight_for_cutlass), quantization/utils/marlin_utils_fp4.py (@00d52e93: prepare_fp4_layer_for_marlin,
// is_fp4_marlin_supported), kernels/linear/__init__.py (@006fc898: init_nvfp4_linear_kernel's priority list) and
// _custom_ops.py (@0002bde5: scaled_fp4_quant):
//  - create_weights: weight uint8 [N, K/2], weight_scale float8_e4m3fn [N, K/16], input_scale and weight_scale_2
//    float32 [S] (one a fused shard); process_weights_after_loading keeps their maxima and alpha and the input
//    scale's inverse as four 0-dim float32 tensors (16 B) and deletes the [S] ones. N: the module's outputs on one
//    rank (the fused shards summed), K its inputs; K must be a multiple of 16.
//  - The kernel (init_nvfp4_linear_kernel: the first whose is_supported passes): compute capability 10.x and 12.x run
//    an FP4 GEMM (FlashInfer's CuTe-DSL or CUTLASS kernels with flashinfer installed, a default dependency of vLLM's
//    CUDA wheels since PR #26443; vLLM's own CUTLASS without it), whose layout is one: weight_scale swizzled into
//    [round_up(N, 128), round_up(K/16, 4)] fp8 (swizzle_blockscale), weight padded to [round_up(N, 32),
//    round_up(K, 32) / 2] uint8 (pad_nvfp4_weight_for_cutlass, alignment 32). Below 10.0 (7.5 at least:
//    ModelOptNvFp4Config.get_min_capability) Marlin, weight-only: with N_m = round_up(N, 64) (MARLIN_TILE_N) the weight
//    repacked to int32 [K/16, 2 N_m] (K N_m / 2 bytes), the scales to fp8 [K/16, N_m], a global scale, and an int32
//    workspace of one entry a multiprocessor (marlin_make_workspace_new). The loaded tensors they replace go back to
//    the caching allocator.
//  - The forward at M tokens: the FP4 GEMM quantizes its input (scaled_fp4_quant with padded_n = round_up(K, 32)):
//    uint8 [M, K_p/2] and the swizzled scales, round_up(M, 128) x round_up(K_p/16, 4) bytes; its output is
//    [M, round_up(N, 32)], sliced into a copy [M, N] when N was padded, every one alive at the copy (apply's locals).
//    FlashInfer's mm_fp4 takes a 32 MiB workspace it caches for the device (flashinfer/gemm/gemm_base.py
//    _get_cache_buf("mm_fp4_workspace", DEFAULT_WORKSPACE_SIZE), allocated by the first call: counted as
//    allocated from the profile run's first NVFP4 layer). Marlin does not quantize the input: marlin_gemm allocates
//    its output [M, N_m] (sliced into a copy when N_m > N) and, with use_fp32_reduce (USE_FP32_REDUCE_DEFAULT),
//    a float32 c_tmp of SMs x min(round_up(M, 16), 64) x 256 elements (csrc/quantization/marlin/marlin.cu).
//
// NVFP4 experts (ModelOptNvFp4FusedMoE) on Marlin, as the 0.11 series holds them (an index copy of that series'
// modelopt.py, id 205573878; marlin_utils_fp4.py, id 96066638: prepare_moe_fp4_layer_for_marlin): below compute
// capability 10.0 detect_nvfp4_moe_support finds no CUTLASS FP4 and takes Marlin (8.0 at least: the series'
// is_fp4_marlin_supported). create_weights holds per layer, E experts of hidden size H and I_p = I / tp a rank:
// w13_weight uint8 [E, 2 I_p, H/2], w2_weight uint8 [E, H, I_p/2], w13_weight_scale fp8 [E, 2 I_p, H/16],
// w2_weight_scale fp8 [E, H, I_p/16], w13_weight_scale_2 float32 [E, 2], w2_weight_scale_2 [E], w13_input_scale
// float32 [E, 2] and w2_input_scale [E].
// process_weights_after_loading's Marlin branch: prepare_moe_fp4_layer_for_marlin repacks every expert with no
// padding (gptq_marlin_repack of size_n 2 I_p or H, size_k H or I_p: the same bytes, int32), permutes the scales
// into fp8 of the same count (nvfp4_marlin_process_scales keeps every other byte of the model type's), makes each
// global scale the model type's [E] (.to(param_dtype), nvfp4_marlin_process_global_scale), and adds a workspace of
// multiprocessors x 4 int32 (marlin_make_workspace_new(device, 4)); the alphas and input-scale inverses it made
// first are deleted, the loaded input scales stay registered. Its apply calls fused_marlin_moe with that workspace.
// Not modelled: W4A16_NVFP4, NVFP4 experts from compute capability 10.0 (vLLM's CUTLASS or FlashInfer FP4 MoE) and
// in other vLLM versions, and the NVFP4 KV cache (refused when read), and FlashInfer's TRT-LLM backend (shuffled in
// place, no padding), chosen only by --linear-backend.
#pragma once

#include <cstdint>
#include <string>

#include "onnx_import/graph.h"

namespace memplan {

// The FP4 GEMM's layout from compute capability 10.0 (major x 10 + minor), Marlin's below; 7.5 at least.
inline bool vllm_nvfp4_marlin(int capability) { return capability < 100; }

// flashinfer/gemm/gemm_base.py DEFAULT_WORKSPACE_SIZE: mm_fp4's cached workspace (FP4 GEMM path only).
inline constexpr uint64_t kFlashInferGemmWorkspaceBytes = uint64_t{32} << 20;

// One module's bytes once loaded (`n` outputs and `k` inputs on one rank; `multiprocessors` Marlin's workspace).
uint64_t vllm_nvfp4_linear_bytes(int64_t n, int64_t k, bool marlin, int multiprocessors);

// What one call allocates at `tokens` rows beyond the graph's output [tokens, n] in `d` (the quantized input and
// its scales, the padded output; Marlin's c_tmp and padded output).
uint64_t vllm_nvfp4_call_bytes(int64_t tokens, int64_t n, int64_t k, bool marlin, int multiprocessors, DType d);

// One sparse layer's NVFP4 experts on Marlin (above), one rank's.
struct VllmNvfp4Experts {
  uint64_t weight_bytes = 0;        // w13_weight and w2_weight, repacked
  uint64_t scale_bytes = 0;         // w13_weight_scale and w2_weight_scale, permuted fp8
  uint64_t global_scale_bytes = 0;  // w13_weight_scale_2 and w2_weight_scale_2, [E] each in the model's type
  uint64_t input_scale_bytes = 0;   // w13_input_scale [E, 2] and w2_input_scale [E], float32, left registered
  uint64_t workspace_bytes = 0;     // multiprocessors x 4 int32
  uint64_t total() const;
};

// `experts` E, `hidden` H, `intermediate_per_rank` I_p, served in `d`. Throws InputError naming `model` where
// gptq_marlin_repack cannot take the shapes unpadded (size_n a multiple of 64, size_k of 16: 2 I_p and H by 64,
// I_p by 16).
VllmNvfp4Experts vllm_nvfp4_marlin_experts(int64_t experts, int64_t hidden, int64_t intermediate_per_rank,
                                           int multiprocessors, DType d, const std::string& model);

}  // namespace memplan
