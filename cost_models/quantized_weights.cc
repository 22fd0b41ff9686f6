#include "cost_models/quantized_weights.h"

#include <set>

#include "cost_models/graph_facts.h"
#include "onnx_import/checked.h"

namespace memplan {
namespace {

int32_t input(const Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : -1; }

// The weight operand of each quantized op, then its scale, zero point (and g_idx) operands.
struct Slots {
  size_t data;
  std::vector<size_t> params;
};
bool weight_slots(const Node& n, Slots& s) {
  const std::string& op = n.op_type;
  if (n.domain.empty()) {
    if (op == "DequantizeLinear") s = {0, {1, 2}};
    else if (op == "QLinearMatMul" || op == "QLinearConv") s = {3, {4, 5}};
    else if (op == "MatMulInteger" || op == "ConvInteger") s = {1, {3}};
    else return false;
    return true;
  }
  if (n.domain != "com.microsoft") return false;
  if (op == "MatMulNBits") s = {1, {2, 3, 4}};
  else if (op == "QGemm") s = {3, {4, 5}};
  else if (op == "DynamicQuantizeMatMul") s = {1, {2, 3}};
  else if (op == "MatMulIntegerToFloat") s = {1, {3, 5}};
  else return false;
  return true;
}

std::string format_of(const Graph& g, const Node& n, int32_t data) {
  const Tensor& w = g.tensors[data];
  const std::string type(dtype_name(w.dtype));
  if (n.op_type == "MatMulNBits")
    return "MatMulNBits " + std::to_string(n.int_attribute("bits", 4)) + "-bit block " +
           std::to_string(n.int_attribute("block_size", 0)) + (input(n, 3) >= 0 ? "" : " symmetric");
  if (n.op_type != "DequantizeLinear") return n.op_type + " " + type;
  const int32_t scale = input(n, 1);
  const bool per_tensor = scale < 0 || g.tensors[scale].elements() <= 1;
  const int64_t block = n.int_attribute("block_size", 0);
  if (block > 0 && n.opset >= 21) return "DequantizeLinear " + type + " blocked " + std::to_string(block);
  return "DequantizeLinear " + type + (per_tensor ? " per-tensor" : " per-axis");
}

}  // namespace

std::vector<QuantizedWeight> quantized_weights(const Graph& g) {
  std::vector<QuantizedWeight> out;
  std::set<int32_t> claimed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    Slots s;
    if (!weight_slots(n, s)) continue;
    const int32_t data = input(n, s.data);
    if (data < 0 || !is_constant(g, data)) continue;
    QuantizedWeight q;
    q.node = static_cast<int32_t>(i);
    q.format = format_of(g, n, data);
    q.values = g.tensors[data].elements();
    if (n.op_type == "MatMulNBits")
      q.values = checked_mul(static_cast<uint64_t>(n.int_attribute("K", 0)), static_cast<uint64_t>(n.int_attribute("N", 0)),
                             "MatMulNBits values");
    std::vector<int32_t> tensors{data};
    for (size_t p : s.params)
      if (const int32_t t = input(n, p); t >= 0 && is_constant(g, t)) tensors.push_back(t);
    for (int32_t t : tensors) {
      if (!claimed.insert(t).second) continue;
      q.tensors.push_back(t);
      q.bytes = checked_add(q.bytes, g.tensors[t].bytes(), "quantized weight bytes");
    }
    out.push_back(std::move(q));
  }
  return out;
}

// The released CUDA kernels (matmul_nbits.cc, ComputeInternal, without the optional TensorRT-LLM fpA_intB
// path, which needs ORT_FPA_INTB_GEMM or prepacked weights): the fused GEMV (TryMatMulNBits:
// matmul_4bits.cu TryMatMul4Bits, matmul_8bits.cu TryMatMul8Bits) runs when there is no g_idx, the zero
// points are absent or packed uint8, M (the product of A's dims but the last) is 1, N and K are multiples of 8
// (kColsPerThreadBlock and the 8 values a thread reads), and the per-block scales (and zero points) of 8
// columns fit the shared memory of a thread block. Otherwise B is dequantized into a scratch buffer of
// N × K_padded values of A's type (K_padded = ceil(K / block_size) × block_size) and multiplied by cuBLAS.
// sharedMemPerBlock is 48 KiB on every CUDA GPU (CUDA C++ Programming Guide, "Technical Specifications per
// Compute Capability": 48 KB per thread block without the dynamic opt-in, which this kernel does not use).
// Newer builds also have a 2-bit GEMV (matmul_2bits.cu); here 2-bit weights take the dequantize path.
// Newer builds dequantize in chunks of 32,768 rows when the full buffer passes 256 MiB and N > 65,536;
// not modelled (the released kernels allocate the full buffer).
uint64_t ort_matmul_nbits_scratch_bytes(const Graph& g, const Node& n, uint64_t a_bytes_per_value) {
  constexpr uint64_t kColsPerThreadBlock = 8;
  constexpr uint64_t kSharedMemPerBlock = 48 * 1024;
  const int32_t a = input(n, 0), zp = input(n, 3), g_idx = input(n, 4);
  const int64_t k = n.int_attribute("K", 0), cols = n.int_attribute("N", 0), bits = n.int_attribute("bits", 4);
  const int64_t block = n.int_attribute("block_size", 0);
  if (a < 0 || k <= 0 || cols <= 0 || block <= 0) return 0;
  const Tensor& at = g.tensors[a];
  uint64_t m = 1;
  for (size_t i = 0; i + 1 < at.shape.size(); ++i) m = checked_mul(m, static_cast<uint64_t>(at.shape[i]), "MatMulNBits M");
  const uint64_t K = static_cast<uint64_t>(k), N = static_cast<uint64_t>(cols), B = static_cast<uint64_t>(block);
  const uint64_t blocks = ceil_div(K, B);
  const bool packed_zp = zp < 0 || g.tensors[zp].dtype == DType::UInt8;
  bool fused = g_idx < 0 && packed_zp && (bits == 4 || bits == 8) && m <= 1 && N % kColsPerThreadBlock == 0 && K % 8 == 0;
  if (fused) {
    const uint64_t scales = a_bytes_per_value * blocks * kColsPerThreadBlock;
    const uint64_t zps = zp < 0 ? 0 : bits == 4 ? (blocks + 1) / 2 * kColsPerThreadBlock * 2 : blocks * kColsPerThreadBlock;
    fused = scales + zps <= kSharedMemPerBlock;
  }
  if (fused || m == 0) return 0;
  return checked_mul(checked_mul(N, blocks * B, "MatMulNBits scratch"), a_bytes_per_value, "MatMulNBits scratch bytes");
}

}  // namespace memplan
