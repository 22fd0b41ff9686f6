// --frozen-dtype (QLoRA and its relatives): frozen weights stored in another type than the compute type,
// and dequantized into the compute type for each op that reads them, as a transient.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_models/cost_model.h"
#include "cost_models/op_fusion.h"
#include "onnx_import/graph.h"

namespace memplan {

// The bytes a frozen weight of `elements` values (`rows` = its first dimension, nn.Linear's out_features)
// takes stored as `s` (FrozenStorage::Same: not called).
uint64_t frozen_storage_bytes(FrozenStorage s, bool double_quant, uint64_t elements, uint64_t rows);

// Per tensor: the bytes the frozen parameter is stored in (0: its compute type, unchanged). `frozen`
// marks the frozen module parameters; `compute` is each tensor's compute (storage) type under the
// precision. fp16/bf16 apply to every frozen float parameter whose compute type differs; int8/nf4 to
// the frozen weights of Linear/MatMul/Gemm layers only, except the layer that writes a graph output (the
// head), as transformers' bitsandbytes integration replaces nn.Linear modules only and keeps the output
// head in the original precision (integrations/bitsandbytes.py, get_keys_to_not_convert).
std::vector<uint64_t> frozen_stored_bytes(const Graph& g, const std::vector<FusedOp>& ops, const TrainingOptions& o,
                                          const std::vector<bool>& frozen, const std::vector<DType>& compute);

}  // namespace memplan
