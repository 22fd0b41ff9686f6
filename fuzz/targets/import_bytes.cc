// Fuzz target: arbitrary bytes through the importer, as `memplan inspect` runs it (read the file without
// weights, describe what it declares, bind every free dimension, infer every shape, build the Graph).
// read_model_bytes is read_model_file's walk over an in-memory source, so no file is written per input.
// Expected outcomes: a Graph that keeps graph.h's promises, or memplan::InputError.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_checks.h"
#include "onnx_import/graph_builder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memplan;
  const std::string name = "fuzz.onnx";
  fuzz::expect_success_or_input_error([&] {
    const ReadModel model = read_model_bytes(name, data, size);
    const ModelOverview overview = describe_model(name, model);
    summarize_stored(overview);  // inspect's parameter and buffer tallies (overflow-checked)
    const InferenceResult inferred = infer_shapes(model.proto, fuzz::bind_every_dim(overview));
    fuzz::check_graph(build_graph(model.proto, overview, inferred));
  });
  return 0;
}
