#include "cost_models/mxfp4_experts.h"

#include <fmt/format.h>

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
  // get_mxfp4_backend asks whether FlashInfer is usable on SM100 first (v0.11.0 to v0.13.0 tags).
  if (vllm_sm100(capability, rule) && flashinfer == true)
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts on compute capability {}.{} with --flashinfer yes: vLLM takes "
        "FlashInfer's SM100_FI_MXFP4_BF16 layout there before any other backend (get_mxfp4_backend), which memplan "
        "does not size", model, capability / 10, capability % 10));
  if (requested == VllmMxfp4Backend::Marlin) return VllmMxfp4Backend::Marlin;
  if (!requested && capability < 90) return VllmMxfp4Backend::Marlin;
  if (!requested && !rule.bundles_triton_kernels) {
    // get_mxfp4_backend before 0.12: `cap[0] < 9 or not has_triton_kernels() or torch < 2.8.0` -> Marlin; only
    // 10.0 asks first whether FlashInfer is usable (SM100_FI_MXFP4_BF16, a layout not sized here).
    if (capability != 100 || flashinfer == false) return VllmMxfp4Backend::Marlin;
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts on compute capability 10.0 before vLLM 0.12: vLLM takes FlashInfer's "
        "MXFP4 layout there when FlashInfer is usable (the Docker image; pip's flashinfer-python from 0.11.1 with its "
        "cubins or nvcc), which memplan does not size, and Marlin otherwise (no triton_kernels before 0.12); give "
        "--flashinfer no (or --mxfp4-backend marlin) if vLLM's log says \"Using Marlin backend\"", model));
  }
  // From 0.12 get_mxfp4_backend still asks first whether FlashInfer is usable on SM100 (v0.12.0's
  // is_device_capability(100), 10.x from 0.13): under --flashinfer auto, where vLLM's Docker image (which has it) and
  // a pip install (flashinfer-python a dependency from 0.11.1; usable with its cubins or nvcc) differ, the layout
  // memplan does not size may be the one that runs (its experts padded to 256, larger than Triton's): refused rather
  // than answered low.
  if (!requested && vllm_sm100(capability, rule) && !flashinfer.has_value())
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts on compute capability {}.{}: vLLM takes FlashInfer's "
        "SM100_FI_MXFP4_BF16 layout there when FlashInfer is usable (the Docker image; pip's flashinfer-python with "
        "its cubins or nvcc), which memplan does not size, and Triton's otherwise; give --flashinfer no (or "
        "--mxfp4-backend triton) if vLLM's log says \"Using Triton backend\"", model, capability / 10, capability % 10));
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

VllmFusedMoeBytes vllm_mxfp4_marlin_kernel_bytes(int64_t tokens, int64_t top_k, int64_t experts,
                                                 const Mxfp4ExpertsLayer& layer, bool reduces, int multiprocessors) {
  VllmFusedMoeBytes b = vllm_marlin_moe_bytes(tokens, top_k, experts, layer.hidden_padded, layer.intermediate_padded,
                                              reduces, multiprocessors, DType::BFloat16);
  b.padded_input_bytes = checked_mul(checked_mul(u64(tokens), u64(layer.hidden_padded), "mxfp4 kernel"), 2,
                                     "mxfp4 kernel");
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
  Mxfp4ExpertsLayer l = layer_at(experts, round_up(u64(hidden), 256), round_up(u64(intermediate), 256), false, false);
  l.constants_bytes = checked_mul(u64(experts), 3 * 4, "mxfp4 bytes");  // gemm1_alpha, _beta, _clamp_limit [E] float32
  return l;
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
