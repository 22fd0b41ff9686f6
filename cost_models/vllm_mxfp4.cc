#include "cost_models/vllm_mxfp4.h"

#include <fmt/format.h>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

constexpr int64_t kMxfp4Block = 32;  // mxfp4.py create_weights: mxfp4_block


// E·rows·cols / 2 bytes of E2M1 pairs plus E·rows·cols / 32 E8M0 scales.
void add_matrix(VllmMxfp4Layer& l, int64_t experts, int64_t rows, int64_t cols) {
  const uint64_t elements = checked_mul(checked_mul(u64(experts), u64(rows), "mxfp4 bytes"), u64(cols), "mxfp4 bytes");
  l.blocks_bytes = checked_add(l.blocks_bytes, elements / 2, "mxfp4 bytes");
  l.scales_bytes = checked_add(l.scales_bytes, elements / u64(kMxfp4Block), "mxfp4 bytes");
}

}  // namespace

uint64_t VllmMxfp4Layer::total() const {
  return checked_add(checked_add(blocks_bytes, scales_bytes, "mxfp4 bytes"), bias_bytes, "mxfp4 bytes");
}

VllmMxfp4Layer vllm_mxfp4_layer(int64_t experts, int64_t hidden, int64_t intermediate, int capability,
                                const std::string& model) {
  if (capability < 90 || capability >= 110)
    throw InputError(fmt::format(
        "serve --engine vllm: {}'s MXFP4 experts on compute capability {}.{}: vLLM runs them with its Marlin (before "
        "9.0) or FlashInfer (SM100) MXFP4 backend, whose padded, repacked weights and buffers memplan does not size "
        "(it sizes the Triton backend of 9.0 to 10.x: quantization/mxfp4.py get_mxfp4_backend)",
        model, capability / 10, capability % 10));
  if (hidden % kMxfp4Block != 0)
    throw InputError(fmt::format("serve --engine vllm: {}'s hidden size {} is not a multiple of MXFP4's blocks of 32",
                                 model, hidden));
  VllmMxfp4Layer l;
  l.intermediate_padded = (intermediate + 63) / 64 * 64;  // round_up(intermediate_size_per_partition, 64)
  add_matrix(l, experts, 2 * l.intermediate_padded, hidden);  // w13
  add_matrix(l, experts, hidden, l.intermediate_padded);      // w2
  // w13_bias [E, 2·I_pad] and w2_bias [E, H], float32 after process_weights_after_loading (Triton).
  l.bias_bytes = checked_mul(checked_mul(u64(experts), u64(2 * l.intermediate_padded + hidden), "mxfp4 bytes"), 4,
                             "mxfp4 bytes");
  return l;
}

uint64_t vllm_mxfp4_kernel_bytes(int64_t tokens, int64_t hidden, int64_t top_k, int64_t intermediate_padded) {
  const uint64_t output = checked_mul(checked_mul(u64(tokens), u64(hidden), "mxfp4 kernel"), 2, "mxfp4 kernel");
  const uint64_t cache = checked_mul(checked_mul(checked_mul(u64(tokens), u64(top_k), "mxfp4 kernel"),
                                                 u64(intermediate_padded), "mxfp4 kernel"), 2, "mxfp4 kernel");
  return checked_add(output, cache, "mxfp4 kernel");
}

uint64_t mxfp4_checkpoint_layer_bytes(int64_t experts, int64_t hidden, int64_t intermediate) {
  VllmMxfp4Layer l;
  add_matrix(l, experts, 2 * intermediate, hidden);  // gate_up_proj_blocks / _scales
  add_matrix(l, experts, hidden, intermediate);      // down_proj_blocks / _scales
  l.bias_bytes = checked_mul(checked_mul(u64(experts), u64(2 * intermediate + hidden), "mxfp4 bytes"), 2, "mxfp4 bytes");
  return l.total();
}

}  // namespace memplan
