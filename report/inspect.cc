#include "report/inspect.h"
#include "report/estimate_format.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "cost_models/quantized_weights.h"
#include "onnx_import/checked.h"
#include "report/sizes.h"

namespace memplan {
namespace {

using Json = nlohmann::ordered_json;

// ---- shared helpers ----

std::string domain_label(const std::string& domain) { return domain.empty() ? "ai.onnx" : domain; }

std::string shape_text(const std::vector<std::string>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[i];
  return s + "]";
}

std::string shape_text(const std::vector<int64_t>& dims) {
  std::vector<std::string> text;
  for (int64_t d : dims) text.push_back(std::to_string(d));
  return shape_text(text);
}

// The op histogram, most frequent first, ties by name (a total order: names are unique keys).
std::vector<std::pair<std::string, uint64_t>> ops_by_count(const ModelOverview& o) {
  std::vector<std::pair<std::string, uint64_t>> ops(o.op_histogram.begin(), o.op_histogram.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return ops;
}

// Quantized weights by storage format (cost_models/quantized_weights.h): values, stored bytes, tensors.
struct QuantTally {
  uint64_t weights = 0, values = 0, bytes = 0, tensors = 0;
  void add(const QuantizedWeight& q) {
    weights += 1;
    values = checked_add(values, q.values, "quantized weight values");
    bytes = checked_add(bytes, q.bytes, "quantized weight bytes");
    tensors += q.tensors.size();
  }
};
struct QuantSummary {
  QuantTally total;
  std::map<std::string, QuantTally> by_format;
};
QuantSummary summarize_quantized(const Graph& g) {
  QuantSummary s;
  for (const QuantizedWeight& q : quantized_weights(g)) {
    s.total.add(q);
    s.by_format[q.format].add(q);
  }
  return s;
}

// ---- human output: rows of (indent, label, value), rendered as aligned text or as a Markdown table ----

struct Row {
  int indent = 0;
  std::string label;
  std::string value;
};

void add_tally_rows(std::vector<Row>& rows, const std::string& label, const StoredTally& t, const std::string& note) {
  rows.push_back({0, label, format_count(t.total.elements) + " elements in " + format_count(t.total.tensors) + " tensors, " +
                               format_bytes(t.total.bytes) + note});
  for (const auto& [dtype, tally] : t.by_dtype)
    rows.push_back({1, std::string(dtype_name(dtype)),
                    format_count(tally.elements) + " elements in " + format_count(tally.tensors) + " tensors, " +
                        format_bytes(tally.bytes)});
}

std::vector<Row> overview_rows(const ModelOverview& o, const std::optional<Graph>& graph) {
  std::vector<Row> rows;
  rows.push_back({0, "Model", o.model_path});
  rows.push_back({0, "File size", format_count(o.file_bytes) + " B (" + format_bytes(o.file_bytes) + ")"});
  rows.push_back({0, "Producer", o.producer.empty() ? "(not recorded)" : o.producer});
  rows.push_back({0, "IR version", std::to_string(o.ir_version)});
  std::string opsets;
  for (const auto& [domain, version] : o.opsets)
    opsets += (opsets.empty() ? "" : ", ") + domain_label(domain) + " " + std::to_string(version);
  rows.push_back({0, "Opsets", opsets.empty() ? "(none)" : opsets});
  rows.push_back({0, "Nodes", format_count(o.node_count)});
  for (const auto& [op, count] : ops_by_count(o)) rows.push_back({1, op, format_count(count)});

  const StoredSummary stored = summarize_stored(o);
  add_tally_rows(rows, "Parameters", stored.parameters, " (trainable initializers)");
  add_tally_rows(rows, "Buffers", stored.buffers, " (non-trainable initializers and Constant-node values)");
  if (stored.constant_values.total.tensors > 0)
    rows.push_back({1, "in Constant nodes", format_count(stored.constant_values.total.elements) + " elements in " +
                                                format_count(stored.constant_values.total.tensors) + " tensors, " +
                                                format_bytes(stored.constant_values.total.bytes)});

  if (graph) {
    const QuantSummary q = summarize_quantized(*graph);
    if (q.total.weights > 0) {
      rows.push_back({0, "Quantized weights", format_count(q.total.weights) + " weights, " + format_count(q.total.values) +
                                                  " values stored in " + format_bytes(q.total.bytes) + " (values, scales, zero points)"});
      for (const auto& [format, t] : q.by_format)
        rows.push_back({1, format, format_count(t.weights) + " weights, " + format_count(t.values) + " values, " +
                                       format_count(t.bytes) + " B"});
    }
  }

  auto add_values = [&](const std::string& label, const std::vector<DeclaredValue>& declared,
                        const std::vector<int32_t>* ids) {
    rows.push_back({0, label, format_count(declared.size())});
    if (graph && ids) {
      for (int32_t id : *ids) {
        const Tensor& t = graph->tensors[static_cast<size_t>(id)];
        rows.push_back({1, t.name, std::string(dtype_name(t.dtype)) + " " + shape_text(t.shape)});
      }
      return;
    }
    for (const DeclaredValue& v : declared)
      rows.push_back({1, v.name, std::string(dtype_name(v.dtype)) + " " +
                                     (v.has_shape ? shape_text(v.dims) : "(shape not declared)")});
  };
  add_values("Inputs", o.inputs, graph ? &graph->inputs : nullptr);
  add_values("Outputs", o.outputs, graph ? &graph->outputs : nullptr);

  if (graph) {
    std::string bound;
    for (const auto& [name, value] : graph->bound_dims)
      bound += (bound.empty() ? "" : ", ") + name + "=" + std::to_string(value);
    rows.push_back({0, "Bound dims", bound.empty() ? "(none: every dimension is fixed)" : bound});
    rows.push_back({0, "Tensors", format_count(graph->tensors.size()) + " shaped (memplan inspect --json lists them)"});
  } else {
    rows.push_back({0, "Tensors", "not shaped: see the error below"});
  }

  std::string custom;
  for (const std::string& op : o.custom_ops) custom += (custom.empty() ? "" : ", ") + op;
  rows.push_back({0, "Custom-domain ops", custom.empty() ? "(none)" : custom});

  const std::vector<std::string>& warnings = graph ? graph->warnings : o.warnings;
  rows.push_back({0, "Warnings", warnings.empty() ? "(none)" : format_count(warnings.size())});
  for (const std::string& w : warnings) rows.push_back({1, "-", w});
  return rows;
}

std::string rows_to_text(const std::vector<Row>& rows) {
  std::string out;
  size_t width = 0;
  for (const Row& r : rows) width = std::max(width, r.label.size() + 2 * static_cast<size_t>(r.indent));
  for (const Row& r : rows) {
    const std::string label = std::string(2 * static_cast<size_t>(r.indent), ' ') + r.label;
    out += label + std::string(width - label.size() + 2, ' ') + r.value + "\n";
  }
  return out;
}

std::string markdown_cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out.push_back(c);
  }
  return out;
}

std::string rows_to_markdown(const std::vector<Row>& rows) {
  std::string out = "| | |\n|---|---|\n";
  for (const Row& r : rows)
    out += "| " + std::string(r.indent ? "&nbsp;&nbsp;" : "**") + markdown_cell(r.label) + (r.indent ? "" : "**") +
           " | " + markdown_cell(r.value) + " |\n";
  return out;
}

// ---- JSON (docs/inspect-json.md) ----

Json tally_json(const StoredTally& t) {
  Json by_dtype = Json::object();
  for (const auto& [dtype, tally] : t.by_dtype)
    by_dtype[std::string(dtype_name(dtype))] = {{"count", tally.elements}, {"bytes", tally.bytes}, {"tensors", tally.tensors}};
  return {{"count", t.total.elements}, {"bytes", t.total.bytes}, {"tensors", t.total.tensors}, {"by_dtype", by_dtype}};
}

Json value_json(const Tensor& t) {
  return {{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}};
}

}  // namespace

nlohmann::ordered_json inspect_to_json(const ModelOverview& o, const Graph& g) {
  Json j;
  j["schema"] = "memplan.inspect/1";
  j["model"] = o.model_path;
  j["file_bytes"] = o.file_bytes;
  j["producer"] = o.producer;
  j["ir_version"] = o.ir_version;
  Json opsets = Json::object();
  for (const auto& [domain, version] : o.opsets) opsets[domain_label(domain)] = version;
  j["opsets"] = opsets;
  j["node_count"] = o.node_count;
  Json histogram = Json::object();
  for (const auto& [op, count] : o.op_histogram) histogram[op] = count;
  j["op_histogram"] = histogram;
  const StoredSummary stored = summarize_stored(o);
  j["parameters"] = tally_json(stored.parameters);
  j["buffers"] = tally_json(stored.buffers);
  j["constant_values"] = tally_json(stored.constant_values);
  if (const QuantSummary q = summarize_quantized(g); q.total.weights > 0) {
    auto tally = [](const QuantTally& t) {
      return Json{{"weights", t.weights}, {"count", t.values}, {"bytes", t.bytes}, {"tensors", t.tensors}};
    };
    Json qj = tally(q.total);
    Json by_format = Json::object();
    for (const auto& [format, t] : q.by_format) by_format[format] = tally(t);
    qj["by_format"] = by_format;
    j["quantized_weights"] = qj;
  }
  Json inputs = Json::array(), outputs = Json::array();
  for (int32_t id : g.inputs) inputs.push_back(value_json(g.tensors[static_cast<size_t>(id)]));
  for (int32_t id : g.outputs) outputs.push_back(value_json(g.tensors[static_cast<size_t>(id)]));
  j["inputs"] = inputs;
  j["outputs"] = outputs;
  Json bound = Json::object();
  for (const auto& [name, value] : g.bound_dims) bound[name] = value;
  j["bound_dims"] = bound;
  if (!g.bound_values.empty()) j["bound_values"] = bound_values_json(g);
  j["custom_ops"] = o.custom_ops;
  Json tensors = Json::array();
  for (const Tensor& t : g.tensors) {
    Json e = value_json(t);
    e["kind"] = std::string(kind_name(t.kind));
    tensors.push_back(std::move(e));
  }
  j["tensors"] = tensors;
  j["warnings"] = g.warnings;
  return j;
}

std::string inspect_to_text(const ModelOverview& overview, const std::optional<Graph>& graph) {
  return rows_to_text(overview_rows(overview, graph));
}

std::string inspect_to_markdown(const ModelOverview& overview, const std::optional<Graph>& graph) {
  return rows_to_markdown(overview_rows(overview, graph));
}

}  // namespace memplan
