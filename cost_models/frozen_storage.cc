#include "cost_models/frozen_storage.h"

#include <algorithm>

#include "cost_models/graph_facts.h"
#include "onnx_import/checked.h"

namespace memplan {

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// bitsandbytes (bitsandbytes/functional.py):
//  - quantize_4bit (NF4, blocksize = 64 by default, quant_storage uint8): the values packed two per byte,
//    (n + 1) // 2 bytes, and one float32 absmax per 64-value block. With compress_statistics (QLoRA's
//    double quantization, Dettmers et al. 2023, "QLoRA", section 3: 8-bit block constants in blocks of
//    256, 0.127 instead of 0.5 bits per parameter): offset = absmax.mean() (one float32), the absmax
//    quantized by quantize_blockwise(absmax, blocksize=256) to one byte per block plus one float32 absmax
//    per 256 blocks. The two 256- and 16-entry code books are shared by every weight and not counted.
//  - Int8Params / int8_vectorwise_quant (LLM.int8, Dettmers et al. 2022): one byte per value and one
//    float32 scale (SCB) per row.
constexpr uint64_t kNf4BlockSize = 64;
constexpr uint64_t kNf4DoubleQuantBlockSize = 256;
constexpr uint64_t kFloat32Bytes = 4;

bool is_linear_weight(const Graph& g, const FusedOp& op, int32_t t) {
  if (op.kind == OpKind::Linear) return op.weight == t;
  if (op.kind != OpKind::Node || (op.op != "MatMul" && op.op != "Gemm")) return false;
  const Node& n = g.nodes[op.nodes.back()];
  return n.inputs.size() > 1 && n.inputs[1] == t;
}

}  // namespace

uint64_t frozen_storage_bytes(FrozenStorage s, bool double_quant, uint64_t n, uint64_t rows) {
  switch (s) {
    case FrozenStorage::Fp16:
    case FrozenStorage::Bf16: return checked_mul(n, 2, "frozen weight bytes");
    case FrozenStorage::Int8: return checked_add(n, checked_mul(rows, kFloat32Bytes, "int8 scales"), "int8 weight bytes");
    case FrozenStorage::Nf4: {
      const uint64_t blocks = ceil_div(n, kNf4BlockSize);
      const uint64_t packed = n / 2 + n % 2;
      const uint64_t scales = double_quant
                                  ? checked_add(blocks, kFloat32Bytes * (ceil_div(blocks, kNf4DoubleQuantBlockSize) + 1),
                                                "nf4 scales")
                                  : checked_mul(blocks, kFloat32Bytes, "nf4 scales");
      return checked_add(packed, scales, "nf4 weight bytes");
    }
    case FrozenStorage::Same: break;
  }
  return 0;
}

uint64_t int8_matmul_forward_bytes(uint64_t rows, uint64_t in, uint64_t out, DType a) {
  const uint64_t values = checked_mul(rows, in, "int8 input elements");
  const uint64_t half_copy = a == DType::Float16 ? 0 : checked_mul(values, 2, "int8 input copy");
  const uint64_t row_stats = checked_mul(rows, kFloat32Bytes, "int8 row scales");
  const uint64_t outlier_scan = kInt8OutlierThreshold > 0 ? checked_mul(values, 2 + 1, "int8 outlier scan") : 0;
  const uint64_t quantize = checked_add(checked_add(half_copy, row_stats, "int8 quantize"),
                                        checked_add(values, outlier_scan, "int8 quantize"), "int8 quantize");
  const uint64_t products = checked_mul(rows, out, "int8 output elements");
  const uint64_t dequant = checked_add(checked_mul(products, 4, "int8 int32 product"),
                                       a == DType::Float16 ? 0 : checked_mul(products, 2, "int8 float16 result"),
                                       "int8 matmul");
  const uint64_t matmul = checked_add(checked_add(values, row_stats, "int8 matmul"), dequant, "int8 matmul");
  return std::max(quantize, matmul);
}

std::vector<uint64_t> frozen_stored_bytes(const Graph& g, const std::vector<FusedOp>& ops, const TrainingOptions& o,
                                          const std::vector<bool>& frozen, const std::vector<DType>& compute) {
  std::vector<uint64_t> bytes(g.tensors.size(), 0);
  if (o.frozen_storage == FrozenStorage::Same) return bytes;
  const bool quantized = o.frozen_storage == FrozenStorage::Int8 || o.frozen_storage == FrozenStorage::Nf4;
  std::vector<bool> candidate(g.tensors.size(), !quantized);
  if (quantized) {
    std::vector<bool> head(g.tensors.size(), false);
    for (const FusedOp& op : ops)
      for (int32_t t : op.inputs)
        if (is_linear_weight(g, op, t)) {
          candidate[t] = true;
          for (int32_t y : op.outputs) head[t] = head[t] || is_graph_output(g, y);
        }
    for (size_t t = 0; t < g.tensors.size(); ++t) candidate[t] = candidate[t] && !head[t];
  }
  const DType half = o.frozen_storage == FrozenStorage::Fp16 ? DType::Float16 : DType::BFloat16;
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const Tensor& x = g.tensors[t];
    if (!frozen[t] || !candidate[t] || (quantized && x.shape.size() != 2)) continue;
    if (!quantized && compute[t] == half) continue;  // already stored so
    const uint64_t rows = x.shape.empty() ? 1 : static_cast<uint64_t>(x.shape[0]);
    bytes[t] = frozen_storage_bytes(o.frozen_storage, o.double_quant, x.elements(), rows);
  }
  return bytes;
}

}  // namespace memplan
