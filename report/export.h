// memplan export: a Hugging Face config.json written as the weight-less ONNX file memplan builds from it in memory
// (read_config_model, onnx_import/hf_config.h), so the graph every command analyses can be opened in Netron, read
// by onnx.checker or passed back to memplan as a file, with the same answers. Every parameter is an initializer
// with its dims and dtype whose bytes are in <OUT>.data, a file that is not written (memplan never opens it).
#pragma once

#include <cstdint>
#include <string>

#include "report/estimate_config.h"

namespace memplan {

struct ExportResult {
  std::string output;       // the file written
  uint64_t bytes = 0;       // its size
  int64_t nodes = 0;        // the graph's nodes
  int64_t initializers = 0; // its parameters (and folded constants), every one without bytes
};

// Builds `model`'s --graph from the config at model.path and writes it to `output`, replacing that file. Throws
// InputError when model.path is not a config.json (export only converts configs: an ONNX file is one already),
// the config or --graph is refused (read_config_model), `output` is the config itself or "-", or it cannot be
// written.
ExportResult export_config(const ModelArgs& model, const std::string& output);

// "wrote OUT: N nodes, M initializers without weights (B bytes)\n"
std::string export_summary_text(const ExportResult& r);

}  // namespace memplan
