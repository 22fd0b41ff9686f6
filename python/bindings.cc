// memplan._core: the decision commands for Python, over the same library the CLI calls. Each function takes the
// model path and the command's options as keywords: the rows of the one option schema (report/options.h) that
// apply to the command, each under its python_keyword() (the flag in snake_case: --grad-accum is grad_accum). It
// fills the same CommandArgs the CLI's flags fill, runs the same checks (validate_options), calls the same
// library function, and returns the JSON text the CLI's --json prints; memplan/__init__.py parses it. No option
// name is written here: this file only moves Python values into the fields the rows name.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <algorithm>
#include <type_traits>
#include <variant>
#include <vector>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "onnx_import/errors.h"
#include "onnx_import/import.h"
#include "onnx_import/model_overview.h"
#include "report/check.h"
#include "report/estimate_config.h"
#include "report/estimate_format.h"
#include "report/export.h"
#include "report/files.h"
#include "report/fit.h"
#include "report/inspect.h"
#include "report/json_text.h"
#include "report/option_checks.h"
#include "report/options.h"
#include "report/plan.h"
#include "report/option_choices.h"
#include "report/serve.h"
#include "report/trace.h"

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

// Applies every keyword of `command`'s rows (report/options.h); an unknown one is refused with the command's
// keywords listed. Then the same checks as the CLI's, the keywords' rows as the flags given.
void apply(CommandArgs& args, const py::kwargs& kwargs, Command command, const std::string& name) {
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

std::string model_path(py::handle model) { return to_text(model, "model"); }

std::string inspect(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply(args, kwargs, kInspect, "inspect");
  py::gil_scoped_release unlocked;
  const Bindings bindings = to_bindings(args.estimate.model);
  ModelOverview overview;
  const Graph graph = import_model(args.estimate.model.path, bindings, overview);
  return json_text(inspect_to_json(overview, graph));
}

std::string estimate(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply(args, kwargs, kEstimate, "estimate");
  py::gil_scoped_release unlocked;
  const ConfiguredEstimate c = estimate_model(args.estimate);
  return json_text(estimate_to_json(c.estimate, *c.graph, c.configuration));
}

std::string plan(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply(args, kwargs, kPlan, "plan");
  py::gil_scoped_release unlocked;
  const std::string& output = args.output;  // -o: also write the plan file
  if (!output.empty()) refuse_model_as_output(output, args.estimate.model.path, "-o");
  const std::string text = plan_to_json_text(plan_model(args.estimate, args.alignment));
  if (!output.empty()) write_text_file(output, text, "the plan to ");
  return text;
}

// export: the config's --graph written to `output`; what was written, as the CLI's summary says it.
py::dict export_(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply(args, kwargs, kExport, "export");
  ExportResult r;
  {
    py::gil_scoped_release unlocked;
    r = export_config(args.estimate.model, args.output);
  }
  py::dict d;
  d["output"] = r.output;
  d["bytes"] = r.bytes;
  d["nodes"] = r.nodes;
  d["initializers"] = r.initializers;
  return d;
}

// fit's and serve's answer, one budget's or the catalog table: (JSON text, whether the limit is broken, the CLI's
// one-line message for it). `decide` runs without the GIL; `line` picks the message from the answer's text.
template <typename Decide, typename TableJson, typename AnswerJson, typename Line>
py::tuple budget_answer(Decide decide, TableJson table_json, AnswerJson answer_json, Line line) {
  std::string text, message;
  bool broken = false;
  {
    py::gil_scoped_release unlocked;
    const auto out = decide();
    text = json_text(out.table ? table_json(*out.table) : answer_json(*out.answer));
    broken = out.limit_broken();
    if (broken) message = escape_invalid_utf8(line(*out.answer));
  }
  return py::make_tuple(text, broken, message);
}

py::tuple fit(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply(args, kwargs, kFit, "fit");
  return budget_answer([&] { return fit_model(fit_args(args)); }, [](const FitTable& t) { return fit_table_to_json(t); },
                       [](const FitAnswer& a) { return fit_to_json(a); },
                       [](const FitAnswer& a) {  // "nothing fits: batch = 1 needs ..., the budget is ..."
                         const std::string text = fit_to_text(a);
                         return text.substr(0, text.find('\n'));
                       });
}

py::tuple serve(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply(args, kwargs, kServe, "serve");
  if (!kServeEngineChoices.is(args.serve.engine, ServeEngine::Eager)) {
    std::string text, message;
    bool broken = false;
    {
      py::gil_scoped_release unlocked;
      const ServeOutcome out = serve_model(serve_args(args));
      text = json_text(out.engines  ? engines_table_to_json(*out.engines)
                       : out.engine ? engine_to_json(*out.engine)
                       : out.vllm_table ? vllm_table_to_json(*out.vllm_table)
                                        : vllm_to_json(*out.vllm));
      broken = out.limit_broken();
      if (broken)
        message = escape_invalid_utf8(out.engine ? out.engine->engine + " would not start: " + out.engine->refusal
                                                 : "vLLM would not start: " + out.vllm->capacity.refusal);
    }
    return py::make_tuple(text, broken, message);
  }
  return budget_answer([&] { return serve_model(serve_args(args)); },
                       [](const ServeTable& t) { return serve_table_to_json(t); },
                       [](const ServeAnswer& a) { return serve_to_json(a); },
                       [](const ServeAnswer& a) {  // "...\nnothing fits: the weights alone need ..."
                         const std::string text = serve_to_text(a);
                         const size_t at = text.find("nothing fits");
                         return text.substr(at, text.find('\n', at) - at);
                       });
}

py::tuple check(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply(args, kwargs, kCheck, "check");
  std::string text, message;
  bool broken = false;
  {
    py::gil_scoped_release unlocked;
    const CheckOutcome out = check_model(check_args(args));
    const auto& [graph, e, config, options] = out.estimated;
    text = json_text(check_to_json(out.result, e, config));
    broken = !out.result.passed;
    for (const LimitResult& l : out.result.limits)
      if (!l.passed) message += (message.empty() ? "" : "; ") + l.message;
    message = escape_invalid_utf8(message);
  }
  return py::make_tuple(text, broken, message);
}

// The predicted allocation trace (report/trace.h) and the estimate it belongs to, for memplan/_snapshot.py.
py::dict trace(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply(args, kwargs, kEstimate, "snapshot");
  AllocationTrace t;
  std::string estimate_text;
  {
    py::gil_scoped_release unlocked;
    const ConfiguredEstimate c = estimate_model(args.estimate);
    t = pytorch_allocation_trace(*c.graph, to_estimate_options(args.estimate));
    estimate_text = json_text(estimate_to_json(c.estimate, *c.graph, c.configuration));
  }
  py::list buffers, steps, events;
  for (const TraceBuffer& b : t.buffers)
    buffers.append(py::make_tuple(escape_invalid_utf8(b.name), category_name(b.category)));
  for (const std::string& name : t.step_names) steps.append(escape_invalid_utf8(name));
  static const char* const kActions[] = {"segment_alloc", "alloc", "free"};
  for (const TraceEvent& e : t.events)
    events.append(py::make_tuple(kActions[e.action], e.address, e.size, e.requested_bytes, e.buffer, e.step));
  py::dict d;
  d["buffers"] = buffers;
  d["step_names"] = steps;
  d["events"] = events;
  d["peak_allocated_bytes"] = t.peak_allocated_bytes;
  d["peak_reserved_bytes"] = t.peak_reserved_bytes;
  d["estimate"] = estimate_text;
  return d;
}

}  // namespace
}  // namespace memplan::python

PYBIND11_MODULE(_core, m) {
  using namespace memplan::python;
  m.doc() = "memplan's library: the decision commands, returning the JSON text of the CLI's --json";
  m.attr("version") = MEMPLAN_VERSION;
  // Translators are tried last-registered first: the subclasses after their base.
  static py::exception<memplan::Error> error(m, "Error");
  static py::exception<memplan::InputError> input_error(m, "InputError", error.ptr());
  static py::exception<memplan::InternalError> internal_error(m, "InternalError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const memplan::InputError& e) {
      input_error(e.what());
    } catch (const memplan::InternalError& e) {
      internal_error(e.what());
    } catch (const memplan::Error& e) {
      error(e.what());
    }
  });
  m.def("inspect", &inspect, py::arg("model"));
  m.def("estimate", &estimate, py::arg("model"));
  m.def("plan", &plan, py::arg("model"));
  m.def("export_config", &export_, py::arg("model"));
  m.def("fit", &fit, py::arg("model"));
  m.def("check", &check, py::arg("model"));
  m.def("serve", &serve, py::arg("model"));
  m.def("trace", &trace, py::arg("model"));
}
