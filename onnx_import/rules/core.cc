// Rules for ops whose dtype ONNX 1.12 cannot express (types added in opsets 19-23: float8, int4; the
// quantize/dequantize pair is in quantized.cc) and for Constant, whose contents memplan needs for
// evaluating shape computations.
#include <onnx/onnx_pb.h>

#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

DType dtype_attr(const NodeContext& ctx, int64_t code) {
  const auto t = dtype_from_onnx(static_cast<int32_t>(code));
  if (!t) ctx.fail("unknown data type " + std::to_string(code));
  return *t;
}

// Constant (onnx/defs/generator/defs.cc): exactly one of value, sparse_value, value_int(s), value_float(s),
// value_string(s) gives the tensor.
bool constant(NodeContext& ctx) {
  Value v;
  if (const auto* a = ctx.attr("value"); a && a->has_t()) {
    v = value_from_tensor(a->t(), "the value of Constant node '" + ctx.name() + "'");
  } else if (const auto* a = ctx.attr("sparse_value"); a && a->has_sparse_tensor()) {
    v = value_from_tensor(a->sparse_tensor().values(), "the value of Constant node '" + ctx.name() + "'");
    v.shape.assign(a->sparse_tensor().dims().begin(), a->sparse_tensor().dims().end());
    v.ints.reset(), v.reals.reset();
  } else if (const auto* a = ctx.attr("value_int")) {
    v.dtype = DType::Int64;
    v.ints = std::vector<int64_t>{a->i()};
  } else if (const auto* a = ctx.attr("value_ints")) {
    v.dtype = DType::Int64;
    v.shape = {a->ints_size()};
    v.ints = std::vector<int64_t>(a->ints().begin(), a->ints().end());
  } else if (const auto* a = ctx.attr("value_float")) {
    v.dtype = DType::Float32;
    v.reals = std::vector<double>{a->f()};
  } else if (const auto* a = ctx.attr("value_floats")) {
    v.dtype = DType::Float32;
    v.shape = {a->floats_size()};
    v.reals = std::vector<double>(a->floats().begin(), a->floats().end());
  } else if (ctx.attr("value_string")) {
    v.dtype = DType::String;
  } else if (const auto* a = ctx.attr("value_strings")) {
    v.dtype = DType::String;
    v.shape = {a->strings_size()};
  } else {
    ctx.fail("has no value attribute");
  }
  if (v.elements() > kMaxEvalElements) v.ints.reset(), v.reals.reset();
  ctx.set_output(0, std::move(v));
  return true;
}

// Cast: the shape of the input, the dtype `to` names (any ONNX code, float8 and int4 included).
bool cast(NodeContext& ctx) {
  const auto* to = ctx.attr("to");
  if (!to) ctx.fail("has no 'to' attribute");
  ctx.set_output(0, dtype_attr(ctx, to->i()), ctx.required(0).shape);
  return true;
}

bool cast_like(NodeContext& ctx) {
  ctx.set_output(0, ctx.required(1).dtype, ctx.required(0).shape);
  return true;
}

}  // namespace

bool same_as_first(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  ctx.set_output(0, x.dtype, x.shape);
  return true;
}

void register_core_rules(RuleTable& t) {
  t[""]["Constant"] = constant;
  t[""]["Cast"] = cast;
  t[""]["CastLike"] = cast_like;
}

}  // namespace memplan::shape
