#include "report/export.h"

#include <fmt/format.h>

#include <filesystem>

#include "onnx_import/errors.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/model_reader.h"
#include "report/files.h"

namespace memplan {

ExportResult export_config(const ModelArgs& model, const std::string& output) {
  if (!is_config_path(model.path))
    throw InputError(model.path + ": memplan export converts a Hugging Face config.json (a path ending in .json) "
                     "into ONNX; an ONNX file is one graph already: give it to the other commands as it is");
  if (output == "-") throw InputError("-o -: export writes a binary ONNX file; give it a path");
  refuse_model_as_output(output, model.path, "-o");
  const ReadModel read = read_config_model(model.path, model.graph, model.moe_routing, false, model.experts, model.ep);
  // The weights' file that is not there is named after the output, <OUT>.data beside it, as onnx's
  // save_model(..., save_as_external_data=True) names it (tests/models/export_llama.py: <stem>.onnx.data), rather
  // than the in-memory graph's "config.onnx.data": the only difference between the file and the graph.
  const std::string data_file = std::filesystem::path(output).filename().string() + ".data";
  for (onnx::TensorProto& t : *read.proto.mutable_graph()->mutable_initializer())
    for (auto& entry : *t.mutable_external_data())
      if (entry.key() == "location") entry.set_value(data_file);
  std::string bytes;
  if (!read.proto.SerializeToString(&bytes))
    throw InternalError(model.path + ": the graph built from the config does not serialize");
  write_binary_file(output, bytes, "the ONNX graph to ");
  ExportResult r;
  r.output = output;
  r.bytes = bytes.size();
  r.nodes = read.proto.graph().node_size();
  r.initializers = read.proto.graph().initializer_size();
  return r;
}

std::string export_summary_text(const ExportResult& r) {
  return fmt::format("wrote {}: {} nodes, {} initializers without weights ({} bytes)\n", r.output, r.nodes,
                     r.initializers, r.bytes);
}

}  // namespace memplan
