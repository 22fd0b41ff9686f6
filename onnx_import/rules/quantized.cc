// Quantized ops: the quantize/dequantize pair, the integer matmul/conv ops and ONNX Runtime's packed n-bit
// MatMulNBits. Their output shapes are simple; what these rules add is the check that a weight's scales and
// zero points fit it (per tensor, per axis, per block), so a malformed model is an error naming the node
// instead of a wrong weight size. Where ONNX 1.12's schema already shapes the op (QLinearMatMul,
// QLinearConv, MatMulInteger, ConvInteger) the rule only checks and then declines, and the schema shapes it.
// Sources: the ONNX operator specs (onnx/defs/quantization/defs.cc, docs/Operators.md: QuantizeLinear-21,
// DequantizeLinear-21 with block_size, QLinearMatMul-10, QLinearConv-10, MatMulInteger-10, ConvInteger-10)
// and ONNX Runtime's contrib op docs (docs/ContribOperators.md: MatMulNBits, QGemm) with its input checks
// (onnxruntime/contrib_ops/cpu/quantization/matmul_nbits_helper.h, CheckInputs).
#include <onnx/onnx_pb.h>

#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

std::string dims_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

DType quantized_dtype_attr(const NodeContext& ctx, int64_t code) {
  const auto t = dtype_from_onnx(static_cast<int32_t>(code));
  if (!t) ctx.fail("unknown data type " + std::to_string(code));
  return *t;
}

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// One scale (or zero point) per tensor: a scalar or a 1-element 1-D tensor (ONNX Runtime's
// IsScalarOr1ElementVector).
bool per_tensor(const Value& v) { return v.shape.empty() || (v.shape.size() == 1 && v.shape[0] == 1); }

// QuantizeLinear / DequantizeLinear: the scale (input 1) is per tensor; or, from opset 13, 1-D with one value
// per slice along `axis`; or, from opset 21 with block_size > 0, x's rank with x's dims except
// ceil(x[axis] / block_size) along `axis`. The zero point (input 2), when given, has the scale's shape.
void check_qdq_params(NodeContext& ctx, const Value& x) {
  const Value& scale = ctx.required(1);
  const int64_t block = ctx.opset() >= 21 ? ctx.attr_int("block_size", 0) : 0;
  if (block < 0) ctx.fail("block_size is " + std::to_string(block) + "; it must be positive (or 0: not blocked)");
  if (block == 0 && !per_tensor(scale)) {
    if (ctx.opset() < 13) ctx.fail("the scale must be a scalar before opset 13, not " + dims_text(scale.shape));
    if (x.shape.empty()) ctx.fail("a scalar input needs a scalar scale, not " + dims_text(scale.shape));
    const int64_t axis = ctx.axis(ctx.attr_int("axis", 1), x.shape.size());
    if (scale.shape.size() != 1 || scale.shape[0] != x.shape[axis])
      ctx.fail("a per-axis scale must be 1-D with " + std::to_string(x.shape[axis]) + " values (input dim " +
               std::to_string(axis) + " of " + dims_text(x.shape) + "), not " + dims_text(scale.shape));
  } else if (block > 0) {
    const int64_t axis = ctx.axis(ctx.attr_int("axis", 1), x.shape.size());
    std::vector<int64_t> want = x.shape;
    want[axis] = ceil_div(x.shape[axis], block);
    if (scale.shape != want)
      ctx.fail("a blocked scale (block_size " + std::to_string(block) + ", axis " + std::to_string(axis) +
               ") must be " + dims_text(want) + " for input " + dims_text(x.shape) + ", not " + dims_text(scale.shape));
  }
  if (const Value* zp = ctx.input(2); zp && zp->shape != scale.shape && !(per_tensor(*zp) && per_tensor(scale)))
    ctx.fail("the zero point " + dims_text(zp->shape) + " must have the scale's shape " + dims_text(scale.shape));
}

// QuantizeLinear: y has x's shape; its dtype is the zero point's, else `output_dtype` (opset 21), else uint8.
bool quantize_linear(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  check_qdq_params(ctx, x);
  DType out = DType::UInt8;
  if (const Value* zp = ctx.input(2)) out = zp->dtype;
  else if (const int64_t code = ctx.attr_int("output_dtype", 0); code != 0) out = quantized_dtype_attr(ctx, code);
  ctx.set_output(0, out, x.shape);
  return true;
}

// DequantizeLinear: y has x's shape; float32 up to opset 18, the scale's dtype from 19, `output_dtype` at 23+.
bool dequantize_linear(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  check_qdq_params(ctx, x);
  DType out = DType::Float32;
  if (ctx.opset() >= 19) out = ctx.required(1).dtype;
  if (const int64_t code = ctx.attr_int("output_dtype", 0); code != 0) out = quantized_dtype_attr(ctx, code);
  ctx.set_output(0, out, x.shape);
  return true;
}

// A scale or zero point of an integer matmul/conv operand: per tensor, or 1-D with `n` values (`what`
// names the per-slice meaning). Absent optional inputs pass.
void check_per_tensor_or(NodeContext& ctx, size_t i, const char* name, int64_t n, const char* what) {
  const Value* v = ctx.input(i);
  if (!v || per_tensor(*v)) return;
  if (n < 0 || v->shape.size() != 1 || v->shape[0] != n)
    ctx.fail(std::string(name) + " must be a scalar" + (n >= 0 ? " or 1-D with " + std::to_string(n) + " values (" + what + ")" : "") +
             ", not " + dims_text(v->shape));
}

// A matmul operand's scale or zero point (ONNX QLinearMatMul-10, MatMulInteger-10): per tensor, or per row
// of A / per column of B: a 1-D vector of rows (A) or columns (B), or the operand's shape with the reduced
// K axis 1 ([..., M, 1] for A, [..., 1, N] for B). `a_side` picks A (K last) or B (K second-last).
void check_matmul_param(NodeContext& ctx, size_t i, const char* name, const Value& operand, bool a_side) {
  const Value* v = ctx.input(i);
  if (!v || per_tensor(*v)) return;
  const size_t r = operand.shape.size();
  if (r >= 2) {
    const size_t keep = a_side ? r - 2 : r - 1, k = a_side ? r - 1 : r - 2;
    if (v->shape.size() == 1 && v->shape[0] == operand.shape[keep]) return;
    std::vector<int64_t> want = operand.shape;
    want[k] = 1;
    if (v->shape == want) return;
    ctx.fail(std::string(name) + " must be a scalar, 1-D with " + std::to_string(operand.shape[keep]) + " values (one per " +
             (a_side ? "row" : "column") + ") or " + dims_text(want) + ", not " + dims_text(v->shape));
  }
  ctx.fail(std::string(name) + " must be a scalar for a 1-D operand, not " + dims_text(v->shape));
}

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): a's and y's parameters per tensor or per
// row, b's per tensor or per column.
bool qlinear_matmul(NodeContext& ctx) {
  const Value& a = ctx.required(0);
  const Value& b = ctx.required(3);
  check_matmul_param(ctx, 1, "a_scale", a, true);
  check_matmul_param(ctx, 2, "a_zero_point", a, true);
  check_matmul_param(ctx, 4, "b_scale", b, false);
  check_matmul_param(ctx, 5, "b_zero_point", b, false);
  return false;  // ONNX's schema shapes it
}

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B): w's parameters per tensor or one per
// output channel (w's first dim M); x's and y's per tensor.
bool qlinear_conv(NodeContext& ctx) {
  for (size_t i : {1, 2, 6, 7}) check_per_tensor_or(ctx, i, i < 6 ? "x's scale/zero point" : "y's scale/zero point", -1, "");
  const Value& w = ctx.required(3);
  const int64_t m = w.shape.empty() ? -1 : w.shape[0];
  check_per_tensor_or(ctx, 4, "w_scale", m, "one per output channel");
  check_per_tensor_or(ctx, 5, "w_zero_point", m, "one per output channel");
  if (const Value* b = ctx.input(8); b && (b->shape.size() != 1 || b->shape[0] != m))
    ctx.fail("the bias must be 1-D with " + std::to_string(m) + " values (one per output channel), not " + dims_text(b->shape));
  return false;
}

// MatMulInteger(A, B, a_zero_point, b_zero_point): A's zero point per tensor or per row, B's per tensor or
// per column.
bool matmul_integer(NodeContext& ctx) {
  check_matmul_param(ctx, 2, "a_zero_point", ctx.required(0), true);
  check_matmul_param(ctx, 3, "b_zero_point", ctx.required(1), false);
  return false;
}

// ConvInteger(x, w, x_zero_point, w_zero_point): x's per tensor, w's per tensor or per output channel.
bool conv_integer(NodeContext& ctx) {
  check_per_tensor_or(ctx, 2, "x_zero_point", -1, "");
  const Value& w = ctx.required(1);
  check_per_tensor_or(ctx, 3, "w_zero_point", w.shape.empty() ? -1 : w.shape[0], "one per output channel");
  return false;
}

// com.microsoft MatMulNBits (docs/ContribOperators.md): A [..., K] times B, N×K values quantized in blocks of
// block_size along K, `bits` each, stored as uint8 [N, n_blocks, blob_size] (n_blocks = ceil(K / block_size),
// blob_size = ceil(block_size * bits / 8)); scales N * n_blocks values in A's type; zero_points uint8 packed
// (N * ceil(n_blocks * bits / 8) bytes) or in A's type (N * n_blocks); g_idx int32 [K]; bias [N].
// Y [..., N] in A's type. bits 2, 4 or 8 (ORT's kernels), block_size a power of two, at least 16.
bool matmul_nbits(NodeContext& ctx) {
  const Value& a = ctx.required(0);
  const Value& b = ctx.required(1);
  const int64_t k = ctx.attr_int("K", -1), n = ctx.attr_int("N", -1);
  const int64_t bits = ctx.attr_int("bits", 4), block = ctx.attr_int("block_size", -1);
  if (k <= 0 || n <= 0) ctx.fail("needs positive K and N attributes");
  if (bits != 2 && bits != 4 && bits != 8) ctx.fail("bits is " + std::to_string(bits) + "; it must be 2, 4 or 8");
  if (block < 16 || (block & (block - 1)) != 0)
    ctx.fail("block_size is " + std::to_string(block) + "; it must be a power of two, at least 16");
  if (a.shape.empty() || a.shape.back() != k)
    ctx.fail("A " + dims_text(a.shape) + " must end in K = " + std::to_string(k));
  const int64_t blocks = ceil_div(k, block), blob = ceil_div(ctx.mul(block, bits), 8);
  const std::vector<int64_t> want_b{n, blocks, blob};
  const bool b_ok = b.shape == want_b || (b.shape.size() == 2 && b.shape[0] == n && b.shape[1] == ctx.mul(blocks, blob));
  if (b.dtype != DType::UInt8 || !b_ok)
    ctx.fail("B must be uint8 " + dims_text(want_b) + " for K " + std::to_string(k) + ", N " + std::to_string(n) +
             ", block_size " + std::to_string(block) + ", bits " + std::to_string(bits) + "; it is " +
             std::string(dtype_name(b.dtype)) + " " + dims_text(b.shape));
  const uint64_t per_block = static_cast<uint64_t>(ctx.mul(n, blocks));
  const Value& scales = ctx.required(2);
  if (scales.elements() != per_block)
    ctx.fail("scales must hold N * n_blocks = " + std::to_string(per_block) + " values, not " + dims_text(scales.shape));
  if (const Value* zp = ctx.input(3)) {
    const uint64_t packed = static_cast<uint64_t>(ctx.mul(n, ceil_div(ctx.mul(blocks, bits), 8)));
    const uint64_t want = zp->dtype == DType::UInt8 ? packed : per_block;
    if (zp->elements() != want)
      ctx.fail("zero_points (" + std::string(dtype_name(zp->dtype)) + ") must hold " + std::to_string(want) +
               " values, not " + dims_text(zp->shape));
  }
  if (const Value* g = ctx.input(4); g && g->elements() != static_cast<uint64_t>(k))
    ctx.fail("g_idx must hold K = " + std::to_string(k) + " values, not " + dims_text(g->shape));
  if (const Value* bias = ctx.input(5); bias && bias->elements() != static_cast<uint64_t>(n))
    ctx.fail("bias must hold N = " + std::to_string(n) + " values, not " + dims_text(bias->shape));
  auto shape = a.shape;
  shape.back() = n;
  ctx.set_output(0, a.dtype, std::move(shape));
  return true;
}

// com.microsoft QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp): op(A) [M, K] times op(B) [K, N]
// (transA, transB) -> [M, N]; quantized to y_zp's type when y_scale is given, else float32.
bool qgemm(NodeContext& ctx) {
  auto a = ctx.required(0).shape, b = ctx.required(3).shape;
  if (a.size() != 2 || b.size() != 2) ctx.fail("A and B must be 2-D");
  if (ctx.attr_int("transA", 0)) std::swap(a[0], a[1]);
  if (ctx.attr_int("transB", 0)) std::swap(b[0], b[1]);
  if (a[1] != b[0]) ctx.fail("inner dimensions differ (" + std::to_string(a[1]) + " vs " + std::to_string(b[0]) + ")");
  check_per_tensor_or(ctx, 4, "b_scale", b[1], "one per output column");
  DType out = DType::Float32;
  if (ctx.input(7)) out = ctx.input(8) ? ctx.input(8)->dtype : DType::UInt8;
  ctx.set_output(0, out, {a[0], b[1]});
  return true;
}

}  // namespace

void register_quantized_rules(RuleTable& t) {
  t[""]["QuantizeLinear"] = quantize_linear;
  t[""]["DequantizeLinear"] = dequantize_linear;
  t[""]["QLinearMatMul"] = qlinear_matmul;
  t[""]["QLinearConv"] = qlinear_conv;
  t[""]["MatMulInteger"] = matmul_integer;
  t[""]["ConvInteger"] = conv_integer;
  t[kMsDomain]["MatMulNBits"] = matmul_nbits;
  t[kMsDomain]["QGemm"] = qgemm;
}

}  // namespace memplan::shape
