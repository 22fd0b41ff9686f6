// Fuzz target: a Hugging Face config.json as a model (onnx_import/hf_config.h). The input is the config's text:
// parse_decoder_config reads it, and when it is accepted, each graph (train, decode, prefill) is built (gemma2,
// gemma3_text, phi3, mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3: train, then build_llama_graph's
// InputError for decode)
// (onnx_import/llama_graph.h) and imported with every free dimension bound, as `memplan inspect CONFIG --graph G`
// does. Seeds: the published configs of tests/models/hf_configs/ and small ones (fuzz/corpus/hf_config/).
// Expected: a graph, or memplan::InputError; never a crash, an InternalError or a giant allocation.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_checks.h"
#include "onnx_import/graph_builder.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/llama_graph.h"
#include "onnx_import/model_reader.h"

namespace memplan::fuzz {
namespace {

// Configs the reader accepts may still ask for graphs of up to 1024 layers of 16M-wide tensors: built, they
// are a few hundred thousand nodes, which is correct but slow to fuzz. Graphs are built up to this many layers;
// the reader's own bounds are what the rest of the input exercises.
constexpr int64_t kMaxFuzzedLayers = 4;

void analyse(const uint8_t* data, size_t size) {
  const std::string name = "fuzz_config.json";
  const DecoderConfig config = parse_decoder_config(name, std::string(reinterpret_cast<const char*>(data), size));
  require(config.num_hidden_layers > 0 && config.hidden_size > 0 && config.head_dim > 0 &&
              config.num_attention_heads % config.num_key_value_heads == 0,
          "parse_decoder_config accepted a config its graph cannot have");
  if (config.num_hidden_layers > kMaxFuzzedLayers) return;
  for (ConfigGraph kind : {ConfigGraph::Train, ConfigGraph::Decode, ConfigGraph::Prefill}) {
    ReadModel model;
    build_llama_graph(config, kind, model.proto);
    const ModelOverview overview = describe_model(name, model);
    const InferenceResult inferred = infer_shapes(model.proto, bind_every_dim(overview));
    check_graph(build_graph(model.proto, overview, inferred));
  }
}

}  // namespace
}  // namespace memplan::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  memplan::fuzz::expect_success_or_input_error([&] { memplan::fuzz::analyse(data, size); });
  return 0;
}
