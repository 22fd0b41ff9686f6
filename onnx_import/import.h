// The importer's entry point: an ONNX file and the user's dimension bindings -> a fully shaped Graph.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// How the user fixes the model's free dimensions (memplan inspect/estimate --dim, --batch, --input).
struct Bindings {
  std::map<std::string, int64_t> dims;                       // --dim NAME=VALUE: a symbolic dim by name
  std::optional<int64_t> batch;                              // --batch N: leading symbolic dim of every graph input
  std::map<std::string, std::vector<int64_t>> input_shapes;  // --input NAME=2x512: one input's whole shape
};

// Reads and shapes the model. Weights are never materialized and external data is never opened.
// Throws InputError (exit 2) with one message naming the model and the node or tensor at fault.
Graph import_model(const std::string& path, const Bindings& bindings);

// Read once, shape many times: `fit` and `serve` read and parse the file once (read_model_file) and shape
// the same ModelProto at every value they probe. Same result and errors as import_model(path, bindings).
struct ReadModel;
Graph import_model(const ReadModel& model, const std::string& path, const Bindings& bindings);

}  // namespace memplan
