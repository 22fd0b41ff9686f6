// --value NAME=V (InputBinder::bind_value, input_binding.h): a graph input bound by its contents, a scalar or a short
// list, its shape checked against the declaration and any --input, its values checked against the input's type and
// stored as the evaluator keeps them. The other inputs' binding is input_binding.cc's.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "onnx_import/errors.h"
#include "onnx_import/inference/input_binding.h"
#include "onnx_import/inference/walker.h"
#include "onnx_import/values/values.h"

namespace memplan::shape {

// --value NAME=V: the input's shape follows from the value (a scalar, or [n] for a comma list of n), checked
// against the declaration and any --input; its contents are stored as the evaluator keeps them.
Value InputBinder::bind_value(const onnx::ValueInfoProto& vi, const Bindings::InputValue& value,
                              std::map<std::string, int64_t>& symbols) {
  const std::string& name = vi.name();
  const std::string flag = "--value " + name + "=" + value.text;
  const auto& type = vi.type();
  if (!type.has_tensor_type())
    throw InputError(flag + ": graph input '" + name + "' is " + std::string(value_kind(type)) + ", not a tensor");
  const auto dtype = dtype_from_onnx(type.tensor_type().elem_type());
  if (!dtype || !(dtype_is_integer(*dtype) || is_real(*dtype)))
    throw InputError(flag + ": graph input '" + name + "' is " +
                     (dtype ? std::string(dtype_name(*dtype)) : std::string("of an unknown type")) +
                     "; --value binds integer, bool and floating-point inputs");
  const size_t n = value.numbers.size();
  if (n > kMaxEvalElements)
    throw InputError(flag + ": " + std::to_string(n) + " values; --value binds at most " +
                     std::to_string(kMaxEvalElements) + " (a small shape-like tensor)");
  std::vector<int64_t> shape;
  if (auto s = b_.input_shapes.find(name); s != b_.input_shapes.end()) {
    if (s->second.size() > 1)
      throw InputError(flag + ": --input " + name + " gives rank " + std::to_string(s->second.size()) +
                       "; --value binds scalars and 1-D tensors");
    uint64_t count = 1;
    for (int64_t d : s->second) count *= static_cast<uint64_t>(d);
    if (count != n)
      throw InputError(flag + ": " + std::to_string(n) + " value" + (n == 1 ? "" : "s") + ", but --input " + name +
                       " gives a shape of " + std::to_string(count) + " elements");
  } else if (type.tensor_type().has_shape()) {
    const auto& dims = type.tensor_type().shape().dim();
    if (dims.size() > 1)
      throw InputError(flag + ": graph input '" + name + "' has rank " + std::to_string(dims.size()) +
                       "; --value binds scalars and 1-D tensors");
    if (dims.empty() && value.list)
      throw InputError(flag + ": graph input '" + name + "' is a scalar, but " + std::to_string(n) + " values are given");
    if (dims.size() == 1) {
      if (dims[0].has_dim_value() && dims[0].dim_value() != static_cast<int64_t>(n))
        throw InputError(flag + ": graph input '" + name + "' has " + std::to_string(dims[0].dim_value()) +
                         " elements, but " + std::to_string(n) + " value" + (n == 1 ? " is" : "s are") + " given");
      if (dims[0].has_dim_param()) bind_symbol(dims[0].dim_param(), static_cast<int64_t>(n), name, symbols);
      shape.push_back(static_cast<int64_t>(n));
    }
  } else if (value.list) {
    shape.push_back(static_cast<int64_t>(n));
  }
  Value v = b_.input_shapes.count(name) ? bind_shape(vi, symbols) : Value{};
  if (!b_.input_shapes.count(name)) {
    v.dtype = *dtype;
    v.shape = shape;
  }
  if (is_real(*dtype)) {
    values::store_reals(v, value.numbers);  // rounded to the precision the dtype stores, as the runtime sees it
    return v;
  }
  std::vector<int64_t> ints;
  for (double x : value.numbers) {
    const bool integral = std::floor(x) == x && x >= -9.2233720368547758e18 && x < 9.2233720368547758e18;
    if (*dtype == DType::Bool && x != 0 && x != 1)
      throw InputError(flag + ": graph input '" + name + "' is bool; expected 0, 1, true or false");
    if (!integral)
      throw InputError(flag + ": graph input '" + name + "' is " + std::string(dtype_name(*dtype)) + ", but '" +
                       value.text + "' is not an integer");
    const int bits = dtype_bits(*dtype);
    const bool is_unsigned = *dtype == DType::UInt8 || *dtype == DType::UInt16 || *dtype == DType::UInt32 ||
                             *dtype == DType::UInt64 || *dtype == DType::Bool;
    const double lo = is_unsigned ? 0 : -std::ldexp(1.0, bits - 1);
    const double hi = is_unsigned ? std::ldexp(1.0, std::min(bits, 63)) : std::ldexp(1.0, bits - 1);
    if (*dtype != DType::Bool && (x < lo || x >= hi))
      throw InputError(flag + ": " + std::to_string(static_cast<long long>(x)) + " does not fit graph input '" + name +
                       "' (" + std::string(dtype_name(*dtype)) + ")");
    ints.push_back(static_cast<int64_t>(x));
  }
  v.ints = std::move(ints);
  return v;
}

}  // namespace memplan::shape
