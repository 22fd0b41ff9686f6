#include "cost_models/mxfp4_experts.h"

#include <fmt/format.h>

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

// create_weights' six parameters at I_pad and H_pad (mxfp4.py, vLLM's and SGLang's alike), the biases float32 as
// process_weights_after_loading leaves them; `retained_scales`: the Triton backends' loaded scales kept beside the
// swizzled copies (mxfp4_experts.h).
Mxfp4ExpertsLayer layer_at(int64_t experts, uint64_t hidden_padded, uint64_t intermediate_padded, bool retained_scales) {
  Mxfp4ExpertsLayer l;
  l.intermediate_padded = static_cast<int64_t>(intermediate_padded);
  l.hidden_padded = static_cast<int64_t>(hidden_padded);
  add_matrix(l, experts, 2 * l.intermediate_padded, l.hidden_padded);  // w13
  add_matrix(l, experts, l.hidden_padded, l.intermediate_padded);      // w2
  if (retained_scales) l.retained_scales_bytes = l.scales_bytes;
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
  return checked_add(t, constants_bytes, "mxfp4 bytes");
}

Mxfp4ExpertsLayer vllm_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate, int capability,
                                   const std::string& model) {
  if (capability < 90 || capability >= 110)
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts on compute capability {}.{}: vLLM runs them with its Marlin (before "
        "9.0) or FlashInfer (SM100) MXFP4 backend, whose padded, repacked weights and buffers memplan does not size "
        "(it sizes the Triton backend of 9.0 to 10.x: quantization/mxfp4.py get_mxfp4_backend)",
        model, capability / 10, capability % 10));
  check_hidden(hidden, model);
  return layer_at(experts, u64(hidden), round_up(u64(intermediate), 64), /*retained_scales=*/true);
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
  if (backend == "triton_kernel") return layer_at(experts, u64(hidden), round_up(u64(intermediate), kMxfp4Block), true);
  Mxfp4ExpertsLayer l = layer_at(experts, round_up(u64(hidden), 256), round_up(u64(intermediate), 256), false);
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
