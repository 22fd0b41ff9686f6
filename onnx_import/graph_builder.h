// Internal to the importer: the steps import_model() composes. They read the ONNX proto, so this header
// is for onnx_import/ and its tests only; everyone else uses import.h and model_overview.h.
#pragma once

#include <string>
#include <string_view>

#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h
#include "onnx_import/graph.h"
#include "onnx_import/model_overview.h"
#include "onnx_import/model_reader.h"
#include "onnx_import/shape_inference.h"

namespace memplan {

// What the file declares, from the proto alone. Throws InputError on duplicate initializer names and on
// tensors whose byte size overflows 64 bits.
ModelOverview describe_model(const std::string& path, const ReadModel& model);

// The fully shaped Graph: the model's top-level tensors and nodes in the inferred topological order, with
// kinds from `overview`. Throws InputError on structural errors (a tensor with two producers, a node
// output that is also an initializer or a graph input). The inferred shapes and contents are moved into the Graph.
Graph build_graph(const onnx::ModelProto& model, const ModelOverview& overview, InferenceResult inferred);

}  // namespace memplan
