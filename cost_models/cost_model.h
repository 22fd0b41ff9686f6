// Cost models: a shaped Graph -> a memory Program (what each op allocates, saves and frees),
// per runtime, precision and mode. The cost model never packs; the planner never asks why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx_import/graph.h"
#include "planner/program.h"

namespace memplan {

enum class Runtime { Ideal, PyTorch, OnnxRuntime };

struct InferenceOptions {
  Runtime runtime = Runtime::Ideal;
  DType float_dtype = DType::Float32;  // --dtype: float weights and activations are stored in this type
};

struct CostModelResult {
  Program program;
  // Bytes the runtime holds outside the program's buffers and outside any allocator's counters
  // (documented per runtime; the CUDA context is never included).
  uint64_t fixed_bytes = 0;
  std::vector<std::string> notes;  // assumptions the user should know about, one sentence each
};

CostModelResult build_inference_program(const Graph& graph, const InferenceOptions& options);

}  // namespace memplan
