// Quantized weights: which initializers store one (the packed values, their scales and zero points), what
// they weigh, and the dequantized copies a runtime makes of them while it runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// One quantized weight as the file stores it: read by `node` (a DequantizeLinear of a constant, or the
// weight operand of QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger, com.microsoft MatMulNBits,
// QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat).
struct QuantizedWeight {
  int32_t node = -1;
  std::string format;            // "MatMulNBits 4-bit block 32", "DequantizeLinear int4 blocked", ...
  std::vector<int32_t> tensors;  // the constants it is stored in: values, then scales, zero points, g_idx
  uint64_t values = 0;           // weight values (K × N for MatMulNBits, the data tensor's elements otherwise)
  uint64_t bytes = 0;            // the stored bytes of `tensors`, as the file holds them (int4 two per byte)
};

// Every quantized weight of the graph, in node order. A tensor that two ops read (a scale shared by a
// QuantizeLinear/DequantizeLinear pair) is counted with the first.
std::vector<QuantizedWeight> quantized_weights(const Graph& g);

// ONNX Runtime's CUDA MatMulNBits (onnxruntime/contrib_ops/cuda/quantization/matmul_nbits.cc, ComputeInternal):
// the bytes of the buffer it dequantizes B into before a cuBLAS GEMM, taken from the arena for the call
// (GetScratchBuffer) and returned after it; 0 when the fused GEMV kernel runs instead, which reads the
// packed weight directly. `a_bytes_per_value` is A's element size (the scratch is in A's type).
uint64_t ort_matmul_nbits_scratch_bytes(const Graph& g, const Node& n, uint64_t a_bytes_per_value);

}  // namespace memplan
