#include "cost_models/vllm_nvfp4.h"

#include <algorithm>
#include <string>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
uint64_t vllm_nvfp4_linear_bytes(int64_t n, int64_t k, bool marlin, int multiprocessors) {
  constexpr uint64_t kScalars = 4 * sizeof(float);  // alpha, input_global_scale(_inv), weight_global_scale
  if (marlin) {
    const uint64_t nm = round_up(u64(n), 64);
    const uint64_t weight = checked_mul(u64(k), nm, "nvfp4 bytes") / 2;  // int32 [K/16, 2 N_m]
    const uint64_t scales = checked_mul(u64(k) / 16, nm, "nvfp4 bytes");  // fp8 [K/16, N_m]
    const uint64_t workspace = checked_mul(u64(std::max(multiprocessors, 0)), sizeof(int32_t), "nvfp4 bytes");
    return checked_add(checked_add(weight, scales, "nvfp4 bytes"), workspace + kScalars, "nvfp4 bytes");
  }
  const uint64_t weight = checked_mul(round_up(u64(n), 32), round_up(u64(k), 32) / 2, "nvfp4 bytes");
  const uint64_t scales = checked_mul(round_up(u64(n), 128), round_up(u64(k) / 16, 4), "nvfp4 bytes");
  return checked_add(checked_add(weight, scales, "nvfp4 bytes"), kScalars, "nvfp4 bytes");
}

uint64_t vllm_nvfp4_call_bytes(int64_t tokens, int64_t n, int64_t k, bool marlin, int multiprocessors, DType d) {
  const uint64_t m = u64(tokens), e = u64(dtype_bits(d) / 8);
  if (marlin) {
    const uint64_t rows = std::min<uint64_t>(round_up(m, 16), 64);
    const uint64_t c_tmp = checked_mul(checked_mul(u64(std::max(multiprocessors, 0)), rows, "nvfp4 bytes"), 256 * 4,
                                       "nvfp4 bytes");
    const uint64_t nm = round_up(u64(n), 64);
    return checked_add(c_tmp, nm == u64(n) ? 0 : checked_mul(checked_mul(m, nm, "nvfp4 bytes"), e, "nvfp4 bytes"),
                       "nvfp4 bytes");
  }
  const uint64_t kp = round_up(u64(k), 32);
  const uint64_t input = checked_mul(m, kp / 2, "nvfp4 bytes");
  const uint64_t scales = checked_mul(round_up(m, 128), round_up(kp / 16, 4), "nvfp4 bytes");
  const uint64_t np = round_up(u64(n), 32);
  const uint64_t padded = np == u64(n) ? 0 : checked_mul(checked_mul(m, np, "nvfp4 bytes"), e, "nvfp4 bytes");
  return checked_add(checked_add(input, scales, "nvfp4 bytes"), padded, "nvfp4 bytes");
}

uint64_t VllmNvfp4Experts::total() const {
  return checked_add(checked_add(checked_add(weight_bytes, scale_bytes, "nvfp4 experts"),
                                 checked_add(global_scale_bytes, input_scale_bytes, "nvfp4 experts"), "nvfp4 experts"),
                     workspace_bytes, "nvfp4 experts");
}

int64_t vllm_nvfp4_marlin_moe_width(int64_t hidden, int64_t intermediate_per_rank, bool pads_width,
                                    const std::string& model) {
  const int64_t ip = intermediate_per_rank;
  if (pads_width) {
    if (hidden % 64 != 0 || ip % 16 != 0)
      throw InputError("serve --engine vllm: " + model + "'s NVFP4 experts (hidden size " + std::to_string(hidden) +
                       ", " + std::to_string(ip) + " wide a rank): vLLM's Marlin pads the width to its thread tiles "
                       "but asserts a hidden size that is a multiple of 64 (prepare_nvfp4_moe_layer_for_marlin), and "
                       "the checkpoint's scales take the width in groups of 16");
    return static_cast<int64_t>(round_up(u64(ip), hidden % 128 == 0 ? 64 : 128));
  }
  if (hidden % 64 != 0 || (2 * ip) % 64 != 0 || ip % 16 != 0)
    throw InputError("serve --engine vllm: " + model + "'s NVFP4 experts (hidden size " + std::to_string(hidden) +
                     ", " + std::to_string(ip) + " wide a rank): vLLM's Marlin repacks each expert unpadded up to "
                     "0.23 (prepare_moe_fp4_layer_for_marlin, prepare_nvfp4_moe_layer_for_marlin), and "
                     "gptq_marlin_repack needs size_n a multiple of 64 and size_k of 16 (the hidden size and twice "
                     "the width by 64, the width by 16)");
  return ip;
}

VllmNvfp4Experts vllm_nvfp4_marlin_experts(int64_t experts, int64_t hidden, int64_t intermediate_per_rank,
                                           int multiprocessors, DType d, VllmNvfp4MarlinLayout layout,
                                           const std::string& model) {
  VllmNvfp4Experts l;
  l.width = vllm_nvfp4_marlin_moe_width(hidden, intermediate_per_rank, layout.pads_width, model);
  const uint64_t e = u64(experts);
  const uint64_t values = checked_mul(checked_mul(e, u64(hidden), "nvfp4 experts"), 3 * u64(l.width),
                                      "nvfp4 experts");  // E (2 N H + H N), N the width held
  l.weight_bytes = values / 2;  // two FP4 values a byte
  l.scale_bytes = values / 16;  // an fp8 scale a group of 16
  l.global_scale_bytes =
      checked_mul(2 * e, layout.global_scales_float32 ? sizeof(float) : u64(dtype_bits(d) / 8), "nvfp4 experts");
  l.input_scale_bytes = layout.input_scales_dropped ? 0 : checked_mul(3 * e, sizeof(float), "nvfp4 experts");
  l.workspace_bytes = checked_mul(u64(std::max(multiprocessors, 0)), 4 * sizeof(int32_t), "nvfp4 experts");
  return l;
}

}  // namespace memplan
