// What a model file declares on its own, known before any dimension is bound: enough for `memplan
// inspect` to describe a model whose free dimensions the user has not bound yet.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "onnx_import/graph.h"
#include "onnx_import/import.h"

namespace memplan {

// A graph input or output as the file declares it.
struct DeclaredValue {
  std::string name;
  DType dtype = DType::Undefined;  // Undefined when the file declares no tensor type
  bool has_shape = false;          // false when the file declares no shape at all
  std::vector<std::string> dims;   // each a number, a symbolic name, or "?" (unnamed and unknown)
};

struct ModelOverview {
  std::string model_path;
  uint64_t file_bytes = 0;
  std::string producer;  // producer_name + " " + producer_version
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;        // domain ("" = ai.onnx) -> version
  uint64_t node_count = 0;                      // nodes of the top-level graph
  std::map<std::string, uint64_t> op_histogram; // "Conv"; other domains as "com.microsoft.Attention"
  std::vector<std::string> custom_ops;          // sorted "domain.op" of domains other than ai.onnx/ai.onnx.ml
  std::vector<DeclaredValue> inputs;            // graph inputs that are not initializers
  std::vector<DeclaredValue> outputs;
  // Tensors whose shape the file stores: initializers (kind Weight or Constant, `trainable` set) and the
  // values of Constant nodes (kind Constant), in file order.
  std::vector<Tensor> initializers;
  std::vector<Tensor> constant_values;
  std::vector<std::string> warnings;            // from reading the file
};

// Elements and bytes of a set of stored tensors, in total and per dtype.
struct Tally {
  uint64_t tensors = 0;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};
struct StoredTally {
  Tally total;
  std::map<DType, Tally> by_dtype;
  void add(const Tensor& t);  // overflow-checked
};

// Parameters are trainable initializers (as torch's model.parameters()); buffers are everything else
// the file stores: non-trainable initializers (BatchNorm running statistics, integer tensors) and the
// values of Constant nodes, which are also tallied apart as `constant_values`.
struct StoredSummary {
  StoredTally parameters;
  StoredTally buffers;
  StoredTally constant_values;
};
StoredSummary summarize_stored(const ModelOverview& overview);

// import_model() that also describes the file: `overview` is filled as soon as the file is read, before
// dimensions are bound and shapes inferred, so it holds what the file declares even when that later fails.
Graph import_model(const std::string& path, const Bindings& bindings, ModelOverview& overview);
Graph import_model(const ReadModel& model, const std::string& path, const Bindings& bindings, ModelOverview& overview);

}  // namespace memplan
