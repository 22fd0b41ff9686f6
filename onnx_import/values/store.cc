// The value-evaluator table and the helpers every evaluator shares.
#include <onnx/onnx_pb.h>

#include <cmath>

#include "onnx_import/values/values.h"

namespace memplan::shape {

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, std::string_view name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

namespace values {

const EvalTable& value_table() {
  static const EvalTable table = [] {
    EvalTable t;
    register_arith_values(t);
    register_tensor_values(t);
    register_reduce_values(t);
    return t;
  }();
  return table;
}

int64_t EvalContext::attr_int(std::string_view name, int64_t def) const {
  const auto* a = find_attribute(node, name);
  return a ? a->i() : def;
}

std::optional<std::vector<int64_t>> EvalContext::attr_ints(std::string_view name) const {
  const auto* a = find_attribute(node, name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<int64_t> as_ints(const Value& v) {
  std::vector<int64_t> out(v.elements());
  for (size_t i = 0; i < out.size(); ++i) out[i] = int_at(v, i);
  return out;
}

int64_t normalize_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

std::optional<int64_t> checked_int(__int128 x) {
  if (x > INT64_MAX || x < INT64_MIN) return std::nullopt;
  return static_cast<int64_t>(x);
}

namespace {

// Rounds to the precision the dtype stores, so float32 shape arithmetic matches the runtime's.
double round_to(DType t, double x) {
  if (t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16) return static_cast<double>(static_cast<float>(x));
  return x;
}

}  // namespace

void store_reals(Value& out, const std::vector<double>& xs) {
  if (is_real(out.dtype)) {
    std::vector<double> r(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) r[i] = round_to(out.dtype, xs[i]);
    out.reals = std::move(r);
  } else if (dtype_is_integer(out.dtype)) {
    std::vector<int64_t> r(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      const double d = xs[i];
      if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return;  // not representable: leave unknown
      r[i] = out.dtype == DType::Bool ? (d != 0) : static_cast<int64_t>(d);
    }
    out.ints = std::move(r);
  }
}

void store_ints(Value& out, std::vector<int64_t> xs) {
  if (dtype_is_integer(out.dtype)) {
    if (out.dtype == DType::Bool)
      for (auto& x : xs) x = x != 0;
    out.ints = std::move(xs);
  } else if (is_real(out.dtype)) {
    std::vector<double> r(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) r[i] = round_to(out.dtype, static_cast<double>(xs[i]));
    out.reals = std::move(r);
  }
}

void store_same(Value& out, const Value& in) {
  if (in.elements() != out.elements()) return;
  if (in.ints) store_ints(out, *in.ints);
  else if (in.reals) store_reals(out, *in.reals);
}

void store_gathered(Value& out, const Value& in, const std::vector<size_t>& source) {
  if (in.ints) {
    std::vector<int64_t> r(source.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = (*in.ints)[source[i]];
    store_ints(out, std::move(r));
  } else {
    std::vector<double> r(source.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = (*in.reals)[source[i]];
    store_reals(out, r);
  }
}

std::vector<uint64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<uint64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * static_cast<uint64_t>(shape[i]);
  return s;
}

bool broadcastable(const Value& in, const Value& out) {
  if (in.shape.size() > out.shape.size()) return false;
  const size_t off = out.shape.size() - in.shape.size();
  for (size_t a = 0; a < in.shape.size(); ++a)
    if (in.shape[a] != 1 && in.shape[a] != out.shape[off + a]) return false;
  return true;
}

std::vector<size_t> broadcast_map(const std::vector<int64_t>& in_shape, const std::vector<int64_t>& out_shape) {
  if (in_shape.size() > out_shape.size()) return {};
  // Output axes the input lacks (leading) or has as 1 read the same input element: stride 0.
  const size_t offset = out_shape.size() - in_shape.size();
  const auto in_strides = strides_of(in_shape);
  std::vector<uint64_t> strides(out_shape.size(), 0);
  for (size_t a = 0; a < in_shape.size(); ++a)
    if (in_shape[a] != 1) strides[offset + a] = in_strides[a];
  return gather_map(out_shape, strides, [](size_t, int64_t c) { return c; });
}

}  // namespace values
}  // namespace memplan::shape
