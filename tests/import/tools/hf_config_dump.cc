// Test tool: writes the ONNX graph memplan builds in memory from a Hugging Face config.json
// (read_config_model, onnx_import/hf_config.h), so tests/import/hf_config_test.py can compare it, node for node,
// with torch.onnx.export's graph of tests/models/llama.py at the same config. The graph is read as serve --engine
// vllm reads it (read_config_model's vllm_serve), which builds the decoders with a sliding window too (gemma2,
// gemma3_text, phi3, mistral; elsewhere refused, the graph the same), a mixture of experts' sparse blocks as
// transformers' eager loop (--experts-implementation eager; serve's engines read another form, onnx_import/hf_moe.h).
//   hf_config_dump CONFIG.json GRAPH OUT.onnx [MOE_ROUTING]
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "onnx_import/errors.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/model_reader.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: hf_config_dump CONFIG.json GRAPH OUT.onnx [MOE_ROUTING]\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1], std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const bool experts = in && memplan::parse_decoder_config(argv[1], text).num_experts > 0;
    const memplan::ReadModel model =
        memplan::read_config_model(argv[1], argv[2], argc == 5 ? argv[4] : "", true, experts ? "eager" : "");
    std::ofstream out(argv[3], std::ios::binary);
    if (!out || !model.proto.SerializeToOstream(&out)) {
      std::cerr << "hf_config_dump: cannot write " << argv[3] << "\n";
      return 2;
    }
  } catch (const memplan::Error& e) {
    std::cerr << "hf_config_dump: " << e.what() << "\n";
    return e.exit_code();
  }
  return 0;
}
