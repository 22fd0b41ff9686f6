// MXFP4 experts (gpt-oss checkpoints: quantization_config {quant_method: mxfp4}) as the serving engines hold them:
// what one sparse layer's FusedMoE holds and what its kernel allocates a call, in place of the graph's bf16 experts
// and of the unquantized fused_experts kernel (cost_models/vllm_fused_moe.h). SGLang's Mxfp4MoEMethod is vLLM's
// ("Adapted from" vLLM's mxfp4.py); the engines differ in the padding and in the post-load relayout.
//
// vLLM, read at 007d500 (vllm/model_executor/layers/quantization/mxfp4.py) and 04bec4c
// (fused_moe/gpt_oss_triton_kernels_moe.py):
//  - Mxfp4Config.from_config ignores modules_to_not_convert and get_quant_method quantizes FusedMoE layers only
//    (every LinearBase, attention and router included, gets UnquantizedLinearMethod): only the experts change;
//  - get_mxfp4_backend on CUDA: without VLLM_USE_FLASHINFER_MOE_MXFP4_BF16, a compute capability in [9.0, 11.0)
//    with triton_kernels runs the Triton backend (triton_kernel_moe_forward); Marlin before 9.0, or with
//    VLLM_MXFP4_USE_MARLIN, without triton_kernels or with torch older than 2.8 ("Using Marlin backend"; a 0.11-series
//    copy of mxfp4.py, index id 33692451, and LoRA's get_mxfp4_backend_with_lora), sized below
//    (vllm_mxfp4_marlin_layer); FlashInfer's SM100_FI_MXFP4_BF16 on SM100 wherever FlashInfer is usable, before any
//    other (vllm_mxfp4_flashinfer_layer below, from 0.12);
//  - Mxfp4MoEMethod.create_weights (Triton): I_pad = round_up(I_p, 64), w13_weight uint8 [E, 2·I_pad, H / 2] (two
//    E2M1 values a byte), w13_weight_scale uint8 [E, 2·I_pad, H / 32] (one E8M0 scale a block of 32), w13_bias bf16
//    [E, 2·I_pad], w2_weight uint8 [E, H, I_pad / 2], w2_weight_scale uint8 [E, H, I_pad / 32], w2_bias bf16 [E, H];
//  - process_weights_after_loading (Triton) replaces both biases by float32 copies and hands _swizzle_mxfp4's
//    relayout of the blocks and of the scales to triton_kernels (self.w13_weight / w13_precision_config); it deletes
//    layer.w13_weight and layer.w2_weight but not the scale parameters, so the scales are held twice: as loaded
//    (retained_scales_bytes) and swizzled (the swizzle's copy: HopperMXScaleLayout.swizzle_data transposes and
//    copies);
//  - the swizzled copies on Hopper (9.x), padded (blocks_bytes and scales_bytes are the copies held;
//    swizzle_padding_bytes their padding). _swizzle_mxfp4 (quantization/utils/mxfp4_utils.py at 01b817dbbd2e; with
//    vLLM's torch >= 2.8.1 the swizzle is on) takes make_default_matmul_mxfp4_w_layout(mx_axis=1) =
//    HopperMXValueLayout {mx_axis: 1} and make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=8) =
//    HopperMXScaleLayout {mx_axis: 1, num_warps: 8} (num_warps 8 unless pplx or DeepEP low-latency all-to-all, which
//    memplan does not run), and hands each the weight transposed, [E, cols, rows] for a [E, rows, cols] parameter;
//    convert_layout builds the layout on that shape, whose _maybe_mT (mx_axis 1 = the leading dims' count) turns it
//    back to [E, rows, cols]. The triton_kernels is the one vLLM's cmake/external_projects/triton_kernels.cmake
//    fetches, tag v3.5.0 or v3.5.1 (release/3.5.x, cut on 2025-08-29 from a main whose two layout files did not
//    change from 19ca20fda4cf, 2025-08-23, to 30ede52aa2ae, 2025-10-07; the release branch takes fixes only). Its
//    HopperMXValueLayout.swizzle_data (mma_version 3) pads the rows to 16 and the packed bytes (cols / 2) to 32;
//    HopperMXScaleLayout.swizzle_data pads the rows to SWIZZLE_ALIGN_M = 2·num_warps·2·8 = 256 and the scales
//    (cols / 32) to SWIZZLE_ALIGN_K = 2. w13 (rows 2·I_pad, cols H): values E·r16(2·I_pad)·r32(H / 2), scales
//    E·r256(2·I_pad)·r2(H / 32); w2 (rows H, cols I_pad): values E·r16(H)·r32(I_pad / 2), scales
//    E·r256(H)·r2(I_pad / 32) (rN: round up to a multiple of N). gpt-oss's H = I_pad = 2,880 pads no value and
//    the scales' rows 5,760 to 5,888 and 2,880 to 3,072. On 10.x triton_kernels lays them out for Blackwell
//    (BlackwellMXValueLayout / BlackwellMXScaleLayout), not read: those copies are sized at the bytes they relay
//    out;
//  - Marlin (the same copy's create_weights and process_weights_after_loading; marlin_utils_fp4.py
//    prepare_moe_fp4_layer_for_marlin and mxfp4_marlin_process_scales; marlin_utils.py marlin_make_workspace_new):
//    create_weights pads I_p to I_pad = round_up(I_p, 128) and H to H_pad = round_up(H, 256) ("the moe marlin kernel
//    requires that for each linear n % 256 == 0 and k % 128 == 0") and sets the layer's hidden_size to H_pad, so
//    FusedMoE.forward pads its input with F.pad to [T, H_pad] (a new tensor) and slices the output back;
//    prepare_moe_fp4_layer_for_marlin replaces each parameter by its repacked copy of the same bytes:
//    gptq_marlin_repack's 4-bit tiles for w13 [E, 2·I_pad, H_pad / 2] and w2 [E, H_pad, I_pad / 2], the scales
//    permuted and made float8_e8m0fnu (one byte each, as loaded), the biases in params_dtype (bfloat16), and a
//    workspace of multiprocessors x 4 int32 a layer (marlin_make_workspace_new(device, 4)); nothing loaded is kept.
//    Its kernel, fused_marlin_moe (cost_models/vllm_fused_moe.h vllm_marlin_moe_bytes: cache13 of
//    T·k·max(2·I_pad, H_pad), cache2 [T·k, I_pad], the output [T, H_pad], moe_align_block_size at its own
//    block_size_m, and below compute capability 9.0 the float32 reduction buffer), runs beside the padded input and
//    the router's fused_topk tensors (FusedMoE.select_experts);
//  - triton_kernel_moe_forward a call on T tokens: output empty_like(hidden_states) [T, H] and intermediate_cache
//    [T·k, I_pad] (N / 2, N = w13's 2·I_pad) in the activation type (bfloat16, Mxfp4Config's only one); the routing
//    metadata triton_kernels' routing() builds (gather/scatter indices and gate scales, a few bytes a (token, slot))
//    is not sized.
//
// SGLang (python/sglang/srt/layers/quantization/mxfp4.py at bafa16e; server_args.py _handle_gpt_oss_family at
// 469c63e): for gpt-oss with an MXFP4 checkpoint and --moe-runner-backend auto, flashinfer_mxfp4 on SM100 (compute
// capability 10.x), else triton_kernel (expert parallel size 1, triton_kernels installed):
//  - triton_kernel: create_weights pads I_p to round_up(I_p, 32) off SM100 (its "hack" to match the loader's per-rank
//    size) and to round_up(I_p, 64) on it; the same six parameters; process_weights_after_loading as vLLM's Triton
//    backend (float32 biases, the swizzled copies, the loaded scales kept, the blocks deleted). Its own
//    _swizzle_mxfp4 makes the same two layout calls (mx_axis 1, num_warps = 8), so the copies pad as vLLM's on
//    Hopper. SGLang pins no triton_kernels: the layout-class-and-kwargs API it unpacks is triton main's from
//    2025-07-21 to 2025-11-23 (#8765), in which HopperMXScaleLayout's padding is one code and HopperMXValueLayout's
//    is v3.5's until #8677 (2025-11-08), then to multiples of 64 on both dims: the values are sized by v3.5's rule, a
//    lower bound where a later build is installed;
//  - flashinfer_mxfp4: I_pad = round_up(I_p, 256) and H_pad = round_up(H, 256) (the parameters shaped by H_pad);
//    process_weights_after_loading replaces every parameter by its shuffled copy of the same shape (the biases
//    float32) and adds gemm1_alpha, gemm1_beta and gemm1_clamp_limit, float32 [E] each (flashinfer_trtllm_mxfp4_layer:
//    vLLM's SM100_FI_MXFP4_BF16 holds the same, read at v0.12.0 to v0.18.0 in mxfp4.py's create_weights and
//    process_weights_after_loading).
//
// vLLM's SM100_FI_MXFP4_BF16 (docs/research/vllm-flashinfer-mxfp4-sm100.md and flashinfer-trtllm-mxfp4-buffers.md):
//  - FusedMoE.__init__ rounds the layer's hidden size to 256 (maybe_roundup_hidden_size), so each call pads its input
//    with F.pad to [T, H_pad] (a new tensor) and slices FlashInfer's output [T, H_pad] back to H (a view);
//  - the weights as SGLang's flashinfer_mxfp4 (above) and one permute-index cache a layer (Mxfp4MoEMethod.
//    _cache_permute_indices, FlashInfer's get_w2_permute_indices_with_cache: one int64 index a row of each of the six
//    shapes it shuffles, kept on the GPU: 3 x 2·I_pad + 3 x H_pad indices);
//  - a call is FlashInfer's trtllm_fp4_block_scale_moe (FlashInfer 0.5.3, 0.6.3 and 0.6.6, the releases vLLM 0.12,
//    0.16 and 0.18 pin; every buffer through PyTorch's allocator, freed at return but the output): topk_ids int32 and
//    expert_weights bfloat16 [T, k] and the output bfloat16 [T, H_pad] (flashinfer/fused_moe/core.py
//    trtllm_fp4_block_scale_moe_op), then the launcher's (csrc/trtllm_fused_moe_kernel_launcher.cu, FP4BlockScale
//    Launcher): routing metadata, int32: [E], [1], [T·k], [P], [max(2E, 512)], [C] twice and [1]; gemm1_output
//    bfloat16 [max(P, ceil(65536 / I_pad)), I_pad] (SwiGLU fused: no activation buffer) and gemm2_output bfloat16
//    [max(P, ceil(65536 / H_pad)), H_pad] (runner.h maybeGetMinTokenCount); its batched GEMMs' workspace is 0 bytes
//    without DeepSeek's fp8. C = min(E, T·k) + floor((T·k - min(E, T·k)) / tile) and P = C·tile (runner.h
//    getMaxNumCtasInBatchDim, getMaxPermutedPaddedCount). The tile: vLLM sizes its cache before FlashInfer's
//    autotuner runs (compile_or_warm_up_model follows determine_available_memory), so the launcher's fallback tactic,
//    the smallest of its candidates: t0 = clamp(next power of two of ceil(T·k / E), 8, 64), tile = max(8, t0 / 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cost_models/vllm_engine.h"
#include "cost_models/vllm_fused_moe.h"

namespace memplan {

// Which of vLLM's MXFP4 MoE backends holds the experts (get_mxfp4_backend, above).
enum class VllmMxfp4Backend { Triton, Marlin, FlashInfer };

struct Mxfp4ExpertsLayer {
  int64_t intermediate_padded = 0;    // I_pad
  int64_t hidden_padded = 0;          // H, or H_pad (SGLang's flashinfer_mxfp4)
  uint64_t blocks_bytes = 0;          // w13_weight + w2_weight (the Triton backends' swizzled copies, padded on 9.x)
  uint64_t scales_bytes = 0;          // w13_weight_scale + w2_weight_scale (likewise)
  uint64_t swizzle_padding_bytes = 0; // of blocks_bytes + scales_bytes, the Hopper layouts' alignment padding
  uint64_t retained_scales_bytes = 0; // the loaded scales the Triton backends keep beside their swizzled copies
  uint64_t bias_bytes = 0;            // w13_bias + w2_bias, float32 after loading
  uint64_t constants_bytes = 0;       // flashinfer_mxfp4's gemm1_alpha, gemm1_beta, gemm1_clamp_limit
  uint64_t workspace_bytes = 0;       // Marlin's int32 workspace (multiprocessors x 4)
  uint64_t index_cache_bytes = 0;     // vLLM's FlashInfer permute indices (int64, one a row of each shuffled shape)
  bool bias_float32 = true;           // the biases' type held: float32, or Marlin's bfloat16
  uint64_t total() const;
};

// vLLM's backend for gpt-oss's MXFP4 experts on a CUDA GPU of compute capability `capability` (major x 10 + minor)
// at the release `rule` names: `requested` none (vLLM's choice: Marlin below 9.0; from 0.12, which bundles
// triton_kernels, Triton from 9.0 to 10.x, and from 11.0 refused: triton_kernels' layouts for that GPU are not read;
// before 0.12 no install vLLM ships has triton_kernels, pip's or the Docker image's, so get_mxfp4_backend takes Marlin
// on every GPU but 10.0, refused, whose choice rests on whether FlashInfer is usable: its layout there is not read),
// Marlin (VLLM_MXFP4_USE_MARLIN=1, or an install without triton_kernels: any capability), Triton (refused below 9.0,
// where vLLM runs Marlin whatever is installed, from 11.0, and on 9.x before 0.11.1, whose pinned torch 2.8.0 keeps
// triton_kernels' StridedLayout, not sized) or FlashInfer (SM100 from 0.12 only); on ROCm (rocm_compute_capability)
// refused whatever is asked. `flashinfer` (--flashinfer; none: not stated): where FlashInfer is usable vLLM takes its
// SM100_FI_MXFP4_BF16 layout before any other on 10.0 (10.x from 0.13, is_device_capability_family): FlashInfer from
// 0.12 when stated usable or not stated (vLLM's Docker image has it and pip's vllm depends on flashinfer-python: the
// larger layout, so the cache is not overstated), Triton or Marlin asked with it stated usable refused; stated
// absent, 10.0 before 0.12 is Marlin's. Throws InputError naming `model`.
VllmMxfp4Backend vllm_mxfp4_backend(int capability, std::optional<VllmMxfp4Backend> requested, const VllmRule& rule,
                                    std::optional<bool> flashinfer, const std::string& model);

// One sparse layer's experts under vLLM's Marlin backend (above); `multiprocessors` sizes the workspace (0: not known,
// not counted).
Mxfp4ExpertsLayer vllm_mxfp4_marlin_layer(int64_t experts, int64_t hidden, int64_t intermediate, int multiprocessors,
                                          const std::string& model);

// The Marlin backend's kernel on `tokens` tokens in bfloat16, the layer padded as `layer`, with `multiprocessors`
// SMs, `reduces` as vllm_marlin_moe_reduces says: fused_marlin_moe's buffers at H_pad and I_pad
// (vllm_marlin_moe_bytes; `modular`: as MarlinExperts in the modular kernel, from 0.17 by PR #34588 — read at
// v0.17.1rc0 and v0.18.0: Mxfp4MoEMethod.process_weights_after_loading builds FusedMoEKernel(prepare_finalize,
// MarlinExperts) over the same prepare_moe_fp4_layer_for_marlin layer, and the runner still pads the input to the
// layer's hidden size, maybe_roundup_hidden_size's 256 for Marlin) and the padded input [T, H_pad].
VllmFusedMoeBytes vllm_mxfp4_marlin_kernel_bytes(int64_t tokens, int64_t top_k, int64_t experts,
                                                 const Mxfp4ExpertsLayer& layer, bool reduces, int multiprocessors,
                                                 bool modular);

// One sparse layer's experts on one GPU of compute capability `capability` (major x 10 + minor) under vLLM's Triton
// backend. Throws InputError naming `model` where vLLM would run another backend (capability below 90 or from 110).
Mxfp4ExpertsLayer vllm_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate, int capability,
                                   const std::string& model);

// FlashInfer's trtllm-gen MXFP4 layout of one sparse layer's experts, I_p and H padded to 256 (SGLang's
// flashinfer_mxfp4 and vLLM's SM100_FI_MXFP4_BF16, above; without vLLM's index cache).
Mxfp4ExpertsLayer flashinfer_trtllm_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate,
                                                const std::string& model);

// One sparse layer's experts under vLLM's SM100_FI_MXFP4_BF16: FlashInfer's layout and the permute-index cache.
Mxfp4ExpertsLayer vllm_mxfp4_flashinfer_layer(int64_t experts, int64_t hidden, int64_t intermediate,
                                              const std::string& model);

// One call of vLLM's SM100_FI_MXFP4_BF16 on `tokens` tokens over `experts` experts (all on the rank), the layer
// padded as `layer`: the padded input, FlashInfer's output, top-k and routing buffers and its two GEMM outputs
// (above; chunk_tokens the call's tokens, block_size_m the tile).
VllmFusedMoeBytes vllm_mxfp4_flashinfer_kernel_bytes(int64_t tokens, int64_t top_k, int64_t experts,
                                                     const Mxfp4ExpertsLayer& layer);

// SGLang's MoE runner backend for gpt-oss's MXFP4 experts on a CUDA GPU of `capability`: "flashinfer_mxfp4" (10.x)
// or "triton_kernel" (9.x). Throws InputError naming `model` elsewhere: below 9.0 and from 11.0 triton_kernels lays
// the weights out for Ampere or consumer Blackwell (make_default_matmul_mxfp4_w_layout), which is not read.
std::string sglang_mxfp4_backend(int capability, const std::string& model);

// One sparse layer's experts as SGLang holds them under sglang_mxfp4_backend(capability, model), which throws.
Mxfp4ExpertsLayer sglang_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate, int capability,
                                     const std::string& model);

// triton_kernel_moe_forward's output and intermediate_cache on `tokens` tokens, bfloat16.
uint64_t vllm_mxfp4_kernel_bytes(int64_t tokens, int64_t hidden, int64_t top_k, int64_t intermediate_padded);

// The checkpoint's own bytes of one layer's experts (gpt-oss's safetensors: *_blocks uint8 [E, rows, cols / 32, 16],
// *_scales uint8 [E, rows, cols / 32], biases bf16), as transformers' integrations/mxfp4.py loads them.
uint64_t mxfp4_checkpoint_layer_bytes(int64_t experts, int64_t hidden, int64_t intermediate);

}  // namespace memplan
