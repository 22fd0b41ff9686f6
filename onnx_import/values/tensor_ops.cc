// Evaluators of the ops that build and move shape vectors: Shape, Size, the ops that keep elements in
// order (Identity, Reshape, Squeeze, ...), Cast, Gather, Concat, Slice, Expand, Tile, Transpose,
// ConstantOfShape, Range. Semantics from onnx/docs/Operators.md.
#include <onnx/onnx_pb.h>

#include <algorithm>

#include "onnx_import/values/values.h"

namespace memplan::shape::values {
namespace {

// Shape-15: dims [start, end) of the input, both clamped to [0, rank] after adding rank to negatives.
void shape_of(const EvalContext& c) {
  if (!c.present(0)) return;
  const auto& s = c.in[0]->shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t start = c.attr_int("start", 0), end = c.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  std::vector<int64_t> r(s.begin() + start, s.begin() + std::max(start, end));
  if (r.size() == c.out.elements()) store_ints(c.out, std::move(r));
}

void size_of(const EvalContext& c) {
  if (c.present(0)) store_ints(c.out, {static_cast<int64_t>(c.in[0]->elements())});
}

// Identity, Reshape, Squeeze, Unsqueeze, Flatten, Dropout (inference): the elements unchanged, in order.
void same_elements(const EvalContext& c) {
  if (c.known(0)) store_same(c.out, *c.in[0]);
}

// Cast, CastLike: to bool is "nonzero"; otherwise the value converted (store_same rounds or truncates).
void cast_values(const EvalContext& c) {
  if (!c.known(0)) return;
  const Value& x = *c.in[0];
  if (x.elements() != c.out.elements()) return;
  if (c.out.dtype == DType::Bool) {
    std::vector<int64_t> r(x.elements());
    for (size_t i = 0; i < r.size(); ++i) r[i] = real_at(x, i) != 0;
    store_ints(c.out, std::move(r));
  } else {
    store_same(c.out, x);
  }
}

void gather(const EvalContext& c) {
  if (!c.known(0) || !c.known(1)) return;
  const Value& data = *c.in[0];
  const Value& idx = *c.in[1];
  const int64_t axis = normalize_axis(c.attr_int("axis", 0), data.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(data.shape.size())) return;
  const int64_t dim = data.shape[axis];
  uint64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= data.shape[a];
  for (size_t a = axis + 1; a < data.shape.size(); ++a) inner *= data.shape[a];
  const uint64_t nidx = idx.elements();
  std::vector<size_t> source;
  source.reserve(outer * nidx * inner);
  for (uint64_t o = 0; o < outer; ++o)
    for (uint64_t k = 0; k < nidx; ++k) {
      int64_t j = int_at(idx, k);
      if (j < 0) j += dim;
      if (j < 0 || j >= dim) return;  // out of range: the runtime would fail; leave unknown
      for (uint64_t i = 0; i < inner; ++i) source.push_back((o * dim + j) * inner + i);
    }
  if (source.size() == c.out.elements()) store_gathered(c.out, data, source);
}

void concat(const EvalContext& c) {
  const Inputs& in = c.in;
  Value& out = c.out;
  if (in.empty()) return;
  for (size_t i = 0; i < in.size(); ++i)
    if (!c.known(i) || in[i]->shape.size() != out.shape.size()) return;
  const int64_t axis = normalize_axis(c.attr_int("axis", 0), out.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(out.shape.size())) return;
  uint64_t outer = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= out.shape[a];
  const bool ints = std::all_of(in.begin(), in.end(), [](const Value* v) { return v->ints.has_value(); });
  std::vector<int64_t> ri;
  std::vector<double> rr;
  for (uint64_t o = 0; o < outer; ++o)
    for (const Value* v : in) {
      const uint64_t chunk = v->elements() / std::max<uint64_t>(outer, 1);
      for (uint64_t i = 0; i < chunk; ++i) {
        if (ints) ri.push_back((*v->ints)[o * chunk + i]);
        else rr.push_back(real_at(*v, o * chunk + i));
      }
    }
  if (ints && ri.size() == out.elements()) store_ints(out, std::move(ri));
  else if (!ints && rr.size() == out.elements()) store_reals(out, rr);
}

// Slice: starts/ends/axes are attributes before opset 10, inputs (with steps) from 10. Starts are clamped
// to [0, dim] (to [0, dim-1] for negative steps); the output shape, already inferred, bounds the walk.
void slice(const EvalContext& c) {
  if (!c.known(0)) return;
  const Value& data = *c.in[0];
  const size_t rank = data.shape.size();
  if (c.out.shape.size() != rank) return;
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    starts = c.attr_ints("starts").value_or(std::vector<int64_t>{});
    ends = c.attr_ints("ends").value_or(std::vector<int64_t>{});
    axes = c.attr_ints("axes").value_or(std::vector<int64_t>{});
  } else {
    if (!c.known(1) || !c.known(2)) return;
    if (c.present(3) && !c.known(3)) return;
    if (c.present(4) && !c.known(4)) return;
    starts = as_ints(*c.in[1]);
    ends = as_ints(*c.in[2]);
    if (c.present(3)) axes = as_ints(*c.in[3]);
    if (c.present(4)) steps = as_ints(*c.in[4]);
  }
  if (axes.empty())
    for (size_t a = 0; a < starts.size(); ++a) axes.push_back(static_cast<int64_t>(a));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) return;
  std::vector<int64_t> first(rank, 0), step(rank, 1);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = normalize_axis(axes[k], rank);
    if (a < 0 || a >= static_cast<int64_t>(rank) || steps[k] == 0) return;
    const int64_t dim = data.shape[a];
    int64_t s = starts[k] < 0 ? starts[k] + dim : starts[k];
    s = steps[k] > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    first[a] = s;
    step[a] = steps[k];
  }
  const auto source = gather_map(c.out.shape, strides_of(data.shape),
                                 [&](size_t a, int64_t i) { return first[a] + i * step[a]; });
  store_gathered(c.out, data, source);
}

void expand(const EvalContext& c) {
  if (!c.known(0) || !broadcastable(*c.in[0], c.out)) return;
  store_gathered(c.out, *c.in[0], broadcast_map(c.in[0]->shape, c.out.shape));
}

void tile(const EvalContext& c) {
  if (!c.known(0)) return;
  const Value& x = *c.in[0];
  if (x.shape.size() != c.out.shape.size()) return;
  const auto source = gather_map(c.out.shape, strides_of(x.shape), [&](size_t a, int64_t i) { return i % x.shape[a]; });
  store_gathered(c.out, x, source);
}

// Transpose: output axis a is input axis perm[a]; no perm reverses the axes.
void transpose(const EvalContext& c) {
  if (!c.known(0)) return;
  const Value& x = *c.in[0];
  const size_t rank = x.shape.size();
  std::vector<int64_t> perm = c.attr_ints("perm").value_or(std::vector<int64_t>{});
  if (perm.empty())
    for (size_t a = 0; a < rank; ++a) perm.push_back(static_cast<int64_t>(rank - 1 - a));
  if (perm.size() != rank || c.out.shape.size() != rank) return;
  const auto in_strides = strides_of(x.shape);
  std::vector<uint64_t> strides(rank);
  for (size_t a = 0; a < rank; ++a) {
    if (perm[a] < 0 || perm[a] >= static_cast<int64_t>(rank)) return;
    strides[a] = in_strides[perm[a]];
  }
  store_gathered(c.out, x, gather_map(c.out.shape, strides, [](size_t, int64_t i) { return i; }));
}

// ConstantOfShape: every element is the one-element `value` tensor's, float32 0 without it.
void constant_of_shape(const EvalContext& c) {
  double fill = 0;
  if (const auto* a = find_attribute(c.node, "value"); a && a->has_t()) {
    const Value v = value_from_tensor(a->t(), "the value of ConstantOfShape");
    if (!v.known() || v.elements() != 1) return;
    fill = real_at(v, 0);
    if (v.ints) {
      store_ints(c.out, std::vector<int64_t>(c.out.elements(), (*v.ints)[0]));
      return;
    }
  }
  store_reals(c.out, std::vector<double>(c.out.elements(), fill));
}

// Range: start + i * delta for the inferred element count.
void range(const EvalContext& c) {
  const Inputs& in = c.in;
  if (!c.known(0) || !c.known(1) || !c.known(2)) return;
  const uint64_t n = c.out.elements();
  if (in[0]->ints && in[2]->ints) {
    std::vector<int64_t> r(n);
    for (size_t i = 0; i < n; ++i) {
      const auto x = checked_int(static_cast<__int128>((*in[0]->ints)[0]) + static_cast<__int128>(i) * (*in[2]->ints)[0]);
      if (!x) return;
      r[i] = *x;
    }
    store_ints(c.out, std::move(r));
  } else {
    std::vector<double> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = real_at(*in[0], 0) + static_cast<double>(i) * real_at(*in[2], 0);
    store_reals(c.out, r);
  }
}

}  // namespace

void register_tensor_values(EvalTable& table) {
  auto& t = table[""];
  t["Shape"] = shape_of;
  t["Size"] = size_of;
  for (const char* op : {"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Dropout"}) t[op] = same_elements;
  t["Cast"] = cast_values;
  t["CastLike"] = cast_values;
  t["Gather"] = gather;
  t["Concat"] = concat;
  t["Slice"] = slice;
  t["Expand"] = expand;
  t["Tile"] = tile;
  t["Transpose"] = transpose;
  t["ConstantOfShape"] = constant_of_shape;
  t["Range"] = range;
}

}  // namespace memplan::shape::values
