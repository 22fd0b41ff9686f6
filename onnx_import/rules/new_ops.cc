// Ops added to the default domain after opset 17, which ONNX 1.12 does not know (shapes from the ONNX
// operator specs, docs/Operators.md), and GridSample/DFT whose newer opsets generalized their shapes.
#include <onnx/onnx_pb.h>

#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

// BitwiseAnd/Or/Xor-18: numpy broadcasting, the inputs' dtype.
bool bitwise_binary(NodeContext& ctx) {
  const Value& a = ctx.required(0);
  ctx.set_output(0, a.dtype, ctx.broadcast({a.shape, ctx.required(1).shape}));
  return true;
}

// RegexFullMatch-20: a bool per string.
bool regex_full_match(NodeContext& ctx) {
  ctx.set_output(0, DType::Bool, ctx.required(0).shape);
  return true;
}

// StringConcat-20: broadcast strings.
bool string_concat(NodeContext& ctx) {
  ctx.set_output(0, DType::String, ctx.broadcast({ctx.required(0).shape, ctx.required(1).shape}));
  return true;
}

// Col2Im-18: input [N, C * prod(block_shape), L], image_shape and block_shape inputs -> [N, C, image_shape...].
bool col2im(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const auto image = ctx.input_ints(1), block = ctx.input_ints(2);
  if (!image || !block) ctx.fail("its image_shape and block_shape inputs must be known statically");
  if (x.shape.size() != 3) ctx.fail("the input must be [N, C*prod(block_shape), L]");
  int64_t block_elems = 1;
  for (int64_t b : *block) block_elems = ctx.mul(block_elems, b);
  if (block_elems <= 0 || x.shape[1] % block_elems != 0) ctx.fail("block_shape does not divide the channel dimension");
  std::vector<int64_t> out{x.shape[0], x.shape[1] / block_elems};
  out.insert(out.end(), image->begin(), image->end());
  ctx.set_output(0, x.dtype, std::move(out));
  return true;
}

// CenterCropPad-18: the dims listed in `axes` (default all) become the values of the shape input.
bool center_crop_pad(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const auto target = ctx.input_ints(1);
  if (!target) ctx.fail("its shape input must be known statically");
  std::vector<int64_t> axes = ctx.attr_ints("axes").value_or(std::vector<int64_t>{});
  if (axes.empty())
    for (size_t a = 0; a < x.shape.size(); ++a) axes.push_back(static_cast<int64_t>(a));
  if (axes.size() != target->size()) ctx.fail("the shape input must have one entry per axis");
  auto shape = x.shape;
  for (size_t k = 0; k < axes.size(); ++k) shape[ctx.axis(axes[k], x.shape.size())] = (*target)[k];
  ctx.set_output(0, x.dtype, std::move(shape));
  return true;
}

// AffineGrid-20: theta [N, 2, 3] with size (N, C, H, W) -> [N, H, W, 2]; theta [N, 3, 4] with
// size (N, C, D, H, W) -> [N, D, H, W, 3].
bool affine_grid(NodeContext& ctx) {
  const Value& theta = ctx.required(0);
  const auto size = ctx.input_ints(1);
  if (!size) ctx.fail("its size input must be known statically");
  if (size->size() != 4 && size->size() != 5) ctx.fail("size must have 4 or 5 entries");
  std::vector<int64_t> out{(*size)[0]};
  out.insert(out.end(), size->begin() + 2, size->end());
  out.push_back(static_cast<int64_t>(size->size()) - 2);
  ctx.set_output(0, theta.dtype, std::move(out));
  return true;
}

// GridSample (16 for 2-D, 20 for N-D): X [N, C, D1..Dr], grid [N, D1_out..Dr_out, r] -> [N, C, D1_out..Dr_out].
bool grid_sample(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const Value& grid = ctx.required(1);
  if (x.shape.size() < 3 || grid.shape.size() != x.shape.size()) ctx.fail("X and grid must have the same rank, at least 3");
  std::vector<int64_t> out{x.shape[0], x.shape[1]};
  out.insert(out.end(), grid.shape.begin() + 1, grid.shape.end() - 1);
  ctx.set_output(0, x.dtype, std::move(out));
  return true;
}

// DeformConv-19: X [N, C, spatial...], W [M, C/group, k...], offset [N, offset_group*2*prod(k), out spatial...]
// -> [N, M, out spatial...]; the offset tensor already carries the output's spatial dims.
bool deform_conv(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const Value& w = ctx.required(1);
  const Value& offset = ctx.required(2);
  if (x.shape.size() < 3 || offset.shape.size() != x.shape.size() || w.shape.size() != x.shape.size())
    ctx.fail("X, W and offset must have the same rank, at least 3");
  std::vector<int64_t> out{x.shape[0], w.shape[0]};
  out.insert(out.end(), offset.shape.begin() + 2, offset.shape.end());
  ctx.set_output(0, x.dtype, std::move(out));
  return true;
}

// DFT-20: axis and dft_length became inputs. Signal [..., n at axis, ..., 1 or 2] -> [..., m, ..., 2] where
// m = dft_length (default n), or m/2 + 1 when onesided.
bool dft(NodeContext& ctx) {
  if (ctx.opset() < 20) return false;
  const Value& x = ctx.required(0);
  if (x.shape.size() < 2) ctx.fail("the signal needs at least a batch and a component dimension");
  int64_t axis = -2;
  if (ctx.input(2)) {
    const auto a = ctx.input_ints(2);
    if (!a || a->size() != 1) ctx.fail("its axis input must be a known scalar");
    axis = (*a)[0];
  }
  axis = ctx.axis(axis, x.shape.size());
  if (axis == static_cast<int64_t>(x.shape.size()) - 1) ctx.fail("axis cannot be the last (component) dimension");
  auto shape = x.shape;
  if (ctx.input(1)) {
    const auto len = ctx.input_ints(1);
    if (!len || len->size() != 1) ctx.fail("its dft_length input must be a known scalar");
    shape[axis] = (*len)[0];
  }
  if (ctx.attr_int("onesided", 0) != 0) shape[axis] = shape[axis] / 2 + 1;
  shape.back() = 2;
  ctx.set_output(0, x.dtype, std::move(shape));
  return true;
}

// Attention-23: Q/K/V are 3-D [B, seq, heads*head_size] (q_num_heads/kv_num_heads attributes) or 4-D
// [B, heads, seq, head_size]; optional past_key/past_value [B, kv_heads, past, head_size].
// Outputs: Y (Q's layout, v_head_size per head), present_key/value [B, kv_heads, past+kv_seq, ...],
// qk_matmul_output [B, q_heads, q_seq, past+kv_seq].
bool attention23(NodeContext& ctx) {
  const Value& q = ctx.required(0);
  const Value& k = ctx.required(1);
  const Value& v = ctx.required(2);
  const bool three_d = q.shape.size() == 3;
  if (!(three_d || q.shape.size() == 4) || k.shape.size() != q.shape.size() || v.shape.size() != q.shape.size())
    ctx.fail("Q, K and V must all be 3-D or all 4-D");
  int64_t batch = q.shape[0], q_heads, q_seq, kv_heads, kv_seq, head, v_head;
  if (three_d) {
    q_heads = ctx.attr_int("q_num_heads", 0);
    kv_heads = ctx.attr_int("kv_num_heads", 0);
    if (q_heads <= 0 || kv_heads <= 0) ctx.fail("3-D inputs need the q_num_heads and kv_num_heads attributes");
    if (q.shape[2] % q_heads || k.shape[2] % kv_heads || v.shape[2] % kv_heads)
      ctx.fail("hidden sizes are not multiples of the head counts");
    q_seq = q.shape[1];
    kv_seq = k.shape[1];
    head = q.shape[2] / q_heads;
    v_head = v.shape[2] / kv_heads;
  } else {
    q_heads = q.shape[1];
    q_seq = q.shape[2];
    kv_heads = k.shape[1];
    kv_seq = k.shape[2];
    head = q.shape[3];
    v_head = v.shape[3];
  }
  const int64_t past = ctx.input(4) && ctx.input(4)->shape.size() == 4 ? ctx.input(4)->shape[2] : 0;
  const int64_t total = ctx.add(past, kv_seq);
  ctx.set_output(0, q.dtype, three_d ? std::vector<int64_t>{batch, q_seq, ctx.mul(q_heads, v_head)}
                                     : std::vector<int64_t>{batch, q_heads, q_seq, v_head});
  if (ctx.output_used(1)) ctx.set_output(1, k.dtype, {batch, kv_heads, total, head});
  if (ctx.output_used(2)) ctx.set_output(2, v.dtype, {batch, kv_heads, total, v_head});
  if (ctx.output_used(3)) ctx.set_output(3, q.dtype, {batch, q_heads, q_seq, total});
  return true;
}

}  // namespace

void register_new_op_rules(RuleTable& t) {
  for (const char* op : {"Gelu", "Mish", "GroupNormalization", "RMSNormalization", "RotaryEmbedding", "BitwiseNot"})
    t[""][op] = same_as_first;
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) t[""][op] = bitwise_binary;
  t[""]["RegexFullMatch"] = regex_full_match;
  t[""]["StringConcat"] = string_concat;
  t[""]["Col2Im"] = col2im;
  t[""]["CenterCropPad"] = center_crop_pad;
  t[""]["AffineGrid"] = affine_grid;
  t[""]["GridSample"] = grid_sample;
  t[""]["DeformConv"] = deform_conv;
  t[""]["DFT"] = dft;
  t[""]["Attention"] = attention23;
}

}  // namespace memplan::shape
