// memplan._core: the decision commands for Python, over the same library the CLI calls. Each function takes the
// model path and the CLI's options as keywords (the flag's name in snake_case: --grad-accum is grad_accum), fills
// the same argument structs the CLI's flags fill (report/estimate_config.h, fit.h, check.h), calls the same
// library function, and returns the JSON text the CLI's --json prints; memplan/__init__.py parses it. Values
// are checked and turned into options by the library (to_estimate_options, to_bindings, fit_model, ...), never
// here: this file only moves Python values into the structs' strings and numbers.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
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
#include "report/files.h"
#include "report/fit.h"
#include "report/inspect.h"
#include "report/json_text.h"
#include "report/plan.h"
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

// name -> what to do with its value.
using Setters = std::map<std::string, std::function<void(py::handle)>>;

void add_model_keywords(Setters& s, ModelArgs& m) {
  // batch: --batch N. None is the flag not given.
  s["batch"] = [&m](py::handle v) {
    if (!v.is_none()) m.batch = to_int(v, "batch", 0);
  };
  // dims={"seq": 512}: --dim seq=512 for each entry.
  s["dims"] = [&m](py::handle v) {
    if (!py::hasattr(v, "items")) throw InputError("dims: expected a mapping such as {\"seq\": 512}, got " + type_name(v));
    for (const auto item : v.attr("items")()) {
      const auto kv = item.cast<py::tuple>();
      m.dims.push_back(to_text(kv[0], "dims") + "=" + to_text(kv[1], "dims"));
    }
  };
  // inputs={"ids": [8, 512]} (or "8x512"): --input ids=8x512; [] is a scalar.
  s["inputs"] = [&m](py::handle v) {
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
      m.inputs.push_back(to_text(kv[0], "inputs") + "=" + shape);
    }
  };
  // values={"sr": 16000, "flag": True, "ids": [1, 2]}: --value sr=16000 --value flag=true --value ids=1,2.
  s["values"] = [&m](py::handle v) {
    if (!py::hasattr(v, "items"))
      throw InputError("values: expected a mapping such as {\"sr\": 16000}, got " + type_name(v));
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
      m.values.push_back(to_text(kv[0], "values") + "=" + text);
    }
  };
}

void add_estimate_keywords(Setters& s, EstimateArgs& a) {
  add_model_keywords(s, a.model);
  for (auto [name, field] : std::initializer_list<std::pair<const char*, std::string EstimateArgs::*>>{
           {"mode", &EstimateArgs::mode},           {"runtime", &EstimateArgs::runtime},
           {"dtype", &EstimateArgs::dtype},         {"schedule", &EstimateArgs::schedule},
           {"arch", &EstimateArgs::arch},           {"attention", &EstimateArgs::attention},
           {"tied_embeddings", &EstimateArgs::tied_embeddings},
           {"optimizer", &EstimateArgs::optimizer}, {"precision", &EstimateArgs::precision},
           {"checkpoint", &EstimateArgs::checkpoint}, {"budget", &EstimateArgs::budget},
           {"loss", &EstimateArgs::loss},           {"shard", &EstimateArgs::shard},
           {"optimizer_impl", &EstimateArgs::optimizer_impl}, {"torch", &EstimateArgs::torch},
           {"zero_grad", &EstimateArgs::zero_grad},
           {"trainable", &EstimateArgs::trainable}, {"frozen", &EstimateArgs::frozen},
           {"gpu", &EstimateArgs::gpu},             {"catalog", &EstimateArgs::catalog},
           {"lora_targets", &EstimateArgs::lora_targets}, {"frozen_dtype", &EstimateArgs::frozen_dtype},
           {"fsdp_wrap", &EstimateArgs::fsdp_wrap}})
    s[name] = [&a, field = field, key = std::string(name)](py::handle v) { a.*field = to_text(v, key); };
  for (auto [name, field] : std::initializer_list<std::pair<const char*, int EstimateArgs::*>>{
           {"grad_accum", &EstimateArgs::grad_accum}, {"gpus", &EstimateArgs::gpus}, {"top", &EstimateArgs::top},
           {"tp", &EstimateArgs::tp}, {"pp", &EstimateArgs::pp}, {"micro_batches", &EstimateArgs::micro_batches}})
    s[name] = [&a, field = field, key = std::string(name)](py::handle v) {
      a.*field = static_cast<int>(to_int(v, key, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
    };
  for (auto [name, field] : std::initializer_list<std::pair<const char*, bool EstimateArgs::*>>{
           {"amsgrad", &EstimateArgs::amsgrad}, {"maximize", &EstimateArgs::maximize},
           {"gradient_as_bucket_view", &EstimateArgs::gradient_as_bucket_view},
           {"expandable_segments", &EstimateArgs::expandable_segments},
           {"double_quant", &EstimateArgs::double_quant}, {"sequence_parallel", &EstimateArgs::sequence_parallel}})
    s[name] = [&a, field = field, key = std::string(name)](py::handle v) { a.*field = to_bool(v, key); };
  s["weight_decay"] = [&a](py::handle v) { a.weight_decay = to_double(v, "weight_decay"); };
  s["lora_dropout"] = [&a](py::handle v) { a.lora_dropout = to_double(v, "lora_dropout"); };
  // --lora-rank is kept as text by the CLI (empty: not given); the keyword takes an integer.
  s["lora_rank"] = [&a](py::handle v) { a.lora_rank = std::to_string(to_int(v, "lora_rank")); };
}

// Applies every keyword; an unknown one is refused with the command's keywords listed.
void apply(const Setters& setters, const py::kwargs& kwargs, const std::string& command) {
  for (const auto& [key, value] : kwargs) {
    const std::string name = py::str(key);
    const auto it = setters.find(name);
    if (it == setters.end()) {
      std::string known;
      for (const auto& [k, f] : setters) known += (known.empty() ? "" : ", ") + k;
      throw InputError(command + ": unknown option '" + name + "' (expected one of: " + known + ")");
    }
    it->second(value);
  }
}

std::string model_path(py::handle model) { return to_text(model, "model"); }

std::string inspect(py::handle model, const py::kwargs& kwargs) {
  ModelArgs args;
  args.path = model_path(model);
  Setters s;
  add_model_keywords(s, args);
  apply(s, kwargs, "inspect");
  py::gil_scoped_release unlocked;
  const Bindings bindings = to_bindings(args);
  ModelOverview overview;
  const Graph graph = import_model(args.path, bindings, overview);
  return json_text(inspect_to_json(overview, graph));
}

std::string estimate(py::handle model, const py::kwargs& kwargs) {
  EstimateArgs args;
  args.model.path = model_path(model);
  Setters s;
  add_estimate_keywords(s, args);
  apply(s, kwargs, "estimate");
  py::gil_scoped_release unlocked;
  const ConfiguredEstimate c = estimate_model(args);
  return json_text(estimate_to_json(c.estimate, c.graph, c.configuration));
}

std::string plan(py::handle model, const py::kwargs& kwargs) {
  // The CLI's `plan` flags: the model's, --runtime, --dtype, --schedule, --alignment, -o.
  EstimateArgs args;
  args.model.path = model_path(model);
  uint64_t alignment = kDefaultAlignment;
  Setters s;
  add_model_keywords(s, args.model);
  s["runtime"] = [&](py::handle v) { args.runtime = to_text(v, "runtime"); };
  s["dtype"] = [&](py::handle v) { args.dtype = to_text(v, "dtype"); };
  s["schedule"] = [&](py::handle v) { args.schedule = to_text(v, "schedule"); };
  s["alignment"] = [&](py::handle v) { alignment = static_cast<uint64_t>(to_int(v, "alignment", 1)); };
  std::string output;  // -o: also write the plan file
  s["output"] = [&](py::handle v) { output = to_text(v, "output"); };
  apply(s, kwargs, "plan");
  py::gil_scoped_release unlocked;
  if (!output.empty()) refuse_model_as_output(output, args.model.path, "-o");
  const std::string text = plan_to_json_text(plan_model(args, alignment));
  if (!output.empty()) write_text_file(output, text, "the plan to ");
  return text;
}

// (JSON text, whether a limit is broken, the CLI's one-line message for it)
py::tuple fit(py::handle model, const py::kwargs& kwargs) {
  FitArgs args;
  args.estimate.model.path = model_path(model);
  Setters s;
  add_estimate_keywords(s, args.estimate);
  for (auto [name, field] : std::initializer_list<std::pair<const char*, std::string FitArgs::*>>{
           {"memory", &FitArgs::memory}, {"reserve", &FitArgs::reserve}})
    s[name] = [&args, field = field, key = std::string(name)](py::handle v) { args.*field = to_text(v, key); };
  s["search"] = [&](py::handle v) { args.settings.search = to_text(v, "search"); };
  s["headroom"] = [&](py::handle v) { args.settings.headroom_percent = to_double(v, "headroom"); };
  s["global_batch"] = [&](py::handle v) { args.settings.global_batch = to_int(v, "global_batch", 1); };
  s["max"] = [&](py::handle v) { args.settings.max_value = to_int(v, "max", 1); };
  apply(s, kwargs, "fit");
  std::string text, message;
  bool broken = false;
  {
    py::gil_scoped_release unlocked;
    const FitOutcome out = fit_model(args);
    text = json_text(out.table ? fit_table_to_json(*out.table) : fit_to_json(*out.answer));
    broken = out.limit_broken();
    if (broken) {
      message = fit_to_text(*out.answer);  // "nothing fits: batch = 1 needs ..., the budget is ..."
      message = escape_invalid_utf8(message.substr(0, message.find('\n')));
    }
  }
  return py::make_tuple(text, broken, message);
}

// (JSON text, whether nothing fits, the CLI's one-line message for it)
py::tuple serve(py::handle model, const py::kwargs& kwargs) {
  ServeArgs args;
  args.estimate.model.path = model_path(model);
  Setters s;
  add_estimate_keywords(s, args.estimate);
  // The CLI's serve drops the training flags, --mode, --batch and --top (cli/serve.cc).
  for (const char* k : {"mode", "batch", "top", "optimizer", "precision", "checkpoint", "budget", "grad_accum", "loss",
                        "gpus", "shard", "optimizer_impl", "torch", "trainable", "frozen", "lora_rank", "lora_targets",
                        "lora_dropout", "frozen_dtype", "double_quant", "amsgrad", "maximize", "weight_decay",
                        "gradient_as_bucket_view", "zero_grad", "tp", "sequence_parallel", "pp", "micro_batches",
                        "fsdp_wrap"})
    s.erase(k);
  for (auto [name, field] : std::initializer_list<std::pair<const char*, std::string ServeArgs::*>>{
           {"memory", &ServeArgs::memory}, {"reserve", &ServeArgs::reserve}})
    s[name] = [&args, field = field, key = std::string(name)](py::handle v) { args.*field = to_text(v, key); };
  s["context"] = [&](py::handle v) { args.settings.context = to_int(v, "context", 1); };
  s["max_batched_tokens"] = [&](py::handle v) { args.settings.max_batched_tokens = to_int(v, "max_batched_tokens", 1); };
  s["block_size"] = [&](py::handle v) { args.settings.block_size = to_int(v, "block_size", 1); };
  s["kv_dim"] = [&](py::handle v) { args.settings.kv_dim = to_text(v, "kv_dim"); };
  s["headroom"] = [&](py::handle v) { args.settings.headroom_percent = to_double(v, "headroom"); };
  apply(s, kwargs, "serve");
  std::string text, message;
  bool broken = false;
  {
    py::gil_scoped_release unlocked;
    const ServeOutcome out = serve_model(args);
    text = json_text(out.table ? serve_table_to_json(*out.table) : serve_to_json(*out.answer));
    broken = out.limit_broken();
    if (broken) {
      message = serve_to_text(*out.answer);  // "...\nnothing fits: the weights alone need ..."
      const size_t at = message.find("nothing fits");
      message = escape_invalid_utf8(message.substr(at, message.find('\n', at) - at));
    }
  }
  return py::make_tuple(text, broken, message);
}

py::tuple check(py::handle model, const py::kwargs& kwargs) {
  CheckArgs args;
  args.estimate.model.path = model_path(model);
  Setters s;
  add_estimate_keywords(s, args.estimate);
  s["baseline"] = [&](py::handle v) { args.baseline = to_text(v, "baseline"); };
  s["write_baseline"] = [&](py::handle v) { args.write_baseline = to_text(v, "write_baseline"); };
  s["max_increase"] = [&](py::handle v) { args.max_increase_percent = to_double(v, "max_increase"); };
  apply(s, kwargs, "check");
  std::string text, message;
  bool broken = false;
  {
    py::gil_scoped_release unlocked;
    const CheckOutcome out = check_model(args);
    const auto& [graph, e, config] = out.estimated;
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
  EstimateArgs args;
  args.model.path = model_path(model);
  Setters s;
  add_estimate_keywords(s, args);
  apply(s, kwargs, "snapshot");
  AllocationTrace t;
  std::string estimate_text;
  {
    py::gil_scoped_release unlocked;
    const ConfiguredEstimate c = estimate_model(args);
    t = pytorch_allocation_trace(c.graph, to_estimate_options(args));
    estimate_text = json_text(estimate_to_json(c.estimate, c.graph, c.configuration));
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
  m.def("fit", &fit, py::arg("model"));
  m.def("check", &check, py::arg("model"));
  m.def("serve", &serve, py::arg("model"));
  m.def("trace", &trace, py::arg("model"));
}
