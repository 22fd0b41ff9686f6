#include "onnx_import/inference/input_binding.h"

#include <onnx/onnx_pb.h>

#include "onnx_import/errors.h"
#include "onnx_import/inference/walker.h"

namespace memplan::shape {

void InputBinder::check_flags(const std::set<std::string>& initializers) const {
  std::set<std::string> symbols, inputs;
  auto add_symbols = [&](const onnx::ValueInfoProto& vi) {
    if (!vi.type().has_tensor_type()) return;
    for (const auto& d : vi.type().tensor_type().shape().dim())
      if (d.has_dim_param()) symbols.insert(d.dim_param());
  };
  for (const auto& vi : graph_.input()) {
    add_symbols(vi);
    if (!initializers.count(vi.name())) inputs.insert(vi.name());
  }
  for (const auto& vi : graph_.output()) add_symbols(vi);
  for (const auto& vi : graph_.value_info()) add_symbols(vi);
  for (const auto& [name, value] : b_.dims) {
    if (!symbols.count(name)) {
      std::string known;
      for (const auto& s : symbols) known += (known.empty() ? "" : ", ") + s;
      throw InputError("--dim " + name + ": the model has no symbolic dimension named '" + name + "'" +
                       (known.empty() ? std::string(" (it has none)") : " (it has: " + known + ")"));
    }
    if (value < 0) throw InputError("--dim " + name + "=" + std::to_string(value) + ": a dimension cannot be negative");
  }
  for (const auto& [name, shape] : b_.input_shapes) {
    if (!inputs.count(name)) {
      std::string known;
      for (const auto& s : inputs) known += (known.empty() ? "" : ", ") + s;
      throw InputError("--input " + name + ": the model has no graph input named '" + name + "' (inputs: " + known + ")");
    }
    for (int64_t d : shape)
      if (d < 0) throw InputError("--input " + name + ": a dimension cannot be negative");
  }
  if (b_.batch && *b_.batch < 1) throw InputError("--batch " + std::to_string(*b_.batch) + ": the batch size must be at least 1");
}

void InputBinder::bind_symbol(const std::string& symbol, int64_t value, const std::string& input,
                              std::map<std::string, int64_t>& symbols) {
  auto [it, inserted] = symbols.emplace(symbol, value);
  if (!inserted && it->second != value)
    throw InputError("--input " + input + " sets dimension '" + symbol + "' to " + std::to_string(value) +
                     ", but it is already " + std::to_string(it->second));
}

Value InputBinder::bind_one(const onnx::ValueInfoProto& vi, std::map<std::string, int64_t>& symbols) {
  const std::string& name = vi.name();
  const auto& type = vi.type();
  if (!type.has_tensor_type())
    throw InputError("graph input '" + name + "' is " + std::string(value_kind(type)) + "; memplan analyses tensor inputs only");
  Value v;
  const auto dtype = dtype_from_onnx(type.tensor_type().elem_type());
  if (!dtype)
    throw InputError("graph input '" + name + "' has unknown data type " + std::to_string(type.tensor_type().elem_type()));
  v.dtype = *dtype;
  const bool has_shape = type.tensor_type().has_shape();
  const auto& dims = type.tensor_type().shape().dim();

  if (auto it = b_.input_shapes.find(name); it != b_.input_shapes.end()) {
    v.shape = it->second;
    if (has_shape && dims.size() != static_cast<int>(v.shape.size()))
      throw InputError("--input " + name + " gives " + std::to_string(v.shape.size()) + " dimensions, but the model declares " +
                       std::to_string(dims.size()));
    for (int a = 0; has_shape && a < dims.size(); ++a) {
      if (dims[a].has_dim_value() && dims[a].dim_value() != v.shape[a])
        throw InputError("--input " + name + " gives " + std::to_string(v.shape[a]) + " at axis " + std::to_string(a) +
                         ", but the model fixes it to " + std::to_string(dims[a].dim_value()));
      if (dims[a].has_dim_param()) bind_symbol(dims[a].dim_param(), v.shape[a], name, symbols);
    }
    return v;
  }
  if (!has_shape) {
    unbound_.push_back("input '" + name + "' has no declared shape (bind it with --input " + name + "=DxDx...)");
    return v;
  }
  for (int a = 0; a < dims.size(); ++a) {
    const auto& d = dims[a];
    if (d.has_dim_value()) {
      if (d.dim_value() < 0)
        throw InputError("graph input '" + name + "' has a negative dimension (" + std::to_string(d.dim_value()) +
                         ") at axis " + std::to_string(a));
      v.shape.push_back(d.dim_value());
      continue;
    }
    if (d.has_dim_param()) {
      if (auto it = symbols.find(d.dim_param()); it != symbols.end()) {
        v.shape.push_back(it->second);
        continue;
      }
      unbound_.push_back("input '" + name + "' axis " + std::to_string(a) + " ('" + d.dim_param() + "'): bind it with --dim " +
                         d.dim_param() + "=N" + (a == 0 ? " or --batch N" : "") + " or --input " + name + "=...");
    } else if (a == 0 && b_.batch) {
      v.shape.push_back(*b_.batch);
      continue;
    } else {
      unbound_.push_back("input '" + name + "' axis " + std::to_string(a) + " (unnamed): bind it with " +
                         (a == 0 ? std::string("--batch N or ") : std::string()) + "--input " + name + "=...");
    }
    v.shape.push_back(0);
  }
  return v;
}

std::map<std::string, Value> InputBinder::bind(std::map<std::string, int64_t>& symbols) {
  std::set<std::string> initializers;
  for (const auto& i : graph_.initializer()) initializers.insert(i.name());
  for (const auto& i : graph_.sparse_initializer()) initializers.insert(i.values().name());
  check_flags(initializers);
  symbols.insert(b_.dims.begin(), b_.dims.end());
  // --batch names the leading symbolic dim of each input that --dim leaves free.
  if (b_.batch)
    for (const auto& vi : graph_.input()) {
      if (initializers.count(vi.name()) || b_.input_shapes.count(vi.name()) || !vi.type().has_tensor_type()) continue;
      const auto& dims = vi.type().tensor_type().shape().dim();
      if (!dims.empty() && dims[0].has_dim_param()) symbols.emplace(dims[0].dim_param(), *b_.batch);
    }
  // Whole shapes given with --input may name symbols the other inputs share: bind those first.
  std::map<std::string, Value> values;
  for (const auto& vi : graph_.input())
    if (!initializers.count(vi.name()) && b_.input_shapes.count(vi.name())) values[vi.name()] = bind_one(vi, symbols);
  for (const auto& vi : graph_.input())
    if (!initializers.count(vi.name()) && !b_.input_shapes.count(vi.name())) values[vi.name()] = bind_one(vi, symbols);
  if (!unbound_.empty()) {
    std::string msg = "unbound dimension" + std::string(unbound_.size() > 1 ? "s" : "") + ":";
    for (const auto& u : unbound_) msg += "\n  " + u;
    throw InputError(msg);
  }
  return values;
}

}  // namespace memplan::shape
