// Evaluators of ReduceSum, ReduceProd, ReduceMax, ReduceMin and ReduceMean (onnx/docs/Operators.md):
// axes as an attribute, or as an input from opset 13 (ReduceSum) and 18 (the others); no axes reduces all
// of them unless noop_with_empty_axes is set.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>

#include "onnx_import/values/values.h"

namespace memplan::shape::values {
namespace {

enum class Reduce { Sum, Prod, Max, Min, Mean };

template <Reduce R>
void reduce_values(const EvalContext& c) {
  if (!c.known(0)) return;
  const Value& x = *c.in[0];
  Value& out = c.out;
  const size_t rank = x.shape.size();
  const bool axes_input = R == Reduce::Sum ? c.opset >= 13 : c.opset >= 18;
  std::vector<int64_t> axes;
  if (axes_input) {
    if (c.present(1)) {
      if (!c.known(1)) return;
      axes = as_ints(*c.in[1]);
    }
  } else {
    axes = c.attr_ints("axes").value_or(std::vector<int64_t>{});
  }
  if (axes.empty() && c.attr_int("noop_with_empty_axes", 0)) {
    store_same(out, x);
    return;
  }
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) {
    a = normalize_axis(a, rank);
    if (a < 0 || a >= static_cast<int64_t>(rank)) return;
    reduced[a] = true;
  }
  // The output flat index of every input element: its coordinate with the reduced axes dropped, that is
  // stride 0 on reduced axes and the kept shape's strides on the others.
  std::vector<int64_t> kept_shape;
  for (size_t a = 0; a < rank; ++a)
    if (!reduced[a]) kept_shape.push_back(x.shape[a]);
  const auto kept_strides = strides_of(kept_shape);
  std::vector<uint64_t> strides(rank, 0);
  for (size_t a = 0, k = 0; a < rank; ++a)
    if (!reduced[a]) strides[a] = kept_strides[k++];
  uint64_t m = 1;
  for (int64_t d : kept_shape) m *= d;
  if (m != out.elements()) return;
  const auto dest = gather_map(x.shape, strides, [](size_t, int64_t i) { return i; });
  std::vector<double> acc(m, R == Reduce::Prod ? 1.0 : 0.0);
  std::vector<bool> seen(m, false);
  for (size_t flat = 0; flat < dest.size(); ++flat) {
    const size_t o = dest[flat];
    const double v = real_at(x, flat);
    if constexpr (R == Reduce::Sum || R == Reduce::Mean) acc[o] += v;
    else if constexpr (R == Reduce::Prod) acc[o] *= v;
    else if constexpr (R == Reduce::Max) acc[o] = seen[o] ? std::max(acc[o], v) : v;
    else acc[o] = seen[o] ? std::min(acc[o], v) : v;
    seen[o] = true;
  }
  if constexpr (R == Reduce::Mean) {
    const double count = m ? static_cast<double>(dest.size()) / static_cast<double>(m) : 1;
    for (auto& v : acc) v /= count;
  }
  // Integer reductions stay exact while |values| < 2^53, which shape arithmetic never leaves.
  for (double v : acc)
    if (std::fabs(v) > 9.0e15 && dtype_is_integer(out.dtype)) return;
  store_reals(out, acc);
}

}  // namespace

void register_reduce_values(EvalTable& table) {
  auto& t = table[""];
  t["ReduceSum"] = reduce_values<Reduce::Sum>;
  t["ReduceProd"] = reduce_values<Reduce::Prod>;
  t["ReduceMax"] = reduce_values<Reduce::Max>;
  t["ReduceMin"] = reduce_values<Reduce::Min>;
  t["ReduceMean"] = reduce_values<Reduce::Mean>;
}

}  // namespace memplan::shape::values
