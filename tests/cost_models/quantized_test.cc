// Quantized weights on the models of tests/models/quant (written by make_quant_models.py): the bytes the
// program holds resident equal a hand count from each initializer's shape and dtype (worked out in the
// comments, from the ONNX/ONNX Runtime storage rules: int4 two per byte, MatMulNBits' B as
// [N, ceil(K / block_size), block_size * bits / 8] uint8), the output shapes are the ones the op specs give,
// and ONNX Runtime's MatMulNBits dequantizes B into an N × K_padded buffer of A's type exactly when its
// fused GEMV cannot run (onnxruntime/contrib_ops/cuda/quantization/matmul_nbits.cc).
#include <gtest/gtest.h>

#include <string>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "cost_models/quantized_weights.h"
#include "onnx_import/import.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::resident_bytes;

Graph quant_quantized(const std::string& stem, int64_t batch, int64_t seq = 0) {
  Bindings b;
  b.batch = batch;
  if (seq > 0) b.dims["seq"] = seq;
  return import_model(std::string(MEMPLAN_ZOO_DIR) + "/quant/" + stem + ".onnx", b);
}

CostModelResult infer(const Graph& g, Runtime r) {
  InferenceRun o;
  o.runtime = r;
  return build_inference_program(g, o);
}

uint64_t quantized_bytes(const Graph& g) {
  uint64_t sum = 0;
  for (const QuantizedWeight& q : quantized_weights(g)) sum += q.bytes;
  return sum;
}

const Tensor& output(const Graph& g) { return g.tensors[g.outputs.at(0)]; }

// MatMulNBits, K = 80, N = 32, 4 bits, block 32: n_blocks = ceil(80 / 32) = 3, blob = 32 * 4 / 8 = 16 bytes.
//   B uint8 [32, 3, 16] = 1,536 bytes (K padded to 96: 80 * 32 / 2 = 1,280 bytes of values + 256 of padding)
//   scales float16 [32 * 3] = 96 * 2 = 192 bytes
//   zero points uint8, 4-bit packed: 32 * ceil(3 * 4 / 8) = 32 * 2 = 64 bytes
//   total 1,536 + 192 + 64 = 1,792 bytes for 80 * 32 = 2,560 values.
TEST(QuantizedWeights, MatMulNBitsWithZeroPointsIsPackedWithBlockPadding) {
  const Graph g = quant_quantized("matmulnbits_4bit_zp", 2, 3);
  const auto q = quantized_weights(g);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].format, "MatMulNBits 4-bit block 32");
  EXPECT_EQ(q[0].values, 2560u);
  EXPECT_EQ(q[0].bytes, 1792u);
  EXPECT_EQ(q[0].tensors.size(), 3u);
  EXPECT_EQ(resident_bytes(infer(g, Runtime::Ideal).program), 1792u);
  EXPECT_EQ(output(g).shape, (std::vector<int64_t>{2, 3, 32}));  // A [2, 3, 80] -> [..., N]
  EXPECT_EQ(output(g).dtype, DType::Float16);                     // A's type
}

// K = 64, N = 48, block 16, no zero points: n_blocks 4, blob 8. B [48, 4, 8] = 1,536 bytes (64 * 48 / 2, no
// padding); scales float16 [192] = 384 bytes; total 1,920 bytes for 3,072 values.
TEST(QuantizedWeights, SymmetricMatMulNBitsHasNoZeroPoints) {
  const Graph g = quant_quantized("matmulnbits_4bit_nozp", 1, 5);
  const auto q = quantized_weights(g);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].format, "MatMulNBits 4-bit block 16 symmetric");
  EXPECT_EQ(q[0].values, 3072u);
  EXPECT_EQ(q[0].bytes, 1920u);
  EXPECT_EQ(resident_bytes(infer(g, Runtime::Ideal).program), 1920u);
  EXPECT_EQ(output(g).shape, (std::vector<int64_t>{1, 5, 48}));
}

// DequantizeLinear-21 blocked: int4 w [64, 32] = 2,048 values / 2 = 1,024 bytes; block 32 along axis 0:
// scale float32 [2, 32] = 256 bytes, int4 zero point [2, 32] = 64 / 2 = 32 bytes; total 1,312. The
// dequantized w is a float32 [64, 32] = 8,192-byte tensor, not resident: made and freed each run.
TEST(QuantizedWeights, BlockedInt4DequantizeLinear) {
  const Graph g = quant_quantized("qdq_blocked_int4", 2);
  EXPECT_EQ(quantized_bytes(g), 1312u);
  EXPECT_EQ(quantized_weights(g).at(0).format, "DequantizeLinear int4 blocked 32");
  const Program p = infer(g, Runtime::OnnxRuntime).program;
  EXPECT_EQ(resident_bytes(p), 1312u);
  const int32_t w = buffer_named(p, "w");
  ASSERT_GE(w, 0);
  EXPECT_EQ(p.buffers[w].bytes, 8192u);
  EXPECT_FALSE(p.buffers[w].resident);
  EXPECT_EQ(output(g).shape, (std::vector<int64_t>{2, 32}));
}

// Per-axis int8: w [64, 32] = 2,048 bytes, scale float32 [32] = 128, zero point int8 [32] = 32: 2,208 bytes
// of quantized weight. The activation's per-tensor scale (float32, 4 bytes) and zero point (uint8, 1 byte)
// are resident too but belong to no weight: 2,213 bytes resident.
TEST(QuantizedWeights, PerAxisInt8QdqCountsTheActivationParametersApart) {
  const Graph g = quant_quantized("qdq_per_axis_int8", 2);
  const auto q = quantized_weights(g);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].format, "DequantizeLinear int8 per-axis");
  EXPECT_EQ(q[0].bytes, 2208u);
  EXPECT_EQ(resident_bytes(infer(g, Runtime::Ideal).program), 2213u);
  EXPECT_EQ(output(g).dtype, DType::Float32);
}

// QLinearMatMul: b uint8 [64, 32] = 2,048, b_scale float32 [32] = 128, b_zp uint8 [32] = 32 -> 2,208;
// plus a's and y's scalar scale (4 + 4) and zero point (1 + 1): 2,218 resident. y uint8 [2, 32].
TEST(QuantizedWeights, QLinearMatMul) {
  const Graph g = quant_quantized("qlinear_matmul", 2);
  EXPECT_EQ(quantized_bytes(g), 2208u);
  EXPECT_EQ(resident_bytes(infer(g, Runtime::Ideal).program), 2218u);
  EXPECT_EQ(output(g).shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(output(g).dtype, DType::UInt8);
}

// QLinearConv: w uint8 [16, 3, 3, 3] = 432, w_scale float32 [16] = 64, w_zp uint8 [16] = 16 -> 512;
// plus x's and y's scalars (5 + 5) and the int32 bias [16] = 64: 586 resident. 3x3 kernel, pads 1, stride 1:
// y [2, 16, 8, 8].
TEST(QuantizedWeights, QLinearConv) {
  const Graph g = quant_quantized("qlinear_conv", 2);
  EXPECT_EQ(quantized_bytes(g), 512u);
  EXPECT_EQ(resident_bytes(infer(g, Runtime::Ideal).program), 586u);
  EXPECT_EQ(output(g).shape, (std::vector<int64_t>{2, 16, 8, 8}));
}

// MatMulInteger: w uint8 [64, 32] = 2,048 and its zero point uint8 [32] = 32: 2,080 bytes. The int32
// accumulator [2, 32] = 256 bytes and DynamicQuantizeLinear's uint8 copy of x [2, 64] = 128 bytes are
// ordinary activations.
TEST(QuantizedWeights, MatMulInteger) {
  const Graph g = quant_quantized("matmul_integer", 2);
  EXPECT_EQ(quantized_bytes(g), 2080u);
  const Program p = infer(g, Runtime::Ideal).program;
  EXPECT_EQ(resident_bytes(p), 2080u);
  EXPECT_EQ(p.buffers[buffer_named(p, "acc")].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "x_q")].bytes, 128u);
}

// A float16 weight [64, 32] (4,096 bytes) cast to float32 for a float32 MatMul. As written (ideal) the weight
// stays 4,096 bytes resident and the float32 copy (8,192 bytes) is a per-run temporary named after the
// Cast's output. ONNX Runtime folds the Cast when it creates the session (constant_folding.cc: every input a
// constant): it holds the float32 result, 64 * 32 * 4 = 8,192 bytes, and drops the float16 initializer.
TEST(QuantizedWeights, Fp16WeightWithFp32Compute) {
  const Graph g = quant_quantized("fp16_weight_fp32", 2);
  EXPECT_TRUE(quantized_weights(g).empty());
  const Program ideal = infer(g, Runtime::Ideal).program;
  EXPECT_EQ(resident_bytes(ideal), 4096u);
  const int32_t w = buffer_named(ideal, "w");
  ASSERT_GE(w, 0);
  EXPECT_EQ(ideal.buffers[w].bytes, 8192u);
  EXPECT_FALSE(ideal.buffers[w].resident);
  const Program ort = infer(g, Runtime::OnnxRuntime).program;
  EXPECT_EQ(resident_bytes(ort), 8192u);
  ASSERT_GE(buffer_named(ort, "w"), 0);
  EXPECT_TRUE(ort.buffers[buffer_named(ort, "w")].resident);
  EXPECT_LT(buffer_named(ort, "w16"), 0);
  EXPECT_EQ(ort.steps.size(), 1u);  // the MatMul only
}

// ONNX Runtime's CUDA MatMulNBits: at M = 1 (batch 1, seq 1) with N = 32 and K = 80 multiples of 8 the fused
// GEMV runs and nothing is dequantized; at M = 2 * 3 = 6 B is dequantized into N × K_padded = 32 × 96 float16
// values = 6,144 bytes, a workspace written and freed at the op. The other runtimes add nothing.
TEST(QuantizedWeights, OrtMatMulNBitsDequantizesOnlyWhenItCannotRunTheGemv) {
  const std::string scratch = "MatMulNBits_0:dequantized_b";
  const Program decode = infer(quant_quantized("matmulnbits_4bit_zp", 1, 1), Runtime::OnnxRuntime).program;
  EXPECT_LT(buffer_named(decode, scratch), 0);
  const CostModelResult prefill = infer(quant_quantized("matmulnbits_4bit_zp", 2, 3), Runtime::OnnxRuntime);
  const int32_t b = buffer_named(prefill.program, scratch);
  ASSERT_GE(b, 0);
  EXPECT_EQ(prefill.program.buffers[b].bytes, 6144u);
  EXPECT_EQ(prefill.program.buffers[b].category, Category::Workspace);
  bool noted = false;
  for (const std::string& n : prefill.notes) noted = noted || n.find("6144 bytes") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_LT(buffer_named(infer(quant_quantized("matmulnbits_4bit_zp", 2, 3), Runtime::Ideal).program, scratch), 0);
  // No zero points, K = 64 (a multiple of the block: no padding), N = 48, M = 2: 48 × 64 × 2 = 6,144 bytes.
  const Program nozp = infer(quant_quantized("matmulnbits_4bit_nozp", 2, 1), Runtime::OnnxRuntime).program;
  ASSERT_GE(buffer_named(nozp, scratch), 0);
  EXPECT_EQ(nozp.buffers[buffer_named(nozp, scratch)].bytes, 6144u);
}

// ORT's constant folding keeps an initializer that a node it does not fold still reads: w16 [4, 8] float16
// (64 bytes) feeds a Cast (folded: float32 [4, 8] = 128 bytes, resident, read by a Mul with an input) and an
// Add with the input x, which runs. Resident: 64 + 128 = 192 bytes; under ideal only w16's 64.
TEST(QuantizedWeights, OrtFoldingKeepsAConstantAnUnfoldedNodeReads) {
  testing::GraphBuilder b;
  const int32_t x = b.input("x", {4, 8}, DType::Float16);
  const int32_t w16 = b.weight("w16", {4, 8}, DType::Float16);
  const int32_t w = b.node("Cast", {w16}, {{"w", {4, 8}}}, {{"to", testing::int_attr(1)}});
  const int32_t y = b.node("Add", {x, w16}, {{"y", {4, 8}}}, {}, DType::Float16);
  const int32_t x32 = b.input("x32", {4, 8});
  const int32_t z = b.node("Mul", {w, x32}, {{"z", {4, 8}}});
  b.output(y);
  b.output(z);
  EXPECT_EQ(resident_bytes(infer(b.graph(), Runtime::OnnxRuntime).program), 192u);
  EXPECT_EQ(resident_bytes(infer(b.graph(), Runtime::Ideal).program), 64u);
}

}  // namespace
}  // namespace memplan
