#include "onnx_import/inference/input_binding.h"

#include <onnx/onnx_pb.h>

#include <charconv>
#include <optional>

#include "onnx_import/errors.h"
#include "onnx_import/inference/walker.h"

namespace memplan::shape {
namespace {

// A summed dimension (summed_dim_terms) whose terms are all bound or integers: their sum; nullopt otherwise.
// `unbound`: the terms that are neither.
std::optional<int64_t> derived_sum(const std::string& name, const std::map<std::string, int64_t>& symbols,
                                   std::vector<std::string>* unbound = nullptr) {
  const std::vector<std::string> terms = summed_dim_terms(name);
  if (terms.empty()) return std::nullopt;
  int64_t total = 0;
  bool known = true;
  for (const std::string& t : terms) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    const bool number = !t.empty() && ec == std::errc() && end == t.data() + t.size() && v >= 0;
    if (!number) {
      const auto it = symbols.find(t);
      if (it == symbols.end()) {
        known = false;
        if (unbound) unbound->push_back(t);
        continue;
      }
      v = it->second;
    }
    if (__builtin_add_overflow(total, v, &total))
      throw ShapeOverflow("dimension '" + name + "': the sum of its terms overflows 64 bits");
  }
  if (!known) return std::nullopt;
  return total;
}

}  // namespace

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
  auto check_input = [&](const std::string& name) {
    if (inputs.count(name)) return;
    std::string known;
    for (const auto& s : inputs) known += (known.empty() ? "" : ", ") + s;
    throw InputError("--input " + name + ": the model has no graph input named '" + name + "' (inputs: " + known + ")");
  };
  for (const auto& [name, shapes] : b_.sequence_inputs) check_input(name);
  for (const auto& [name, shapes] : b_.optional_inputs) check_input(name);
  for (const auto& [name, value] : b_.input_values) {
    if (!inputs.count(name)) {
      std::string known;
      for (const auto& s : inputs) known += (known.empty() ? "" : ", ") + s;
      throw InputError("--value " + name + ": the model has no graph input named '" + name + "'" +
                       (initializers.count(name) ? " (it is an initializer, whose contents the model fixes)" : "") +
                       " (inputs: " + known + ")");
    }
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
  const auto it = b_.input_values.find(vi.name());
  if (it == b_.input_values.end()) return bind_shape(vi, symbols);
  return bind_value(vi, it->second, symbols);
}

Value InputBinder::bind_shape(const onnx::ValueInfoProto& vi, std::map<std::string, int64_t>& symbols) {
  const std::string& name = vi.name();
  const auto& type = vi.type();
  if (type.has_sequence_type() || type.has_optional_type()) return bind_container(vi);
  if (b_.sequence_inputs.count(name) || b_.optional_inputs.count(name))
    throw InputError("--input " + name + ": graph input '" + name + "' is " + std::string(value_kind(type)) +
                     "; seq(...) and none are for sequence and optional inputs");
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
    add_unbound("", "input '" + name + "' has no declared shape", " (bind it with --input " + name + "=DxDx...)");
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
      std::vector<std::string> free_terms;
      if (const auto sum = derived_sum(d.dim_param(), symbols, &free_terms)) {
        v.shape.push_back(symbols.emplace(d.dim_param(), *sum).first->second);
        continue;
      }
      std::string terms;
      for (const std::string& t : free_terms) terms += (terms.empty() ? "" : ", ") + t;
      add_unbound(d.dim_param(),
                  "input '" + name + "' axis " + std::to_string(a) + " ('" + d.dim_param() + "'" +
                      (free_terms.empty() ? "" : ", the sum of its terms"),
                  free_terms.empty()
                      ? "): bind it with --dim " + d.dim_param() + "=N" + (a == 0 ? " or --batch N" : "") +
                            " or --input " + name + "=..."
                      : "): bind " + terms + " with --dim NAME=N, or the sum with --dim " + d.dim_param() +
                            "=N or --input " + name + "=...");
    } else if (a == 0 && b_.batch) {
      v.shape.push_back(*b_.batch);
      continue;
    } else {
      add_unbound("", "input '" + name + "' axis " + std::to_string(a) + " (unnamed)",
                  ": bind it with " + (a == 0 ? std::string("--batch N or ") : std::string()) + "--input " + name +
                      "=...");
    }
    v.shape.push_back(0);
  }
  return v;
}

namespace {

// The tensor element type a sequence or optional type holds, or nullopt.
std::optional<DType> element_dtype(const onnx::TypeProto& t) {
  if (t.has_tensor_type()) return dtype_from_onnx(t.tensor_type().elem_type());
  if (t.has_sequence_type()) return element_dtype(t.sequence_type().elem_type());
  if (t.has_optional_type()) return element_dtype(t.optional_type().elem_type());
  return std::nullopt;
}

Value tensor_item(DType t, const std::vector<int64_t>& shape, const std::string& name) {
  Value v;
  v.dtype = t;
  v.shape = shape;
  for (int64_t d : shape)
    if (d < 0) throw InputError("graph input '" + name + "': a dimension cannot be negative");
  return v;
}

}  // namespace

// A sequence or optional graph input: the element shapes come from Bindings::sequence_inputs/optional_inputs.
Value InputBinder::bind_container(const onnx::ValueInfoProto& vi) {
  const std::string& name = vi.name();
  const auto& type = vi.type();
  const auto dtype = element_dtype(type);
  if (!dtype)
    throw InputError("graph input '" + name + "' is " + std::string(value_kind(type)) + " of no known tensor type");
  auto sequence_of = [&](const std::vector<std::vector<int64_t>>& shapes) {
    Value s;
    s.kind = ValueType::Sequence;
    s.dtype = *dtype;
    for (const auto& shape : shapes) s.items.push_back(tensor_item(*dtype, shape, name));
    return s;
  };
  const auto seq = b_.sequence_inputs.find(name);
  if (type.has_sequence_type()) {
    if (seq == b_.sequence_inputs.end())
      throw InputError("graph input '" + name + "' is a sequence: give the shape of each of its tensors with --input " +
                       name + "=seq(2x3,4x3) (seq() when empty)");
    return sequence_of(seq->second);
  }
  Value v;
  v.kind = ValueType::Optional;
  v.dtype = *dtype;
  v.optional_of_sequence = type.optional_type().elem_type().has_sequence_type();
  const auto opt = b_.optional_inputs.find(name);
  const auto shape = b_.input_shapes.find(name);
  if (opt != b_.optional_inputs.end()) {
    if (!opt->second) return v;  // --input NAME=none: it holds nothing
    if (v.optional_of_sequence) v.items.push_back(sequence_of(*opt->second));
    else if (opt->second->size() == 1) v.items.push_back(tensor_item(*dtype, opt->second->front(), name));
    else throw InputError("graph input '" + name + "' is an optional tensor: give one shape, not " +
                          std::to_string(opt->second->size()));
  } else if (v.optional_of_sequence && seq != b_.sequence_inputs.end()) {
    v.items.push_back(sequence_of(seq->second));
  } else if (!v.optional_of_sequence && shape != b_.input_shapes.end()) {
    v.items.push_back(tensor_item(*dtype, shape->second, name));
  } else {
    throw InputError("graph input '" + name + "' is an optional " + (v.optional_of_sequence ? "sequence" : "tensor") +
                     ": say what it holds with --input " + name + "=none or --input " + name +
                     (v.optional_of_sequence ? "=seq(2x3,4x3)" : "=2x3"));
  }
  return v;
}

void InputBinder::add_unbound(std::string symbol, std::string where, std::string fix) {
  if (!symbol.empty())
    for (Unbound& u : unbound_)
      if (u.symbol == symbol) {
        ++u.more;
        return;
      }
  unbound_.push_back({std::move(symbol), std::move(where), std::move(fix), 0});
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
  // So may --value's 1-D values (their length binds a symbolic dim).
  auto first = [&](const std::string& name) { return b_.input_shapes.count(name) || b_.input_values.count(name); };
  for (const auto& vi : graph_.input())
    if (!initializers.count(vi.name()) && first(vi.name())) values[vi.name()] = bind_one(vi, symbols);
  for (const auto& vi : graph_.input())
    if (!initializers.count(vi.name()) && !first(vi.name())) values[vi.name()] = bind_one(vi, symbols);
  if (!unbound_.empty()) {
    std::string msg = "unbound dimension" + std::string(unbound_.size() > 1 ? "s" : "") + ":";
    for (const Unbound& u : unbound_) {
      msg += "\n  " + u.where;
      if (u.more > 0)  // "input 'ids' axis 0 ('batch'; 95 more input axes share it): bind it with ..."
        msg += "; " + std::to_string(u.more) + " more input ax" + (u.more == 1 ? "is shares" : "es share") + " it";
      msg += u.fix;
    }
    throw InputError(msg);
  }
  return values;
}

}  // namespace memplan::shape
