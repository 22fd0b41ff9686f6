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
  // --value NAME=V: the contents of a small integer, bool or float graph input (a scalar, or a comma list for a
  // 1-D tensor), so shape computations and If conditions that read it resolve. Checked against the input's
  // declared dtype and shape when the model is shaped.
  struct InputValue {
    std::vector<double> numbers;
    bool list = false;  // given as a comma list (a 1-D tensor); a single number otherwise
    std::string text;   // as given, for messages
    friend auto operator<=>(const InputValue&, const InputValue&) = default;
  };
  std::map<std::string, InputValue> input_values;
  // Sequence and optional graph inputs (--input s=seq(2x3,4x3), --input o=none): the shape of each tensor a
  // sequence input holds, in order; an optional input's tensor shape (one entry) or sequence element shapes,
  // or nullopt when it holds nothing. An optional input may also be given by input_shapes (the tensor it
  // holds) or sequence_inputs (the sequence it holds).
  std::map<std::string, std::vector<std::vector<int64_t>>> sequence_inputs;
  std::map<std::string, std::optional<std::vector<std::vector<int64_t>>>> optional_inputs;
  // --graph: which graph a Hugging Face config.json becomes (onnx_import/hf_config.h); "" for an ONNX file.
  std::string graph;
  // --moe-routing: a config.json mixture of experts' routing rule (onnx_import/hf_config.h); "" is balanced.
  std::string moe_routing;
  // --experts-implementation: how a config.json mixture of experts runs its experts (onnx_import/hf_config.h); ""
  // is eager.
  std::string experts;
  // --ep N: the graph of rank 0 of N expert-parallel GPUs (onnx_import/hf_moe_grouped.h); 1: none.
  int expert_parallel = 1;
  // Ordered field by field (ModelSession keeps one shaped graph per binding).
  friend auto operator<=>(const Bindings&, const Bindings&) = default;
};

// A dimension named as a sum of other dimensions and integers, as exporters name a length that totals others
// ("past_sequence_length + sequence_length": optimum's attention mask over the cached and the new tokens): its
// terms, or empty when `dim_param` is not such a sum. A graph input's summed dimension that the bindings leave
// free is bound to the sum of its terms once every one is bound (by --dim, --batch or another input's shape),
// for every command alike; bound by hand, the hand's value stands.
std::vector<std::string> summed_dim_terms(const std::string& dim_param);

// Reads and shapes the model (a config.json is built as read_model_source does). Weights are never materialized and external data is never opened.
// Throws InputError (exit 2) with one message naming the model and the node or tensor at fault.
Graph import_model(const std::string& path, const Bindings& bindings);

// Read once, shape many times: `fit` and `serve` read and parse the file once (read_model_file) and shape
// the same ModelProto at every value they probe. Same result and errors as import_model(path, bindings).
struct ReadModel;
Graph import_model(const ReadModel& model, const std::string& path, const Bindings& bindings);

}  // namespace memplan
