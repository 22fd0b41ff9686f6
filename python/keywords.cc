// memplan._core's keywords (keywords.h): a command's Python keyword arguments moved into the CommandArgs fields
// their option rows name, each converted by its field's type (text, bool, number, integer in the field's range, the
// mapping keywords into the CLI's repeated NAME=VALUE texts), then checked as the CLI checks its flags.
#include "python/keywords.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "onnx_import/errors.h"
#include "report/option_checks.h"

namespace py = pybind11;

namespace memplan::python {
namespace {

std::string type_name(py::handle v) { return py::str(py::type::handle_of(v).attr("__name__")); }

std::string to_text(py::handle v, const std::string& key) {
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::hasattr(v, "__fspath__")) return py::str(py::module_::import("os").attr("fspath")(v)).cast<std::string>();
  // A number where the CLI takes text ("budget=2**30", "torch=2"): its decimal form, as typed on a command line.
  if ((py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)) && !py::isinstance<py::bool_>(v))
    return py::str(v).cast<std::string>();
  throw InputError(key + ": expected a string, got " + type_name(v));
}

int64_t to_int(py::handle v, const std::string& key, int64_t lo = std::numeric_limits<int64_t>::min(),
               int64_t hi = std::numeric_limits<int64_t>::max()) {
  if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v))
    throw InputError(key + ": expected an integer, got " + type_name(v));
  int64_t x = 0;
  try {
    x = v.cast<int64_t>();
  } catch (const py::cast_error&) {
    throw InputError(key + ": " + py::str(v).cast<std::string>() + " does not fit in 64 bits");
  }
  if (x < lo || x > hi)
    throw InputError(key + ": " + std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return x;
}

double to_double(py::handle v, const std::string& key) {
  if ((!py::isinstance<py::int_>(v) && !py::isinstance<py::float_>(v)) || py::isinstance<py::bool_>(v))
    throw InputError(key + ": expected a number, got " + type_name(v));
  return v.cast<double>();
}

bool to_bool(py::handle v, const std::string& key) {
  if (!py::isinstance<py::bool_>(v)) throw InputError(key + ": expected True or False, got " + type_name(v));
  return v.cast<bool>();
}

// Converters of the mapping keywords into the CLI's repeated NAME=VALUE texts.
void add_dims(std::vector<std::string>& out, py::handle v) {
  // dims={"seq": 512}: --dim seq=512 for each entry.
  if (!py::hasattr(v, "items")) throw InputError("dims: expected a mapping such as {\"seq\": 512}, got " + type_name(v));
  for (const auto item : v.attr("items")()) {
    const auto kv = item.cast<py::tuple>();
    out.push_back(to_text(kv[0], "dims") + "=" + to_text(kv[1], "dims"));
  }
}

void add_inputs(std::vector<std::string>& out, py::handle v) {
  // inputs={"ids": [8, 512]} (or "8x512"): --input ids=8x512; [] is a scalar.
  if (!py::hasattr(v, "items"))
    throw InputError("inputs: expected a mapping such as {\"ids\": [8, 512]}, got " + type_name(v));
  for (const auto item : v.attr("items")()) {
    const auto kv = item.cast<py::tuple>();
    std::string shape;
    if (py::isinstance<py::str>(kv[1])) {
      shape = kv[1].cast<std::string>();
    } else if (py::isinstance<py::sequence>(kv[1])) {
      for (const auto d : kv[1].cast<py::sequence>())
        shape += (shape.empty() ? "" : "x") + std::to_string(to_int(d, "inputs", 0));
      if (shape.empty()) shape = "scalar";
    } else {
      throw InputError("inputs: expected a shape (a list of integers or \"8x512\"), got " + type_name(kv[1]));
    }
    out.push_back(to_text(kv[0], "inputs") + "=" + shape);
  }
}

void add_values(std::vector<std::string>& out, py::handle v) {
  // values={"sr": 16000, "flag": True, "ids": [1, 2]}: --value sr=16000 --value flag=true --value ids=1,2.
  if (!py::hasattr(v, "items")) throw InputError("values: expected a mapping such as {\"sr\": 16000}, got " + type_name(v));
  auto number = [](py::handle x) -> std::string {
    if (py::isinstance<py::bool_>(x)) return x.cast<bool>() ? "true" : "false";
    if (py::isinstance<py::int_>(x)) return std::to_string(x.cast<long long>());
    if (py::isinstance<py::float_>(x)) return py::str(x).cast<std::string>();
    throw InputError("values: expected a number, a bool or a list of them, got " + type_name(x));
  };
  for (const auto item : v.attr("items")()) {
    const auto kv = item.cast<py::tuple>();
    std::string text;
    if (!py::isinstance<py::str>(kv[1]) && py::isinstance<py::sequence>(kv[1])) {
      for (const auto x : kv[1].cast<py::sequence>()) text += (text.empty() ? "" : ",") + number(x);
      if (text.empty()) throw InputError("values: an empty list binds no value");
    } else {
      text = number(kv[1]);
    }
    out.push_back(to_text(kv[0], "values") + "=" + text);
  }
}

// Sets one row's field from a Python value, by the field's type.
void set_field(const OptionSpec& row, CommandArgs& args, py::handle v) {
  const std::string key = row.python_keyword();
  std::visit(
      [&](auto get) {
        auto& field = get(args);
        using T = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<T, std::string>) {
          field = to_text(v, key);
        } else if constexpr (std::is_same_v<T, bool>) {
          field = to_bool(v, key);
        } else if constexpr (std::is_same_v<T, double>) {
          field = to_double(v, key);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          if (key == "dims") add_dims(field, v);
          else if (key == "inputs") add_inputs(field, v);
          else add_values(field, v);
        } else {
          if (v.is_none() && key == "batch") return;  // batch=None: the flag not given
          const int64_t lo = std::numeric_limits<T>::min();
          const int64_t hi = std::min<uint64_t>(std::numeric_limits<T>::max(), std::numeric_limits<int64_t>::max());
          field = static_cast<T>(to_int(v, key, lo, hi));
        }
      },
      row.field);
}

}  // namespace

std::string model_path(py::handle model) { return to_text(model, "model"); }

// Applies every keyword of `command`'s rows (report/options.h); an unknown one is refused with the command's
// keywords listed. Then the same checks as the CLI's, the keywords' rows as the flags given.
void apply_keywords(CommandArgs& args, const py::kwargs& kwargs, Command command, const std::string& name) {
  std::vector<const OptionSpec*> given;
  for (const auto& [key, value] : kwargs) {
    const std::string k = py::str(key);
    const OptionSpec* row = nullptr;
    for (const OptionSpec& r : option_schema())
      if (r.applies_to(command) && r.kind != OptionKind::Model && r.python_keyword() == k) row = &r;
    if (!row) {
      std::vector<std::string> known;
      for (const OptionSpec& r : option_schema())
        if (r.applies_to(command) && r.kind != OptionKind::Model && !r.python_keyword().empty())
          known.push_back(r.python_keyword());
      std::sort(known.begin(), known.end());
      known.erase(std::unique(known.begin(), known.end()), known.end());
      std::string list;
      for (const std::string& x : known) list += (list.empty() ? "" : ", ") + x;
      throw InputError(name + ": unknown option '" + k + "' (expected one of: " + list + ")");
    }
    set_field(*row, args, value);
    given.push_back(row);  // checked as the CLI checks a flag it was given, a default value included (micro_batches=0)
  }
  settle_options(args, command, given);
}

}  // namespace memplan::python
