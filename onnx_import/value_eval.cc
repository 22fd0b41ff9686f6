#include "onnx_import/value_eval.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan::shape {

bool is_integer_like(DType t) {
  switch (t) {
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64:
    case DType::UInt8: case DType::UInt16: case DType::UInt32: case DType::UInt64: case DType::Bool:
      return true;
    default:
      return false;
  }
}

bool is_real(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}

uint64_t Value::elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::optional<uint64_t> bytes_of(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  if (n > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  const int bits = dtype_bits(dtype);
  if (bits % 8 != 0) return n / 2 + n % 2;
  uint64_t bytes;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(bits / 8), &bytes)) return std::nullopt;
  return bytes;
}

uint64_t checked_elements(const std::vector<int64_t>& shape, const std::string& what) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw InputError(what + " has a negative dimension (" + std::to_string(d) + ")");
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > static_cast<uint64_t>(INT64_MAX))
      throw ShapeOverflow("the element count of " + what + " overflows 64 bits");
  }
  return n;
}

uint64_t checked_bytes(DType dtype, const std::vector<int64_t>& shape, const std::string& what) {
  const uint64_t n = checked_elements(shape, what);
  const int bits = dtype_bits(dtype);
  if (bits % 8 != 0) return n / 2 + n % 2;  // 4-bit types pack two per byte (onnx.proto, INT4/UINT4)
  uint64_t bytes;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(bits / 8), &bytes))
    throw ShapeOverflow("the byte size of " + what + " overflows 64 bits");
  return bytes;
}

namespace {

// ---------------------------------------------------------------------------------------------------
// Decoding tensor payloads (onnx.proto: raw_data is little-endian; typed fields per data_type).

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float magnitude;
  if (exp == 0) magnitude = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) magnitude = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else magnitude = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -magnitude : magnitude;
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T>
T read_le(const std::string& raw, size_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));  // hosts we build for are little-endian
  return v;
}

// Decodes raw_data; false when its size does not match the element count.
bool decode_raw(const onnx::TensorProto& t, DType dtype, size_t n, Value& v) {
  const std::string& raw = t.raw_data();
  const int bits = dtype_bits(dtype);
  if (bits % 8 != 0 || raw.size() != n * static_cast<size_t>(bits / 8)) return false;
  if (is_real(dtype)) {
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) {
      switch (dtype) {
        case DType::Float32: out[i] = read_le<float>(raw, i); break;
        case DType::Float64: out[i] = read_le<double>(raw, i); break;
        case DType::Float16: out[i] = half_to_float(read_le<uint16_t>(raw, i)); break;
        default: out[i] = bfloat16_to_float(read_le<uint16_t>(raw, i)); break;
      }
    }
    v.reals = std::move(out);
    return true;
  }
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::Int8: out[i] = read_le<int8_t>(raw, i); break;
      case DType::UInt8: case DType::Bool: out[i] = read_le<uint8_t>(raw, i); break;
      case DType::Int16: out[i] = read_le<int16_t>(raw, i); break;
      case DType::UInt16: out[i] = read_le<uint16_t>(raw, i); break;
      case DType::Int32: out[i] = read_le<int32_t>(raw, i); break;
      case DType::UInt32: out[i] = read_le<uint32_t>(raw, i); break;
      case DType::Int64: out[i] = read_le<int64_t>(raw, i); break;
      default: out[i] = static_cast<int64_t>(read_le<uint64_t>(raw, i)); break;
    }
  }
  v.ints = std::move(out);
  return true;
}

// Decodes the typed repeated fields; false when their length does not match the element count.
bool decode_typed(const onnx::TensorProto& t, DType dtype, size_t n, Value& v) {
  switch (dtype) {
    case DType::Float32:
      if (static_cast<size_t>(t.float_data_size()) != n) return false;
      v.reals = std::vector<double>(t.float_data().begin(), t.float_data().end());
      return true;
    case DType::Float64:
      if (static_cast<size_t>(t.double_data_size()) != n) return false;
      v.reals = std::vector<double>(t.double_data().begin(), t.double_data().end());
      return true;
    case DType::Float16: case DType::BFloat16: {
      if (static_cast<size_t>(t.int32_data_size()) != n) return false;
      std::vector<double> out(n);
      for (size_t i = 0; i < n; ++i) {
        const auto bits = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
        out[i] = dtype == DType::Float16 ? half_to_float(bits) : bfloat16_to_float(bits);
      }
      v.reals = std::move(out);
      return true;
    }
    case DType::Int64:
      if (static_cast<size_t>(t.int64_data_size()) != n) return false;
      v.ints = std::vector<int64_t>(t.int64_data().begin(), t.int64_data().end());
      return true;
    case DType::UInt32: case DType::UInt64:
      if (static_cast<size_t>(t.uint64_data_size()) != n) return false;
      v.ints = std::vector<int64_t>(t.uint64_data().begin(), t.uint64_data().end());
      return true;
    default:  // int8/16/32, uint8/16, bool: int32_data
      if (static_cast<size_t>(t.int32_data_size()) != n) return false;
      v.ints = std::vector<int64_t>(t.int32_data().begin(), t.int32_data().end());
      return true;
  }
}

}  // namespace

Value value_from_tensor(const onnx::TensorProto& t, const std::string& what) {
  Value v;
  const auto dtype = dtype_from_onnx(t.data_type());
  if (!dtype) throw InputError(what + " has unknown data type " + std::to_string(t.data_type()));
  v.dtype = *dtype;
  v.shape.assign(t.dims().begin(), t.dims().end());
  const uint64_t n = checked_elements(v.shape, what);
  checked_bytes(v.dtype, v.shape, what);
  const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  if (external || n > kMaxEvalElements || !(is_integer_like(v.dtype) || is_real(v.dtype))) return v;
  const bool ok = t.has_raw_data() ? decode_raw(t, v.dtype, n, v) : decode_typed(t, v.dtype, n, v);
  if (!ok) v.ints.reset(), v.reals.reset();  // malformed payload: contents unknown, shape still from dims
  return v;
}

int64_t int_at(const Value& v, size_t i) {
  if (v.ints) return (*v.ints)[i];
  const double d = (*v.reals)[i];
  if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return d < 0 ? INT64_MIN : INT64_MAX;
  return static_cast<int64_t>(d);
}

double real_at(const Value& v, size_t i) { return v.ints ? static_cast<double>((*v.ints)[i]) : (*v.reals)[i]; }

namespace {

// ---------------------------------------------------------------------------------------------------
// Helpers for the evaluators.

using Inputs = std::vector<const Value*>;

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t attr_int(const onnx::NodeProto& node, const std::string& name, int64_t def) {
  const auto* a = find_attr(node, name);
  return a ? a->i() : def;
}

std::optional<std::vector<int64_t>> attr_ints(const onnx::NodeProto& node, const std::string& name) {
  const auto* a = find_attr(node, name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

bool known(const Inputs& in, size_t i) { return i < in.size() && in[i] && in[i]->known(); }
bool present(const Inputs& in, size_t i) { return i < in.size() && in[i]; }

std::vector<int64_t> as_ints(const Value& v) {
  std::vector<int64_t> out(v.elements());
  for (size_t i = 0; i < out.size(); ++i) out[i] = int_at(v, i);
  return out;
}

// Rounds to the precision the dtype stores, so float32 shape arithmetic matches the runtime's.
double round_to(DType t, double x) {
  if (t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16) return static_cast<double>(static_cast<float>(x));
  return x;
}

// Stores computed elements into `out` in the representation its dtype asks for.
void store_reals(Value& out, const std::vector<double>& xs) {
  if (is_real(out.dtype)) {
    std::vector<double> r(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) r[i] = round_to(out.dtype, xs[i]);
    out.reals = std::move(r);
  } else if (is_integer_like(out.dtype)) {
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
  if (is_integer_like(out.dtype)) {
    if (out.dtype == DType::Bool)
      for (auto& x : xs) x = x != 0;
    out.ints = std::move(xs);
  } else if (is_real(out.dtype)) {
    std::vector<double> r(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) r[i] = round_to(out.dtype, static_cast<double>(xs[i]));
    out.reals = std::move(r);
  }
}

// Copies (or converts) input contents into `out` unchanged in order: Identity, Reshape, Squeeze, Cast...
void store_same(Value& out, const Value& in) {
  if (in.elements() != out.elements()) return;
  if (in.ints) store_ints(out, *in.ints);
  else if (in.reals) store_reals(out, *in.reals);
}

std::vector<uint64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<uint64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * static_cast<uint64_t>(shape[i]);
  return s;
}

// For each element of `out_shape`, the flat index of the element of `in_shape` that numpy broadcasting reads.
std::vector<size_t> broadcast_map(const std::vector<int64_t>& in_shape, const std::vector<int64_t>& out_shape) {
  uint64_t n = 1;
  for (int64_t d : out_shape) n *= static_cast<uint64_t>(d);
  std::vector<size_t> map(n, 0);
  if (in_shape.size() > out_shape.size()) return {};
  const size_t offset = out_shape.size() - in_shape.size();
  const auto in_strides = strides_of(in_shape);
  std::vector<int64_t> coord(out_shape.size(), 0);
  for (uint64_t flat = 0; flat < n; ++flat) {
    size_t idx = 0;
    for (size_t a = 0; a < in_shape.size(); ++a) {
      const int64_t c = in_shape[a] == 1 ? 0 : coord[offset + a];
      idx += static_cast<size_t>(c) * in_strides[a];
    }
    map[flat] = idx;
    for (size_t a = out_shape.size(); a-- > 0;) {
      if (++coord[a] < out_shape[a]) break;
      coord[a] = 0;
    }
  }
  return map;
}

bool broadcastable(const Value& in, const Value& out) {
  if (in.shape.size() > out.shape.size()) return false;
  const size_t off = out.shape.size() - in.shape.size();
  for (size_t a = 0; a < in.shape.size(); ++a)
    if (in.shape[a] != 1 && in.shape[a] != out.shape[off + a]) return false;
  return true;
}

int64_t normalize_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// ---------------------------------------------------------------------------------------------------
// Element-wise ops with numpy broadcasting.

using IntFn = std::function<std::optional<int64_t>(int64_t, int64_t)>;
using RealFn = std::function<double(double, double)>;

// Evaluates a binary op: in integer arithmetic when both inputs are integers, else in double.
void eval_binary(const Inputs& in, Value& out, const IntFn& int_fn, const RealFn& real_fn) {
  if (!known(in, 0) || !known(in, 1) || !broadcastable(*in[0], out) || !broadcastable(*in[1], out)) return;
  const auto ma = broadcast_map(in[0]->shape, out.shape), mb = broadcast_map(in[1]->shape, out.shape);
  if (in[0]->ints && in[1]->ints && int_fn) {
    std::vector<int64_t> r(ma.size());
    for (size_t i = 0; i < r.size(); ++i) {
      const auto x = int_fn((*in[0]->ints)[ma[i]], (*in[1]->ints)[mb[i]]);
      if (!x) return;  // division by zero and the like: unknown
      r[i] = *x;
    }
    store_ints(out, std::move(r));
  } else {
    std::vector<double> r(ma.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = real_fn(real_at(*in[0], ma[i]), real_at(*in[1], mb[i]));
    store_reals(out, r);
  }
}

std::optional<int64_t> checked_int(__int128 x) {
  if (x > INT64_MAX || x < INT64_MIN) return std::nullopt;
  return static_cast<int64_t>(x);
}

void eval_arith(const std::string& op, const onnx::NodeProto& node, const Inputs& in, Value& out) {
  if (op == "Add") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return checked_int(static_cast<__int128>(a) + b); },
                [](double a, double b) { return a + b; });
  } else if (op == "Sub") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return checked_int(static_cast<__int128>(a) - b); },
                [](double a, double b) { return a - b; });
  } else if (op == "Mul") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return checked_int(static_cast<__int128>(a) * b); },
                [](double a, double b) { return a * b; });
  } else if (op == "Div") {
    // Integer Div truncates toward zero, as ONNX Runtime's kernel (C++ '/') does.
    eval_binary(in, out,
                [](int64_t a, int64_t b) -> std::optional<int64_t> {
                  if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
                  return a / b;
                },
                [](double a, double b) { return a / b; });
  } else if (op == "Mod") {
    const bool fmod = attr_int(node, "fmod", 0) != 0;
    eval_binary(in, out,
                [fmod](int64_t a, int64_t b) -> std::optional<int64_t> {
                  if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
                  int64_t r = a % b;
                  if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;  // fmod=0: the sign of the divisor
                  return r;
                },
                [fmod](double a, double b) {
                  double r = std::fmod(a, b);
                  if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
                  return r;
                });
  } else if (op == "Pow") {
    eval_binary(in, out, nullptr, [](double a, double b) { return std::pow(a, b); });
  } else if (op == "Equal") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return std::optional<int64_t>(a == b); },
                [](double a, double b) { return double(a == b); });
  } else if (op == "Less") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return std::optional<int64_t>(a < b); },
                [](double a, double b) { return double(a < b); });
  } else if (op == "LessOrEqual") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return std::optional<int64_t>(a <= b); },
                [](double a, double b) { return double(a <= b); });
  } else if (op == "Greater") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return std::optional<int64_t>(a > b); },
                [](double a, double b) { return double(a > b); });
  } else if (op == "GreaterOrEqual") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return std::optional<int64_t>(a >= b); },
                [](double a, double b) { return double(a >= b); });
  } else if (op == "And") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return std::optional<int64_t>(a && b); },
                [](double a, double b) { return double(a != 0 && b != 0); });
  } else if (op == "Or") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return std::optional<int64_t>(a || b); },
                [](double a, double b) { return double(a != 0 || b != 0); });
  } else if (op == "Xor") {
    eval_binary(in, out, [](int64_t a, int64_t b) { return std::optional<int64_t>((a != 0) != (b != 0)); },
                [](double a, double b) { return double((a != 0) != (b != 0)); });
  }
}

// Max, Min, Sum, Mean: variadic with broadcasting.
void eval_variadic(const std::string& op, const Inputs& in, Value& out) {
  if (in.empty()) return;
  for (size_t i = 0; i < in.size(); ++i)
    if (!known(in, i) || !broadcastable(*in[i], out)) return;
  const uint64_t n = out.elements();
  const bool ints = std::all_of(in.begin(), in.end(), [](const Value* v) { return v->ints.has_value(); });
  std::vector<std::vector<size_t>> maps;
  for (const Value* v : in) maps.push_back(broadcast_map(v->shape, out.shape));
  if (ints && op != "Mean") {
    std::vector<int64_t> r(n);
    for (size_t i = 0; i < n; ++i) {
      __int128 acc = (*in[0]->ints)[maps[0][i]];
      for (size_t k = 1; k < in.size(); ++k) {
        const int64_t x = (*in[k]->ints)[maps[k][i]];
        acc = op == "Max" ? std::max<__int128>(acc, x) : op == "Min" ? std::min<__int128>(acc, x) : acc + x;
      }
      const auto c = checked_int(acc);
      if (!c) return;
      r[i] = *c;
    }
    store_ints(out, std::move(r));
    return;
  }
  std::vector<double> r(n);
  for (size_t i = 0; i < n; ++i) {
    double acc = real_at(*in[0], maps[0][i]);
    for (size_t k = 1; k < in.size(); ++k) {
      const double x = real_at(*in[k], maps[k][i]);
      acc = op == "Max" ? std::max(acc, x) : op == "Min" ? std::min(acc, x) : acc + x;
    }
    r[i] = op == "Mean" ? acc / static_cast<double>(in.size()) : acc;
  }
  store_reals(out, r);
}

void eval_unary(const std::string& op, const Inputs& in, Value& out) {
  if (!known(in, 0) || in[0]->elements() != out.elements()) return;
  const Value& x = *in[0];
  if (x.ints && (op == "Neg" || op == "Abs" || op == "Not" || op == "Sign" || op == "Floor" || op == "Ceil" ||
                 op == "Round" || op == "Relu")) {
    std::vector<int64_t> r(x.ints->size());
    for (size_t i = 0; i < r.size(); ++i) {
      const int64_t v = (*x.ints)[i];
      if ((op == "Neg" || op == "Abs") && v == INT64_MIN) return;
      r[i] = op == "Neg" ? -v : op == "Abs" ? std::abs(v) : op == "Not" ? !v : op == "Sign" ? (v > 0) - (v < 0)
             : op == "Relu" ? std::max<int64_t>(v, 0) : v;
    }
    store_ints(out, std::move(r));
    return;
  }
  std::vector<double> r(x.elements());
  for (size_t i = 0; i < r.size(); ++i) {
    const double v = real_at(x, i);
    if (op == "Neg") r[i] = -v;
    else if (op == "Abs") r[i] = std::fabs(v);
    else if (op == "Not") r[i] = v == 0;
    else if (op == "Sign") r[i] = (v > 0) - (v < 0);
    else if (op == "Floor") r[i] = std::floor(v);
    else if (op == "Ceil") r[i] = std::ceil(v);
    else if (op == "Round") r[i] = std::nearbyint(v);  // ONNX Round: half to even (the default FE_TONEAREST)
    else if (op == "Relu") r[i] = std::max(v, 0.0);
    else if (op == "Sqrt") r[i] = std::sqrt(v);
    else if (op == "Reciprocal") r[i] = 1.0 / v;
    else if (op == "Exp") r[i] = std::exp(v);
    else if (op == "Log") r[i] = std::log(v);
    else return;
  }
  store_reals(out, r);
}

void eval_where(const Inputs& in, Value& out) {
  for (size_t i = 0; i < 3; ++i)
    if (!known(in, i) || !broadcastable(*in[i], out)) return;
  const auto mc = broadcast_map(in[0]->shape, out.shape), mx = broadcast_map(in[1]->shape, out.shape),
             my = broadcast_map(in[2]->shape, out.shape);
  if (in[1]->ints && in[2]->ints) {
    std::vector<int64_t> r(mc.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = int_at(*in[0], mc[i]) ? (*in[1]->ints)[mx[i]] : (*in[2]->ints)[my[i]];
    store_ints(out, std::move(r));
  } else {
    std::vector<double> r(mc.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = int_at(*in[0], mc[i]) ? real_at(*in[1], mx[i]) : real_at(*in[2], my[i]);
    store_reals(out, r);
  }
}

// Copies elements picked by `source` (flat input index per output element) from `in` into `out`.
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

void eval_gather(const onnx::NodeProto& node, const Inputs& in, Value& out) {
  if (!known(in, 0) || !known(in, 1)) return;
  const Value& data = *in[0];
  const auto& idx = *in[1];
  const int64_t axis = normalize_axis(attr_int(node, "axis", 0), data.shape.size());
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
  if (source.size() == out.elements()) store_gathered(out, data, source);
}

void eval_concat(const onnx::NodeProto& node, const Inputs& in, Value& out) {
  if (in.empty()) return;
  for (size_t i = 0; i < in.size(); ++i)
    if (!known(in, i) || in[i]->shape.size() != out.shape.size()) return;
  const int64_t axis = normalize_axis(attr_int(node, "axis", 0), out.shape.size());
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

// Maps output coordinates of a strided slice back to input flat indices.
void eval_slice(const onnx::NodeProto& node, int opset, const Inputs& in, Value& out) {
  if (!known(in, 0)) return;
  const Value& data = *in[0];
  const size_t rank = data.shape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset < 10) {
    starts = attr_ints(node, "starts").value_or(std::vector<int64_t>{});
    ends = attr_ints(node, "ends").value_or(std::vector<int64_t>{});
    axes = attr_ints(node, "axes").value_or(std::vector<int64_t>{});
  } else {
    if (!known(in, 1) || !known(in, 2)) return;
    if (present(in, 3) && !known(in, 3)) return;
    if (present(in, 4) && !known(in, 4)) return;
    starts = as_ints(*in[1]);
    ends = as_ints(*in[2]);
    if (present(in, 3)) axes = as_ints(*in[3]);
    if (present(in, 4)) steps = as_ints(*in[4]);
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
  const auto in_strides = strides_of(data.shape);
  const uint64_t n = out.elements();
  std::vector<size_t> source(n);
  std::vector<int64_t> coord(rank, 0);
  for (uint64_t flat = 0; flat < n; ++flat) {
    size_t idx = 0;
    for (size_t a = 0; a < rank; ++a) idx += static_cast<size_t>(first[a] + coord[a] * step[a]) * in_strides[a];
    source[flat] = idx;
    for (size_t a = rank; a-- > 0;) {
      if (++coord[a] < out.shape[a]) break;
      coord[a] = 0;
    }
  }
  if (out.shape.size() == rank) store_gathered(out, data, source);
}

void eval_broadcast_copy(const Value& in, Value& out) {
  if (!in.known() || !broadcastable(in, out)) return;
  store_gathered(out, in, broadcast_map(in.shape, out.shape));
}

void eval_tile(const Inputs& in, Value& out) {
  if (!known(in, 0)) return;
  const Value& x = *in[0];
  if (x.shape.size() != out.shape.size()) return;
  const auto in_strides = strides_of(x.shape);
  const uint64_t n = out.elements();
  std::vector<size_t> source(n);
  std::vector<int64_t> coord(out.shape.size(), 0);
  for (uint64_t flat = 0; flat < n; ++flat) {
    size_t idx = 0;
    for (size_t a = 0; a < coord.size(); ++a) idx += static_cast<size_t>(coord[a] % x.shape[a]) * in_strides[a];
    source[flat] = idx;
    for (size_t a = coord.size(); a-- > 0;) {
      if (++coord[a] < out.shape[a]) break;
      coord[a] = 0;
    }
  }
  store_gathered(out, x, source);
}

void eval_transpose(const onnx::NodeProto& node, const Inputs& in, Value& out) {
  if (!known(in, 0)) return;
  const Value& x = *in[0];
  const size_t rank = x.shape.size();
  std::vector<int64_t> perm = attr_ints(node, "perm").value_or(std::vector<int64_t>{});
  if (perm.empty())
    for (size_t a = 0; a < rank; ++a) perm.push_back(static_cast<int64_t>(rank - 1 - a));
  if (perm.size() != rank || out.shape.size() != rank) return;
  const auto in_strides = strides_of(x.shape);
  const uint64_t n = out.elements();
  std::vector<size_t> source(n);
  std::vector<int64_t> coord(rank, 0);
  for (uint64_t flat = 0; flat < n; ++flat) {
    size_t idx = 0;
    for (size_t a = 0; a < rank; ++a) idx += static_cast<size_t>(coord[a]) * in_strides[perm[a]];
    source[flat] = idx;
    for (size_t a = rank; a-- > 0;) {
      if (++coord[a] < out.shape[a]) break;
      coord[a] = 0;
    }
  }
  store_gathered(out, x, source);
}

void eval_constant_of_shape(const onnx::NodeProto& node, Value& out) {
  double fill = 0;
  if (const auto* a = find_attr(node, "value"); a && a->has_t()) {
    const Value v = value_from_tensor(a->t(), "the value of ConstantOfShape");
    if (!v.known() || v.elements() != 1) return;
    fill = real_at(v, 0);
    if (v.ints) {
      store_ints(out, std::vector<int64_t>(out.elements(), (*v.ints)[0]));
      return;
    }
  }
  store_reals(out, std::vector<double>(out.elements(), fill));
}

void eval_range(const Inputs& in, Value& out) {
  if (!known(in, 0) || !known(in, 1) || !known(in, 2)) return;
  const uint64_t n = out.elements();
  if (in[0]->ints && in[2]->ints) {
    std::vector<int64_t> r(n);
    for (size_t i = 0; i < n; ++i) {
      const auto x = checked_int(static_cast<__int128>((*in[0]->ints)[0]) + static_cast<__int128>(i) * (*in[2]->ints)[0]);
      if (!x) return;
      r[i] = *x;
    }
    store_ints(out, std::move(r));
  } else {
    std::vector<double> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = real_at(*in[0], 0) + static_cast<double>(i) * real_at(*in[2], 0);
    store_reals(out, r);
  }
}

void eval_reduce(const std::string& op, const onnx::NodeProto& node, int opset, const Inputs& in, Value& out) {
  if (!known(in, 0)) return;
  const Value& x = *in[0];
  const size_t rank = x.shape.size();
  // Axes moved from attribute to input in opset 13 for ReduceSum and 18 for the others.
  const bool axes_input = op == "ReduceSum" ? opset >= 13 : opset >= 18;
  std::vector<int64_t> axes;
  if (axes_input) {
    if (present(in, 1)) {
      if (!known(in, 1)) return;
      axes = as_ints(*in[1]);
    }
  } else {
    axes = attr_ints(node, "axes").value_or(std::vector<int64_t>{});
  }
  if (axes.empty() && attr_int(node, "noop_with_empty_axes", 0)) {
    store_same(out, x);
    return;
  }
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) {
    a = normalize_axis(a, rank);
    if (a < 0 || a >= static_cast<int64_t>(rank)) return;
    reduced[a] = true;
  }
  // Output flat index of every input element: its coordinate with reduced axes dropped.
  std::vector<int64_t> kept_shape;
  for (size_t a = 0; a < rank; ++a)
    if (!reduced[a]) kept_shape.push_back(x.shape[a]);
  const auto kept_strides = strides_of(kept_shape);
  uint64_t m = 1;
  for (int64_t d : kept_shape) m *= d;
  if (m != out.elements()) return;
  std::vector<double> acc(m, op == "ReduceProd" ? 1.0 : 0.0);
  std::vector<bool> seen(m, false);
  std::vector<int64_t> coord(rank, 0);
  const uint64_t n = x.elements();
  for (uint64_t flat = 0; flat < n; ++flat) {
    size_t o = 0, k = 0;
    for (size_t a = 0; a < rank; ++a)
      if (!reduced[a]) o += static_cast<size_t>(coord[a]) * kept_strides[k++];
    const double v = real_at(x, flat);
    if (op == "ReduceSum" || op == "ReduceMean") acc[o] += v;
    else if (op == "ReduceProd") acc[o] *= v;
    else if (op == "ReduceMax") acc[o] = seen[o] ? std::max(acc[o], v) : v;
    else if (op == "ReduceMin") acc[o] = seen[o] ? std::min(acc[o], v) : v;
    seen[o] = true;
    for (size_t a = rank; a-- > 0;) {
      if (++coord[a] < x.shape[a]) break;
      coord[a] = 0;
    }
  }
  if (op == "ReduceMean") {
    const double count = m ? static_cast<double>(n) / static_cast<double>(m) : 1;
    for (auto& v : acc) v /= count;
  }
  // Integer reductions stay exact while |values| < 2^53, which shape arithmetic never leaves.
  for (double v : acc)
    if (std::fabs(v) > 9.0e15 && is_integer_like(out.dtype)) return;
  store_reals(out, acc);
}

void eval_cast(const Inputs& in, Value& out) {
  if (!known(in, 0)) return;
  const Value& x = *in[0];
  if (x.elements() != out.elements()) return;
  if (out.dtype == DType::Bool) {
    std::vector<int64_t> r(x.elements());
    for (size_t i = 0; i < r.size(); ++i) r[i] = real_at(x, i) != 0;
    store_ints(out, std::move(r));
  } else {
    store_same(out, x);
  }
}

}  // namespace

void evaluate_values(const onnx::NodeProto& node, int opset, const Inputs& in, std::vector<Value>& outputs) {
  if (outputs.empty()) return;
  Value& out = outputs[0];
  if (out.elements() > kMaxEvalElements || !(is_integer_like(out.dtype) || is_real(out.dtype)) || out.known()) return;
  const std::string& op = node.op_type();
  if (!node.domain().empty() && node.domain() != "ai.onnx") return;
  if (op == "Shape") {
    if (!present(in, 0)) return;
    const auto& s = in[0]->shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    int64_t start = attr_int(node, "start", 0), end = attr_int(node, "end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, 0, rank);
    std::vector<int64_t> r(s.begin() + start, s.begin() + std::max(start, end));
    if (r.size() == out.elements()) store_ints(out, std::move(r));
  } else if (op == "Size") {
    if (present(in, 0)) store_ints(out, {static_cast<int64_t>(in[0]->elements())});
  } else if (op == "Identity" || op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten" ||
             op == "Dropout") {
    if (known(in, 0)) store_same(out, *in[0]);
  } else if (op == "Cast" || op == "CastLike") {
    eval_cast(in, out);
  } else if (op == "Gather") {
    eval_gather(node, in, out);
  } else if (op == "Concat") {
    eval_concat(node, in, out);
  } else if (op == "Slice") {
    eval_slice(node, opset, in, out);
  } else if (op == "Expand") {
    if (known(in, 0)) eval_broadcast_copy(*in[0], out);
  } else if (op == "Tile") {
    eval_tile(in, out);
  } else if (op == "Transpose") {
    eval_transpose(node, in, out);
  } else if (op == "ConstantOfShape") {
    eval_constant_of_shape(node, out);
  } else if (op == "Range") {
    eval_range(in, out);
  } else if (op == "Where") {
    eval_where(in, out);
  } else if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") {
    eval_variadic(op, in, out);
  } else if (op == "ReduceSum" || op == "ReduceProd" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceMean") {
    eval_reduce(op, node, opset, in, out);
  } else if (op == "Neg" || op == "Abs" || op == "Not" || op == "Sign" || op == "Floor" || op == "Ceil" ||
             op == "Round" || op == "Relu" || op == "Sqrt" || op == "Reciprocal" || op == "Exp" || op == "Log") {
    eval_unary(op, in, out);
  } else {
    eval_arith(op, node, in, out);
  }
}

}  // namespace memplan::shape
