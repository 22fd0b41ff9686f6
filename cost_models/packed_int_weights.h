// GPTQ's and AWQ's packed integer weights: the bytes a linear layer of `in` inputs and `out` outputs is stored in.
// The one rule for both users: vLLM serving them (cost_models/vllm_weights.cc) and a LoRA step over a GPTQ or AWQ
// base (--frozen-dtype gptq-int4 / awq-int4, cost_models/frozen_storage.cc).
#pragma once

#include <cstdint>

namespace memplan {

struct PackedIntWeight {
  uint64_t qweight = 0, qzeros = 0, scales = 0, g_idx = 0;
  uint64_t total() const;
};

// GPTQ (the layout every GPTQ loader registers: auto_gptq nn_modules/qlinear/qlinear_cuda_old.py QuantLinear.__init__,
// gptqmodel nn_modules/qlinear/__init__.py BaseQuantLinear.__init__ at v4.2.5, vLLM gptq.py GPTQLinearMethod.
// create_weights): qweight int32 [in x bits / 32, out] (32 / bits values to an int32 down the input axis), qzeros
// int32 [groups, out x bits / 32], scales [groups, out] of `scale_bytes` each, and with `g_idx` one int32 per input.
// `groups`: the scale rows, which the caller works out (its group size and how it splits the input).
PackedIntWeight gptq_packed(uint64_t in, uint64_t out, uint64_t bits, uint64_t groups, uint64_t scale_bytes, bool g_idx);

// AWQ (AutoAWQ awq/modules/linear/gemm.py WQLinear_GEMM.__init__ at v0.2.9, vLLM awq.py AWQLinearMethod.
// create_weights; 4 bits only): qweight int32 [in, out / 8] (8 values to an int32 across the output axis), qzeros
// int32 [groups, out / 8], scales [groups, out] of `scale_bytes` each (float16 in AutoAWQ).
PackedIntWeight awq_packed(uint64_t in, uint64_t out, uint64_t groups, uint64_t scale_bytes);

}  // namespace memplan
