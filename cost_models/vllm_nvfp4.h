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
// From 0.14 (PR #31692, "[MoE Refactor][16/N] Apply Refactor to NVFP4") the experts run as MarlinExperts in vLLM's
// modular kernel (read at the v0.16.0 branch, 2d5be1dd: oracle/nvfp4.py convert_to_nvfp4_moe_kernel_format and
// make_nvfp4_moe_kernel, marlin_utils_fp4.py prepare_nvfp4_moe_layer_for_marlin, modelopt.py
// ModelOptNvFp4FusedMoE.process_weights_after_loading; at v0.18.0 and the v0.23.0 and v0.24.0 branches alike but
// for what VllmNvfp4MarlinLayout names): the same repacked weights, scales and resident workspace, but the Marlin
// branch returns None for both input scales and replace_parameter(layer, ..., None) drops them; the kernel's buffers
// are MarlinExperts' (cost_models/vllm_fused_moe.h vllm_marlin_moe_bytes, modular). From 0.20 the global scales
// stay float32 (no .to(param_dtype) at the 0.20 branch's 132765e35; at v0.18.1rc0 still the model's type; 0.19 not
// read, taken with 0.18); from 0.24 prepare_nvfp4_moe_layer_for_marlin pads the width to Marlin's thread tiles
// (padded_N = round_up(I_p, 64) where H % 128 == 0, else round_up(I_p, 128) with H % 64 asserted; absent at the
// v0.23.0 branch, present at v0.24.0's): w13 to [E, 2 padded_N, H], w2 to [E, H, padded_N], their scales alike.
// Not modelled: W4A16_NVFP4, NVFP4 experts from compute capability 10.0 (vLLM's CUTLASS or FlashInfer FP4 MoE) and
// before 0.11, and the NVFP4 KV cache (refused when read), and FlashInfer's TRT-LLM backend (shuffled in place, no
// padding), chosen only by --linear-backend.
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

// What a release's Marlin path keeps of a layer (above; VllmRule.modular_moe, nvfp4_moe_global_scales_float32,
// marlin_moe_pads_width).
struct VllmNvfp4MarlinLayout {
  bool input_scales_dropped = false;    // 0.14 on
  bool global_scales_float32 = false;   // 0.20 on
  bool pads_width = false;              // 0.24 on
};

// One sparse layer's NVFP4 experts on Marlin (above), one rank's.
struct VllmNvfp4Experts {
  int64_t width = 0;                // the width Marlin holds, N of its kernel: I_p, or padded_N from 0.24
  uint64_t weight_bytes = 0;        // w13_weight and w2_weight, repacked
  uint64_t scale_bytes = 0;         // w13_weight_scale and w2_weight_scale, permuted fp8
  uint64_t global_scale_bytes = 0;  // w13_weight_scale_2 and w2_weight_scale_2, [E] each
  uint64_t input_scale_bytes = 0;   // w13_input_scale [E, 2] and w2_input_scale [E], float32, left registered to 0.13
  uint64_t workspace_bytes = 0;     // multiprocessors x 4 int32
  uint64_t total() const;
};

// The width Marlin holds (VllmNvfp4Experts.width) for `hidden` H and `intermediate_per_rank` I_p; throws InputError
// naming `model` where gptq_marlin_repack cannot take the shapes: unpadded (to 0.23) size_n a multiple of 64 and
// size_k of 16 (2 I_p and H by 64, I_p by 16); padded (0.24 on) H a multiple of 64 and I_p of 16 (the checkpoint's
// fp8 scale groups).
int64_t vllm_nvfp4_marlin_moe_width(int64_t hidden, int64_t intermediate_per_rank, bool pads_width,
                                    const std::string& model);

// `experts` E, `hidden` H, `intermediate_per_rank` I_p, served in `d`, as `layout` keeps them; throws as
// vllm_nvfp4_marlin_moe_width.
VllmNvfp4Experts vllm_nvfp4_marlin_experts(int64_t experts, int64_t hidden, int64_t intermediate_per_rank,
                                           int multiprocessors, DType d, VllmNvfp4MarlinLayout layout,
                                           const std::string& model);

}  // namespace memplan
