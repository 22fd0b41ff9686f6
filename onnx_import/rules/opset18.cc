// Ops whose inputs or attributes changed in opsets 18-19, past what ONNX 1.12 knows: Reduce* (axes as an
// input, noop_with_empty_axes), Split (num_outputs), Pad (axes input), Resize (axes,
// keep_aspect_ratio_policy), LpPool-18 (ceil_mode, dilations) and AveragePool-19 (dilations).
// The rules cover every opset of these ops, so one implementation serves old and new models alike.
#include <onnx/onnx_pb.h>

#include <cmath>

#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

// Known contents of input i; fails naming the node when the input is present but its contents are unknown.
std::optional<std::vector<int64_t>> known_ints(const NodeContext& ctx, size_t i, const char* what) {
  if (!ctx.input(i)) return std::nullopt;
  auto v = ctx.input_ints(i);
  if (!v) ctx.fail(std::string("its ") + what + " input is not known statically");
  return v;
}

// Reduce*: axes are an attribute up to opset 12 (ReduceSum) / 17 (the others), an input afterwards.
bool reduce(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const bool axes_input = ctx.op() == "ReduceSum" ? ctx.opset() >= 13 : ctx.opset() >= 18;
  std::vector<int64_t> axes;
  if (axes_input) axes = known_ints(ctx, 1, "axes").value_or(std::vector<int64_t>{});
  else axes = ctx.attr_ints("axes").value_or(std::vector<int64_t>{});
  const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  if (axes.empty() && ctx.attr_int("noop_with_empty_axes", 0) != 0) {
    ctx.set_output(0, x.dtype, x.shape);
    return true;
  }
  std::vector<bool> reduced(x.shape.size(), axes.empty());
  for (int64_t a : axes) reduced[ctx.axis(a, x.shape.size())] = true;
  std::vector<int64_t> out;
  for (size_t a = 0; a < x.shape.size(); ++a) {
    if (!reduced[a]) out.push_back(x.shape[a]);
    else if (keepdims) out.push_back(1);
  }
  ctx.set_output(0, x.dtype, std::move(out));
  return true;
}

// Split: sizes from the 'split' attribute (< 13) or input (>= 13), else num_outputs (>= 18, the last
// chunk smaller), else equal parts, one per output.
bool split(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const int64_t axis = ctx.axis(ctx.attr_int("axis", 0), x.shape.size());
  const int64_t dim = x.shape[axis];
  std::vector<int64_t> sizes;
  if (ctx.opset() < 13) sizes = ctx.attr_ints("split").value_or(std::vector<int64_t>{});
  else sizes = known_ints(ctx, 1, "split").value_or(std::vector<int64_t>{});
  const int64_t n = static_cast<int64_t>(ctx.num_outputs());
  if (sizes.empty()) {
    if (const auto* num = ctx.attr("num_outputs"); num && ctx.opset() >= 18) {
      if (num->i() != n) ctx.fail("num_outputs is " + std::to_string(num->i()) + " but the node has " + std::to_string(n) + " outputs");
      if (n <= 0) ctx.fail("num_outputs must be positive");
      const int64_t chunk = dim / n + (dim % n != 0);  // ceil(dim / n); the last output takes the remainder
      for (int64_t k = 0; k < n; ++k) sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - std::min(dim, k * chunk))));
    } else {
      if (n == 0 || dim % n != 0)
        ctx.fail("dimension " + std::to_string(dim) + " does not split evenly into " + std::to_string(n) + " outputs");
      sizes.assign(n, dim / n);
    }
  }
  if (static_cast<int64_t>(sizes.size()) != n) ctx.fail("the split sizes do not match the number of outputs");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) ctx.fail("a split size is negative");
    total = ctx.add(total, s);
  }
  if (total != dim) ctx.fail("split sizes sum to " + std::to_string(total) + ", not the dimension " + std::to_string(dim));
  for (int64_t k = 0; k < n; ++k) {
    auto shape = x.shape;
    shape[axis] = sizes[k];
    ctx.set_output(k, x.dtype, std::move(shape));
  }
  return true;
}

// Pad: pads [begin..., end...] from the attribute (< 11, 'paddings' at opset 1) or input 1; opset 18's
// optional axes input says which dims they apply to.
bool pad(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const size_t rank = x.shape.size();
  std::vector<int64_t> pads;
  if (ctx.opset() < 11) pads = ctx.attr_ints(ctx.opset() < 2 ? "paddings" : "pads").value_or(std::vector<int64_t>{});
  else pads = known_ints(ctx, 1, "pads").value_or(std::vector<int64_t>{});
  std::vector<int64_t> axes;
  if (ctx.opset() >= 18 && ctx.input(3)) {
    axes = *known_ints(ctx, 3, "axes");
    for (auto& a : axes) a = ctx.axis(a, rank);
  } else {
    for (size_t a = 0; a < rank; ++a) axes.push_back(static_cast<int64_t>(a));
  }
  if (pads.size() != 2 * axes.size())
    ctx.fail("has " + std::to_string(pads.size()) + " pads for " + std::to_string(axes.size()) + " padded axes");
  auto shape = x.shape;
  for (size_t k = 0; k < axes.size(); ++k) {
    shape[axes[k]] = ctx.add(shape[axes[k]], ctx.add(pads[k], pads[k + axes.size()]));
    if (shape[axes[k]] < 0) ctx.fail("pads make dimension " + std::to_string(axes[k]) + " negative");
  }
  ctx.set_output(0, x.dtype, std::move(shape));
  return true;
}

// Resize-10: (X, scales); 11+: (X, roi, scales, sizes); 18+: 'axes' and 'keep_aspect_ratio_policy'.
// Scales give floor(dim * scale) (times the roi extent for tf_crop_and_resize), computed in float as ONNX
// Runtime does (onnxruntime/core/providers/cpu/tensor/upsamplebase.h).
bool resize(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const size_t rank = x.shape.size();
  const size_t scales_at = ctx.opset() >= 11 ? 2 : 1;
  std::vector<int64_t> axes;
  if (const auto a = ctx.attr_ints("axes"); a && ctx.opset() >= 18)
    for (int64_t v : *a) axes.push_back(ctx.axis(v, rank));
  else
    for (size_t a = 0; a < rank; ++a) axes.push_back(static_cast<int64_t>(a));
  auto shape = x.shape;
  const auto sizes = ctx.opset() >= 11 ? ctx.input_ints(3) : std::nullopt;
  if (ctx.opset() >= 11 && ctx.input(3) && ctx.input(3)->elements() > 0) {
    if (!sizes) ctx.fail("its sizes input is not known statically");
    if (sizes->size() != axes.size()) ctx.fail("sizes has " + std::to_string(sizes->size()) + " entries for " + std::to_string(axes.size()) + " axes");
    const std::string policy = ctx.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch" || ctx.opset() < 18) {
      for (size_t k = 0; k < axes.size(); ++k) shape[axes[k]] = (*sizes)[k];
    } else {
      // One scale for every axis: the smallest (not_larger) or largest (not_smaller) ratio; dims are
      // rounded half up (ONNX Resize-18 spec).
      double scale = policy == "not_larger" ? INFINITY : 0;
      for (size_t k = 0; k < axes.size(); ++k) {
        const double r = static_cast<double>((*sizes)[k]) / static_cast<double>(x.shape[axes[k]]);
        scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
      }
      for (int64_t a : axes) shape[a] = static_cast<int64_t>(std::floor(scale * static_cast<double>(x.shape[a]) + 0.5));
    }
  } else {
    const auto scales = ctx.input_reals(scales_at);
    if (!scales || scales->empty()) ctx.fail("neither its scales nor its sizes input is known statically");
    if (scales->size() != axes.size()) ctx.fail("scales has " + std::to_string(scales->size()) + " entries for " + std::to_string(axes.size()) + " axes");
    const auto roi = ctx.opset() >= 11 ? ctx.input_reals(1) : std::nullopt;
    const bool crop = ctx.attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize";
    for (size_t k = 0; k < axes.size(); ++k) {
      float extent = 1.0f;
      if (crop && roi && roi->size() == 2 * axes.size()) extent = static_cast<float>((*roi)[k + axes.size()] - (*roi)[k]);
      const float out = static_cast<float>(x.shape[axes[k]]) * extent * static_cast<float>((*scales)[k]);
      shape[axes[k]] = static_cast<int64_t>(std::floor(out));
    }
  }
  ctx.set_output(0, x.dtype, std::move(shape));
  return true;
}

// Pooling output size along one spatial axis (ONNX pool spec; ceil_mode as in ONNX Runtime's
// pool_attributes.h: a window that would start in the end padding is dropped).
int64_t pooled(const NodeContext& ctx, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
               const std::string& auto_pad, bool ceil_mode) {
  const int64_t window = ctx.add(ctx.mul(k - 1, d), 1);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return in / s + (in % s != 0);
  if (auto_pad == "VALID") {
    if (in < window) ctx.fail("the pooling window is larger than the input");
    return (in - window) / s + 1;
  }
  const int64_t span = ctx.add(ctx.add(in, pb), ctx.add(pe, -window));
  if (span < 0) ctx.fail("the pooling window is larger than the padded input");
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && ctx.mul(out - 1, s) >= ctx.add(in, pb)) --out;
  return out;
}

// AveragePool-19 and LpPool-18 gained dilations (and LpPool ceil_mode); earlier opsets go to ONNX.
bool pool(NodeContext& ctx) {
  if ((ctx.op() == "AveragePool" && ctx.opset() < 19) || (ctx.op() == "LpPool" && ctx.opset() < 18)) return false;
  const Value& x = ctx.required(0);
  if (x.shape.size() < 3) ctx.fail("the input needs a batch, a channel and at least one spatial dimension");
  const size_t spatial = x.shape.size() - 2;
  const auto kernel = ctx.attr_ints("kernel_shape");
  if (!kernel || kernel->size() != spatial) ctx.fail("kernel_shape must have one entry per spatial dimension");
  const auto strides = ctx.attr_ints("strides").value_or(std::vector<int64_t>(spatial, 1));
  const auto dil = ctx.attr_ints("dilations").value_or(std::vector<int64_t>(spatial, 1));
  const auto pads = ctx.attr_ints("pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  if (strides.size() != spatial || dil.size() != spatial || pads.size() != 2 * spatial)
    ctx.fail("strides, dilations and pads must match the spatial rank");
  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  const bool ceil_mode = ctx.attr_int("ceil_mode", 0) != 0;
  std::vector<int64_t> out{x.shape[0], x.shape[1]};
  for (size_t i = 0; i < spatial; ++i) {
    if (strides[i] < 1 || dil[i] < 1 || (*kernel)[i] < 1) ctx.fail("kernel, strides and dilations must be positive");
    out.push_back(pooled(ctx, x.shape[2 + i], (*kernel)[i], strides[i], dil[i], pads[i], pads[spatial + i], auto_pad, ceil_mode));
  }
  ctx.set_output(0, x.dtype, std::move(out));
  return true;
}

}  // namespace

void register_opset18_rules(RuleTable& t) {
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceSum", "ReduceSumSquare",
                         "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"})
    t[""][op] = reduce;
  t[""]["Split"] = split;
  t[""]["Pad"] = pad;
  t[""]["Resize"] = resize;
  t[""]["AveragePool"] = pool;
  t[""]["LpPool"] = pool;
}

}  // namespace memplan::shape
