#include "cost_models/vllm_fp8_block.h"

#include <fmt/format.h>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

constexpr const char* kWhat = "fp8 block bytes";

}  // namespace

uint64_t vllm_fp8_block_linear_bytes(int64_t out_p, int64_t in_p, const VllmFp8Block& b) {
  const uint64_t weight = checked_mul(u64(out_p), u64(in_p), kWhat);
  const uint64_t blocks = checked_mul(ceil_div(u64(out_p), u64(b.n)), ceil_div(u64(in_p), u64(b.k)), kWhat);
  const uint64_t scales = checked_mul(blocks, 4, kWhat);
  return checked_add(weight, scales, kWhat);
}

uint64_t vllm_fp8_block_input_quant_bytes(int64_t tokens, int64_t features, const VllmFp8Block& b, int capability) {
  // x_q: one byte an element; x_s: one float32 a group of block_n (the features are a multiple of it).
  auto quant = [&](int64_t rows) {
    return checked_add(checked_mul(u64(rows), u64(features), kWhat),
                       checked_mul(checked_mul(u64(rows), u64(features / b.n), kWhat), 4, kWhat), kWhat);
  };
  uint64_t bytes = quant(tokens);
  // _padded_cutlass (is_hopper): padded_qx and padded_x_scale of round_up(M, 4) rows beside the originals.
  if (capability == 90 && tokens % 4 != 0) bytes = checked_add(bytes, quant((tokens + 3) / 4 * 4), kWhat);
  return bytes;
}

VllmFp8BlockExperts vllm_fp8_block_experts(int64_t experts, int64_t hidden, int64_t intermediate_per_rank, int tp,
                                           const VllmFp8Block& b, const std::string& model) {
  const int64_t i = intermediate_per_rank;
  auto refuse = [&](const std::string& what) {
    throw InputError(fmt::format("serve --engine vllm: {}'s block-wise fp8 experts at --tp {}: {} (vLLM's "
                                 "Fp8MoEMethod refuses it)", model, tp, what));
  };
  if (i % b.n != 0)
    refuse(fmt::format("gate's and up's output of {} a rank is not a multiple of block_n {}", i, b.n));
  if (tp > 1 && i % b.k != 0)
    refuse(fmt::format("down's input of {} a rank is not a multiple of block_k {}", i, b.k));
  // moe_kernel_quantize_input's per_token_group_quant_fp8 asserts the hidden size and I_p multiples of block_k.
  if (hidden % b.k != 0 || i % b.k != 0)
    refuse(fmt::format("the kernel's per-token-group quantization of {} and {} features needs multiples of "
                       "block_k {} (per_token_group_quant_fp8 asserts it)", hidden, i, b.k));
  VllmFp8BlockExperts e;
  const uint64_t ex = u64(experts);
  e.weight_bytes = checked_mul(ex, checked_mul(3, checked_mul(u64(i), u64(hidden), kWhat), kWhat), kWhat);
  const uint64_t w13 = checked_mul(2 * ceil_div(u64(i), u64(b.n)), ceil_div(u64(hidden), u64(b.k)), kWhat);
  const uint64_t w2 = checked_mul(ceil_div(u64(hidden), u64(b.n)), ceil_div(u64(i), u64(b.k)), kWhat);
  e.scale_bytes = checked_mul(checked_mul(ex, w13 + w2, kWhat), 4, kWhat);
  return e;
}

uint64_t vllm_fp8_block_moe_quant_bytes(int64_t chunk_tokens, int64_t hidden, int64_t top_k,
                                        int64_t intermediate_per_rank, const VllmFp8Block& b) {
  const uint64_t m = u64(chunk_tokens), pairs = checked_mul(m, u64(top_k), kWhat);
  const uint64_t a1 = checked_add(checked_mul(m, u64(hidden), kWhat),
                                  checked_mul(checked_mul(m, u64(hidden / b.k), kWhat), 4, kWhat), kWhat);
  const uint64_t a2 = checked_add(checked_mul(pairs, u64(intermediate_per_rank), kWhat),
                                  checked_mul(checked_mul(pairs, u64(intermediate_per_rank / b.k), kWhat), 4, kWhat),
                                  kWhat);
  return checked_add(a1, a2, kWhat);
}

VllmFp8BlockExperts vllm_fp8_tensor_experts(int64_t experts, int64_t hidden, int64_t intermediate_per_rank,
                                            bool static_activations) {
  VllmFp8BlockExperts e;
  const uint64_t ex = u64(experts);
  const uint64_t expert = checked_mul(3, checked_mul(u64(intermediate_per_rank), u64(hidden), kWhat), kWhat);
  e.weight_bytes = checked_mul(ex, expert, kWhat);  // w13 2 I_p H + w2 H I_p, one byte each
  // max_w13_scales [E] and w2_weight_scale [E], float32; static: w13_input_scale and w2_input_scale, one float each.
  e.scale_bytes = checked_add(checked_mul(ex, 2 * 4, kWhat), static_activations ? 2 * 4 : 0, kWhat);
  return e;
}

uint64_t vllm_fp8_tensor_moe_quant_bytes(int64_t chunk_tokens, int64_t hidden, int64_t top_k,
                                         int64_t intermediate_per_rank, bool static_activations) {
  const uint64_t m = u64(chunk_tokens), pairs = checked_mul(m, u64(top_k), kWhat);
  const uint64_t quantized = checked_add(checked_mul(m, u64(hidden), kWhat),
                                         checked_mul(pairs, u64(intermediate_per_rank), kWhat), kWhat);
  return checked_add(quantized, static_activations ? 0 : 2 * 4, kWhat);  // dynamic: a1q_scale, a2q_scale [1]
}

uint64_t vllm_fp8_block_mla_absorbed_bytes(int64_t layers, int64_t kv_lora_rank, int64_t heads_per_rank,
                                           int64_t qk_nope_head_dim, int64_t v_head_dim, uint64_t element_bytes) {
  const uint64_t per_layer = checked_mul(checked_mul(u64(kv_lora_rank), u64(heads_per_rank), kWhat),
                                         u64(qk_nope_head_dim + v_head_dim), kWhat);
  return checked_mul(checked_mul(per_layer, u64(layers), kWhat), element_bytes, kWhat);
}

}  // namespace memplan
