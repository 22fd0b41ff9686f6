#include "cost_models/mxfp4_experts.h"

#include <fmt/format.h>

#include <algorithm>

#include "cost_models/vllm_engine.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

constexpr int64_t kMxfp4Block = 32;  // mxfp4.py create_weights: mxfp4_block

// E·rows·cols / 2 bytes of E2M1 pairs plus E·rows·cols / 32 E8M0 scales.
void add_matrix(Mxfp4ExpertsLayer& l, int64_t experts, int64_t rows, int64_t cols) {
  const uint64_t elements = checked_mul(checked_mul(u64(experts), u64(rows), "mxfp4 bytes"), u64(cols), "mxfp4 bytes");
  l.blocks_bytes = checked_add(l.blocks_bytes, elements / 2, "mxfp4 bytes");
  l.scales_bytes = checked_add(l.scales_bytes, elements / u64(kMxfp4Block), "mxfp4 bytes");
}

// The Hopper (9.x) relayout of one [E, rows, cols] weight (rows the output dimension, cols the reduced one, along
// which MXFP4's blocks run) that _swizzle_mxfp4 hands triton_kernels; mxfp4_experts.h derives each step.
// triton_kernels v3.5.x (python/triton_kernels/triton_kernels/tensor_details/layout_details; both files unchanged on
// triton-lang/triton's main from 19ca20fda4cf, 2025-08-23, to 30ede52aa2ae, 2025-10-07, and release/3.5.x was cut
// from main on 2025-08-29, triton#8012):
//  - hopper_value.py HopperMXValueLayout.swizzle_data, mma_version 3 (the default: make_default_matmul_mxfp4_w_layout
//    passes mx_axis only): u8_kwidth 1, so the rows pad to k_tile[0]·warp_tile[0]·threads[0]·scott_trick[0]·
//    contig[0] = 1·2·4·2·1 = 16 and the packed bytes (cols / 2) to k_tile[1]·warp_tile[1]·threads[1]·
//    scott_trick[1]·contig[1] = 4·2·4·1·1 = 32;
//  - hopper_scale.py HopperMXScaleLayout.swizzle_data: SWIZZLE_ALIGN_M = 2·num_warps·2·8 rows, num_warps = 8
//    (vLLM's mxfp4.py at 007d500 and SGLang's at bafa16e, process_weights_after_loading), so 256 rows, and
//    SWIZZLE_ALIGN_K = 2 scales (cols / 32).
constexpr uint64_t kHopperValueRowAlign = 16;
constexpr uint64_t kHopperValueByteAlign = 32;
constexpr uint64_t kHopperScaleRowAlign = 2 * 8 * 2 * 8;  // 2·num_warps·2·8, num_warps = 8
constexpr uint64_t kHopperScaleColAlign = 2;

void add_hopper_swizzled_matrix(Mxfp4ExpertsLayer& l, int64_t experts, int64_t rows, int64_t cols) {
  const auto bytes = [&](uint64_t padded_rows, uint64_t padded_cols) {
    return checked_mul(checked_mul(u64(experts), padded_rows, "mxfp4 bytes"), padded_cols, "mxfp4 bytes");
  };
  const uint64_t values =
      bytes(round_up(u64(rows), kHopperValueRowAlign), round_up(u64(cols) / 2, kHopperValueByteAlign));
  const uint64_t scales =
      bytes(round_up(u64(rows), kHopperScaleRowAlign), round_up(u64(cols) / u64(kMxfp4Block), kHopperScaleColAlign));
  l.blocks_bytes = checked_add(l.blocks_bytes, values, "mxfp4 bytes");
  l.scales_bytes = checked_add(l.scales_bytes, scales, "mxfp4 bytes");
}

// create_weights' six parameters at I_pad and H_pad (mxfp4.py, vLLM's and SGLang's alike), the biases float32 as
// process_weights_after_loading leaves them. `triton_backend`: the blocks and scales held are _swizzle_mxfp4's
// copies, the loaded scales kept beside them (mxfp4_experts.h); `hopper`: those copies in triton_kernels' Hopper
// layouts, padded (add_hopper_swizzled_matrix); off Hopper (vLLM's Triton backend on 10.x: Blackwell layouts, not
// read) they are sized at the bytes they relay out.
Mxfp4ExpertsLayer layer_at(int64_t experts, uint64_t hidden_padded, uint64_t intermediate_padded, bool triton_backend,
                           bool hopper) {
  Mxfp4ExpertsLayer l;
  l.intermediate_padded = static_cast<int64_t>(intermediate_padded);
  l.hidden_padded = static_cast<int64_t>(hidden_padded);
  add_matrix(l, experts, 2 * l.intermediate_padded, l.hidden_padded);  // w13
  add_matrix(l, experts, l.hidden_padded, l.intermediate_padded);      // w2
  if (triton_backend) l.retained_scales_bytes = l.scales_bytes;
  if (triton_backend && hopper) {
    const uint64_t unpadded = checked_add(l.blocks_bytes, l.scales_bytes, "mxfp4 bytes");
    l.blocks_bytes = l.scales_bytes = 0;
    add_hopper_swizzled_matrix(l, experts, 2 * l.intermediate_padded, l.hidden_padded);  // w13
    add_hopper_swizzled_matrix(l, experts, l.hidden_padded, l.intermediate_padded);      // w2
    l.swizzle_padding_bytes = checked_add(l.blocks_bytes, l.scales_bytes, "mxfp4 bytes") - unpadded;
  }
  // w13_bias [E, 2·I_pad] and w2_bias [E, H_pad], float32 after process_weights_after_loading.
  l.bias_bytes = checked_mul(checked_mul(u64(experts), 2 * intermediate_padded + hidden_padded, "mxfp4 bytes"), 4,
                             "mxfp4 bytes");
  return l;
}

// The checkpoint's blocks of 32 run along the hidden size, whichever engine loads it.
void check_hidden(int64_t hidden, const std::string& model) {
  if (hidden % kMxfp4Block != 0)
    throw InputError(fmt::format("serve: {}'s MXFP4 experts have a hidden size of {}, not a multiple of MXFP4's blocks "
                                 "of 32", model, hidden));
}

}  // namespace

uint64_t Mxfp4ExpertsLayer::total() const {
  uint64_t t = checked_add(blocks_bytes, scales_bytes, "mxfp4 bytes");
  t = checked_add(t, retained_scales_bytes, "mxfp4 bytes");
  t = checked_add(t, bias_bytes, "mxfp4 bytes");
  t = checked_add(t, workspace_bytes, "mxfp4 bytes");
  t = checked_add(t, index_cache_bytes, "mxfp4 bytes");
  return checked_add(t, constants_bytes, "mxfp4 bytes");
}

namespace {

// Where vLLM's Triton backend runs and memplan reads its layouts: 9.0 to 10.x.
void check_triton_capability(int capability, bool requested, const std::string& model) {
  if (capability >= 90 && capability < 110) return;
  throw InputError(fmt::format(
      "serve --engine vllm: {}'s MXFP4 experts on compute capability {}.{}{}: {}", model, capability / 10,
      capability % 10, requested ? " with --mxfp4-backend triton" : "",
      capability < 90 ? "vLLM runs its Marlin backend below 9.0 whatever is installed (get_mxfp4_backend); give "
                        "--mxfp4-backend auto or marlin"
                      : "vLLM's Triton backend there lays the weights out with triton_kernels' layouts for that GPU, "
                        "which memplan does not read (it sizes the Triton backend of 9.0 to 10.x); give "
                        "--mxfp4-backend marlin if vLLM's log says \"Using Marlin backend\""));
}

}  // namespace

VllmMxfp4Backend vllm_mxfp4_backend(int capability, std::optional<VllmMxfp4Backend> requested, const VllmRule& rule,
                                    std::optional<bool> flashinfer, const std::string& model) {
  if (rocm_compute_capability(capability))
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts on compute capability {}.{} (ROCm): vLLM's mxfp4.py pads them to "
        "get_padding_alignment() there and runs ROCm's kernels, which memplan does not size (it sizes CUDA's Triton "
        "and Marlin backends)", model, capability / 10, capability % 10));
  const bool sm100 = vllm_sm100(capability, rule);
  if (requested == VllmMxfp4Backend::FlashInfer && (!sm100 || flashinfer == false || !rule.bundles_triton_kernels))
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts with --mxfp4-backend flashinfer on compute capability {}.{}: {}",
        model, capability / 10, capability % 10,
        !sm100                          ? "vLLM's SM100_FI_MXFP4_BF16 runs on 10.0 (10.x from 0.13) only"
        : flashinfer == false           ? "--flashinfer no says FlashInfer is not usable"
                                        : "its layout is read from vLLM 0.12 (give --engine-version 0.12 or later)"));
  // get_mxfp4_backend asks whether FlashInfer is usable on SM100 first (v0.11.0 to v0.18.0).
  if (sm100 && flashinfer == true && requested && requested != VllmMxfp4Backend::FlashInfer)
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts on compute capability {}.{} with --flashinfer yes and "
        "--mxfp4-backend {}: vLLM takes FlashInfer's SM100_FI_MXFP4_BF16 layout there before any other backend "
        "(get_mxfp4_backend); give --mxfp4-backend auto, or --flashinfer no if vLLM's log names another backend",
        model, capability / 10, capability % 10, requested == VllmMxfp4Backend::Marlin ? "marlin" : "triton"));
  if (sm100 && flashinfer != false && (!requested || requested == VllmMxfp4Backend::FlashInfer)) {
    if (rule.bundles_triton_kernels) return VllmMxfp4Backend::FlashInfer;
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts on compute capability {}.{} before vLLM 0.12: vLLM takes "
        "FlashInfer's MXFP4 layout there when FlashInfer is usable (the Docker image; pip's flashinfer-python from "
        "0.11.1), which memplan reads from 0.12, and Marlin otherwise (no triton_kernels before 0.12); give "
        "--flashinfer no (or --mxfp4-backend marlin) if vLLM's log says \"Using Marlin backend\"",
        model, capability / 10, capability % 10));
  }
  if (requested == VllmMxfp4Backend::Marlin) return VllmMxfp4Backend::Marlin;
  if (!requested && capability < 90) return VllmMxfp4Backend::Marlin;
  // get_mxfp4_backend before 0.12: `cap[0] < 9 or not has_triton_kernels() or torch < 2.8.0` -> Marlin.
  if (!requested && !rule.bundles_triton_kernels) return VllmMxfp4Backend::Marlin;
  check_triton_capability(capability, requested.has_value(), model);
  if (requested && capability / 10 == 9 && !rule.mxfp4_hopper_swizzle)
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts with --mxfp4-backend triton on compute capability {}.{} before vLLM "
        "0.11.1: its pinned torch 2.8.0 is older than the 2.8.1 _swizzle_mxfp4 asks for Hopper's layouts, so "
        "triton_kernels' StridedLayout holds the weights, which memplan does not size (no vLLM install of those "
        "releases ships triton_kernels: give --mxfp4-backend auto for the Marlin backend they run)",
        model, capability / 10, capability % 10));
  return VllmMxfp4Backend::Triton;
}

Mxfp4ExpertsLayer vllm_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate, int capability,
                                   const std::string& model) {
  check_triton_capability(capability, true, model);
  check_hidden(hidden, model);
  return layer_at(experts, u64(hidden), round_up(u64(intermediate), 64), /*triton_backend=*/true,
                  /*hopper=*/capability / 10 == 9);
}

Mxfp4ExpertsLayer vllm_mxfp4_marlin_layer(int64_t experts, int64_t hidden, int64_t intermediate, int multiprocessors,
                                          const std::string& model) {
  check_hidden(hidden, model);
  // create_weights' Marlin padding; the repacked blocks and the float8_e8m0fnu scales are the bytes loaded.
  Mxfp4ExpertsLayer l = layer_at(experts, round_up(u64(hidden), 256), round_up(u64(intermediate), 128),
                                 /*triton_backend=*/false, /*hopper=*/false);
  // w13_bias [E, 2·I_pad] and w2_bias [E, H_pad] in params_dtype (bfloat16), not layer_at's float32.
  l.bias_bytes = checked_mul(checked_mul(u64(experts), u64(2 * l.intermediate_padded + l.hidden_padded), "mxfp4 bytes"),
                             2, "mxfp4 bytes");
  l.bias_float32 = false;
  // marlin_make_workspace_new(device, 4): torch.zeros(sms * 4, dtype=torch.int).
  l.workspace_bytes = checked_mul(u64(multiprocessors > 0 ? multiprocessors : 0), 4 * 4, "mxfp4 bytes");
  return l;
}

namespace {

// FusedMoE.forward's F.pad of the input to the layer's padded hidden size: [T, H_pad] bfloat16, a new tensor.
uint64_t padded_input_bytes(int64_t tokens, const Mxfp4ExpertsLayer& layer) {
  return checked_mul(checked_mul(u64(tokens), u64(layer.hidden_padded), "mxfp4 kernel"), 2, "mxfp4 kernel");
}

}  // namespace

VllmFusedMoeBytes vllm_mxfp4_marlin_kernel_bytes(int64_t tokens, int64_t top_k, int64_t experts,
                                                 const Mxfp4ExpertsLayer& layer, bool reduces, int multiprocessors,
                                                 bool modular) {
  VllmFusedMoeBytes b = vllm_marlin_moe_bytes(tokens, top_k, experts, layer.hidden_padded, layer.intermediate_padded,
                                              reduces, multiprocessors, DType::BFloat16, modular);
  b.padded_input_bytes = padded_input_bytes(tokens, layer);
  return b;
}

Mxfp4ExpertsLayer flashinfer_trtllm_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate,
                                                const std::string& model) {
  check_hidden(hidden, model);
  Mxfp4ExpertsLayer l = layer_at(experts, round_up(u64(hidden), 256), round_up(u64(intermediate), 256), false, false);
  l.constants_bytes = checked_mul(u64(experts), 3 * 4, "mxfp4 bytes");  // gemm1_alpha, _beta, _clamp_limit [E] float32
  return l;
}

Mxfp4ExpertsLayer vllm_mxfp4_flashinfer_layer(int64_t experts, int64_t hidden, int64_t intermediate,
                                              const std::string& model) {
  Mxfp4ExpertsLayer l = flashinfer_trtllm_mxfp4_layer(experts, hidden, intermediate, model);
  // One int64 index a row: w13's weight, scale and bias [2·I_pad, ...] and w2's [H_pad, ...].
  l.index_cache_bytes = checked_mul(u64(3 * 2 * l.intermediate_padded + 3 * l.hidden_padded), 8, "mxfp4 bytes");
  return l;
}

VllmFusedMoeBytes vllm_mxfp4_flashinfer_kernel_bytes(int64_t tokens, int64_t top_k, int64_t experts,
                                                     const Mxfp4ExpertsLayer& layer) {
  const uint64_t t = u64(tokens), k = u64(top_k), e = u64(experts);
  const uint64_t h = u64(layer.hidden_padded), i = u64(layer.intermediate_padded);
  const uint64_t slots = checked_mul(t, k, "mxfp4 kernel");
  // The launcher's fallback tile (mxfp4_experts.h): clamp(next power of two of ceil(T·k / E), 8, 64), halved, >= 8.
  uint64_t t0 = 8;
  while (t0 < 64 && t0 < (slots + e - 1) / e) t0 *= 2;
  const uint64_t tile = std::max<uint64_t>(8, t0 / 2);
  const uint64_t first = std::min(e, slots);
  const uint64_t ctas = first + (slots - first) / tile;  // C
  const uint64_t permuted = ctas * tile;                 // P
  VllmFusedMoeBytes b;
  b.chunk_tokens = tokens;
  b.block_size_m = static_cast<int64_t>(tile);
  b.padded_input_bytes = padded_input_bytes(tokens, layer);
  b.output_bytes = b.padded_input_bytes;                 // FlashInfer's output [T, H_pad] bfloat16
  b.topk_bytes = checked_mul(slots, 4 + 2, "mxfp4 kernel");  // topk_ids int32, expert_weights bfloat16
  // num_tokens_per_expert [E], total_num_padded_tokens [1], expanded_idx_to_permuted_idx [T·k],
  // permuted_idx_to_token_idx [P], expert_count_histogram [max(2E, 512)], cta_idx_xy_to_batch_idx and _mn_limit [C],
  // num_non_exiting_ctas [1]: int32.
  b.align_bytes = checked_mul(e + 1 + slots + permuted + std::max<uint64_t>(2 * e, 512) + 2 * ctas + 1, 4,
                              "mxfp4 kernel");
  // gemm1_output [M1, I_pad] and gemm2_output [M2, H_pad], bfloat16, M at least 128·1024·8 bits a row's worth.
  const auto rows = [&](uint64_t width) { return std::max(permuted, (uint64_t{65536} + width - 1) / width); };
  b.cache13_bytes = checked_mul(checked_mul(rows(i), i, "mxfp4 kernel"), 2, "mxfp4 kernel");
  b.cache2_bytes = checked_mul(checked_mul(rows(h), h, "mxfp4 kernel"), 2, "mxfp4 kernel");
  return b;
}

std::string sglang_mxfp4_backend(int capability, const std::string& model) {
  if (capability / 10 == 10) return "flashinfer_mxfp4";  // is_sm100_supported
  if (capability >= 90 && capability < 100) return "triton_kernel";
  throw InputError(fmt::format(
      "serve --engine sglang on {}: SGLang's MXFP4 experts on compute capability {}.{} run triton_kernels' layouts for "
      "that GPU (make_default_matmul_mxfp4_w_layout), which memplan does not read (it sizes 9.x's triton_kernel and "
      "10.x's flashinfer_mxfp4)",
      model, capability / 10, capability % 10));
}

Mxfp4ExpertsLayer sglang_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate, int capability,
                                     const std::string& model) {
  const std::string backend = sglang_mxfp4_backend(capability, model);
  check_hidden(hidden, model);
  if (backend == "triton_kernel")  // 9.x only (sglang_mxfp4_backend)
    return layer_at(experts, u64(hidden), round_up(u64(intermediate), kMxfp4Block), true, /*hopper=*/true);
  return flashinfer_trtllm_mxfp4_layer(experts, hidden, intermediate, model);
}

uint64_t vllm_mxfp4_kernel_bytes(int64_t tokens, int64_t hidden, int64_t top_k, int64_t intermediate_padded) {
  const uint64_t output = checked_mul(checked_mul(u64(tokens), u64(hidden), "mxfp4 kernel"), 2, "mxfp4 kernel");
  const uint64_t cache = checked_mul(checked_mul(checked_mul(u64(tokens), u64(top_k), "mxfp4 kernel"),
                                                 u64(intermediate_padded), "mxfp4 kernel"), 2, "mxfp4 kernel");
  return checked_add(output, cache, "mxfp4 kernel");
}

uint64_t mxfp4_checkpoint_layer_bytes(int64_t experts, int64_t hidden, int64_t intermediate) {
  Mxfp4ExpertsLayer l;
  add_matrix(l, experts, 2 * intermediate, hidden);  // gate_up_proj_blocks / _scales
  add_matrix(l, experts, hidden, intermediate);      // down_proj_blocks / _scales
  l.bias_bytes = checked_mul(checked_mul(u64(experts), u64(2 * intermediate + hidden), "mxfp4 bytes"), 2, "mxfp4 bytes");
  return l.total();
}

}  // namespace memplan
