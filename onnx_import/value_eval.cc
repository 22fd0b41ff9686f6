#include "onnx_import/value_eval.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "onnx_import/values/values.h"

namespace memplan::shape {

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
  return dtype_bytes(dtype, n);
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
  const std::optional<uint64_t> bytes = dtype_bytes(dtype, checked_elements(shape, what));
  if (!bytes) throw ShapeOverflow("the byte size of " + what + " overflows 64 bits");
  return *bytes;
}

uint64_t checked_value_bytes(const Value& v, const std::string& what) {
  if (v.is_tensor()) return checked_bytes(v.dtype, v.shape, what);
  uint64_t sum = 0;
  for (const Value& item : v.items)
    if (__builtin_add_overflow(sum, checked_value_bytes(item, what), &sum))
      throw ShapeOverflow("the byte size of " + what + " overflows 64 bits");
  return sum;
}

std::vector<std::vector<int64_t>> Value::tensor_shapes() const {
  if (is_tensor()) return {shape};
  std::vector<std::vector<int64_t>> out;
  for (const Value& item : items) {
    auto inner = item.tensor_shapes();
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

std::string kind_text(const Value& v) {
  switch (v.kind) {
    case ValueType::Sequence: return "a sequence";
    case ValueType::Optional: return "an optional";
    default: return "a tensor";
  }
}

bool same_type(const Value& a, const Value& b) {
  if (a.kind != b.kind || a.dtype != b.dtype || a.shape != b.shape || a.items.size() != b.items.size() ||
      a.optional_of_sequence != b.optional_of_sequence)
    return false;
  for (size_t i = 0; i < a.items.size(); ++i)
    if (!same_type(a.items[i], b.items[i])) return false;
  return true;
}

Value type_only(const Value& v) {
  Value s;
  s.dtype = v.dtype;
  s.shape = v.shape;
  s.kind = v.kind;
  s.optional_of_sequence = v.optional_of_sequence;
  for (const Value& item : v.items) s.items.push_back(type_only(item));
  return s;
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
  if (external || n > kMaxEvalElements || !(dtype_is_integer(v.dtype) || is_real(v.dtype))) return v;
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

void evaluate_values(const onnx::NodeProto& node, int opset, const std::vector<const Value*>& inputs,
                     std::vector<Value>& outputs) {
  if (outputs.empty()) return;
  for (const Value* in : inputs)
    if (in && !in->is_tensor()) return;  // the evaluators read tensors
  Value& out = outputs[0];
  if (!out.is_tensor()) return;
  if (out.elements() > kMaxEvalElements || !(dtype_is_integer(out.dtype) || is_real(out.dtype)) || out.known()) return;
  const auto& table = values::value_table();
  const auto domain = table.find(normalize_domain(node.domain()));
  if (domain == table.end()) return;
  const auto evaluator = domain->second.find(node.op_type());
  if (evaluator == domain->second.end()) return;
  evaluator->second(values::EvalContext{node, opset, inputs, out});
}

}  // namespace memplan::shape
