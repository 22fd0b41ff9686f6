#include "onnx_import/graph.h"

#include <array>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

struct DTypeInfo {
  DType type;
  int32_t onnx;   // TensorProto::DataType (onnx/onnx.proto)
  int bits;
  const char* name;
  bool is_float;
  bool is_integer;
};

// ONNX codes from onnx.proto's TensorProto.DataType enum; FLOAT8* are IR 9, INT4/UINT4 are IR 10.
constexpr std::array<DTypeInfo, 23> kTypes{{
    {DType::Undefined, 0, 0, "undefined", false, false},
    {DType::Float32, 1, 32, "float32", true, false},
    {DType::UInt8, 2, 8, "uint8", false, true},
    {DType::Int8, 3, 8, "int8", false, true},
    {DType::UInt16, 4, 16, "uint16", false, true},
    {DType::Int16, 5, 16, "int16", false, true},
    {DType::Int32, 6, 32, "int32", false, true},
    {DType::Int64, 7, 64, "int64", false, true},
    {DType::String, 8, 0, "string", false, false},
    {DType::Bool, 9, 8, "bool", false, true},
    {DType::Float16, 10, 16, "float16", true, false},
    {DType::Float64, 11, 64, "float64", true, false},
    {DType::UInt32, 12, 32, "uint32", false, true},
    {DType::UInt64, 13, 64, "uint64", false, true},
    {DType::Complex64, 14, 64, "complex64", false, false},
    {DType::Complex128, 15, 128, "complex128", false, false},
    {DType::BFloat16, 16, 16, "bfloat16", true, false},
    {DType::Float8E4M3FN, 17, 8, "float8e4m3fn", true, false},
    {DType::Float8E4M3FNUZ, 18, 8, "float8e4m3fnuz", true, false},
    {DType::Float8E5M2, 19, 8, "float8e5m2", true, false},
    {DType::Float8E5M2FNUZ, 20, 8, "float8e5m2fnuz", true, false},
    {DType::UInt4, 21, 4, "uint4", false, false},
    {DType::Int4, 22, 4, "int4", false, false},
}};

const DTypeInfo& info(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i;
  return kTypes[0];
}

}  // namespace

std::optional<DType> dtype_from_onnx(int32_t code) {
  for (const auto& i : kTypes)
    if (i.onnx == code && i.type != DType::Undefined) return i.type;
  return std::nullopt;
}
int32_t dtype_to_onnx(DType t) { return info(t).onnx; }
std::string_view dtype_name(DType t) { return info(t).name; }
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kTypes)
    if (name == i.name && i.type != DType::Undefined) return i.type;
  return std::nullopt;
}
int dtype_bits(DType t) { return info(t).bits; }
bool dtype_is_float(DType t) { return info(t).is_float; }
bool dtype_is_integer(DType t) { return info(t).is_integer; }

std::optional<uint64_t> dtype_bytes(DType t, uint64_t elements) {
  const int bits = dtype_bits(t);
  if (bits % 8 != 0) return elements / 2 + elements % 2;
  uint64_t bytes;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(bits / 8), &bytes)) return std::nullopt;
  return bytes;
}

std::string_view normalize_domain(std::string_view domain) { return domain == "ai.onnx" ? std::string_view() : domain; }

std::string_view kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::Input: return "input";
    case TensorKind::Weight: return "weight";
    case TensorKind::Constant: return "constant";
    case TensorKind::Activation: return "activation";
    case TensorKind::Output: return "output";
  }
  return "activation";
}

// The messages are built only when a check fails: every stage asks every tensor its size.
uint64_t Tensor::elements() const {
  if (value_type != ValueType::Tensor) {
    uint64_t sum = 0;
    for (const auto& s : element_shapes) {
      uint64_t n = 1;
      for (int64_t d : s) {
        if (d < 0) throw InputError("tensor '" + name + "' has a negative dimension");
        if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
          throw ShapeOverflow("element count of tensor '" + name + "' overflows 64 bits");
      }
      if (__builtin_add_overflow(sum, n, &sum) || sum > static_cast<uint64_t>(INT64_MAX))
        throw ShapeOverflow("element count of tensor '" + name + "' overflows 64 bits");
    }
    return sum;
  }
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw InputError("tensor '" + name + "' has a negative dimension");
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
      throw ShapeOverflow("element count of tensor '" + name + "' overflows 64 bits");
  }
  if (n > static_cast<uint64_t>(INT64_MAX)) throw ShapeOverflow("element count of tensor '" + name + "' overflows 64 bits");
  return n;
}

int64_t Node::int_attribute(const std::string& name, int64_t fallback) const {
  const auto it = attributes.find(name);
  return it == attributes.end() ? fallback : it->second.i;
}

uint64_t Tensor::bytes() const {
  const std::optional<uint64_t> b = dtype_bytes(dtype, elements());
  if (!b) throw ShapeOverflow("byte size of tensor '" + name + "' overflows 64 bits");
  return *b;
}

std::optional<int32_t> Graph::find_tensor(std::string_view name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int32_t>(i);
  return std::nullopt;
}

}  // namespace memplan
