// memplan._core: the decision commands for Python, over the same library the CLI calls. Each function takes the
// model path and the command's options as keywords: the rows of the one option schema (report/options.h) that
// apply to the command, each under its python_keyword() (the flag in snake_case: --grad-accum is grad_accum). It
// fills the same CommandArgs the CLI's flags fill, runs the same checks (validate_options), calls the same
// library function, and returns the JSON text the CLI's --json prints; memplan/__init__.py parses it. No option
// name is written here: keywords.cc moves the Python values into the fields the rows name.
#include <pybind11/pybind11.h>

#include <exception>
#include <string>

#include "onnx_import/errors.h"
#include "onnx_import/import.h"
#include "onnx_import/model_overview.h"
#include "python/keywords.h"
#include "report/check.h"
#include "report/estimate_config.h"
#include "report/estimate_format.h"
#include "report/export.h"
#include "report/files.h"
#include "report/fit.h"
#include "report/inspect.h"
#include "report/json_text.h"
#include "report/options.h"
#include "report/plan.h"
#include "report/option_choices.h"
#include "report/serve.h"
#include "report/trace.h"

namespace py = pybind11;

namespace memplan::python {
namespace {

std::string inspect(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply_keywords(args, kwargs, kInspect, "inspect");
  py::gil_scoped_release unlocked;
  const Bindings bindings = to_bindings(args.estimate.model);
  ModelOverview overview;
  const Graph graph = import_model(args.estimate.model.path, bindings, overview);
  return json_text(inspect_to_json(overview, graph));
}

std::string estimate(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply_keywords(args, kwargs, kEstimate, "estimate");
  py::gil_scoped_release unlocked;
  const ConfiguredEstimate c = estimate_model(args.estimate);
  return json_text(estimate_to_json(c.estimate, *c.graph, c.configuration));
}

std::string plan(py::handle model, const py::kwargs& kwargs) {
  CommandArgs args;
  args.estimate.model.path = model_path(model);
  apply_keywords(args, kwargs, kPlan, "plan");
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
  apply_keywords(args, kwargs, kExport, "export");
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
  apply_keywords(args, kwargs, kFit, "fit");
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
  apply_keywords(args, kwargs, kServe, "serve");
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
  apply_keywords(args, kwargs, kCheck, "check");
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
  apply_keywords(args, kwargs, kEstimate, "snapshot");
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
