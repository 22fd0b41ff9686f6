#include "cost_models/packed_int_weights.h"

#include "onnx_import/checked.h"

namespace memplan {

constexpr uint64_t kInt32Bytes = 4;

uint64_t PackedIntWeight::total() const {
  return checked_add(checked_add(qweight, qzeros, "packed weight bytes"), checked_add(scales, g_idx, "packed weight bytes"),
                     "packed weight bytes");
}

PackedIntWeight gptq_packed(uint64_t in, uint64_t out, uint64_t bits, uint64_t groups, uint64_t scale_bytes, bool g_idx) {
  PackedIntWeight w;
  w.qweight = checked_mul(checked_mul(in, bits, "gptq qweight") / 32, checked_mul(out, kInt32Bytes, "gptq qweight"),
                          "gptq qweight bytes");
  w.qzeros = checked_mul(groups, checked_mul(out, bits, "gptq qzeros") / 32 * kInt32Bytes, "gptq qzeros bytes");
  w.scales = checked_mul(checked_mul(groups, out, "gptq scales"), scale_bytes, "gptq scales bytes");
  w.g_idx = g_idx ? checked_mul(in, kInt32Bytes, "gptq g_idx bytes") : 0;
  return w;
}

PackedIntWeight awq_packed(uint64_t in, uint64_t out, uint64_t groups, uint64_t scale_bytes) {
  PackedIntWeight w;
  w.qweight = checked_mul(in, out / 8 * kInt32Bytes, "awq qweight bytes");
  w.qzeros = checked_mul(groups, out / 8 * kInt32Bytes, "awq qzeros bytes");
  w.scales = checked_mul(checked_mul(groups, out, "awq scales"), scale_bytes, "awq scales bytes");
  return w;
}

}  // namespace memplan
