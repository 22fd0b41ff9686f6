// vLLM's weights where they differ from the exported graph's (cost_models/vllm_weights.h), by hand, on the zoo's
// llama_tiny_kv.onnx (torch.onnx.export of a 4-layer Llama: hidden 128, 2 KV heads of 32 (k, v 128 x 64),
// intermediate 352, vocab 1000, an untied head [128, 1000]).
#include "cost_models/vllm_weights.h"

#include <gtest/gtest.h>

#include <string>

#include "onnx_import/errors.h"
#include "onnx_import/import.h"

namespace memplan {
namespace {

Graph llama_tiny_kv() {
  Bindings b;
  b.batch = 1;
  b.dims["sequence_length"] = 16;
  b.dims["past_sequence_length"] = 0;
  b.dims["total_sequence_length"] = 16;
  return import_model(std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_kv.onnx", b);
}

std::string head_node(const Graph& g) {  // the last MatMul: the LM head
  std::string name;
  for (const Node& n : g.nodes)
    if (n.op_type == "MatMul") name = n.name;
  return name;
}

TEST(VllmWeights, VocabularyPaddedRowsOfTheEmbeddingAndTheUntiedHead) {
  const Graph g = llama_tiny_kv();
  // 1000 rows padded to 1024: 24 rows of 128 in the embedding and in the head, fp16: 2 x 24 x 128 x 2 = 12,288 B.
  const VllmVocabPadding one = vllm_vocab_padding(g, head_node(g), 1000, 1, true, false, DType::Float16, "m");
  EXPECT_EQ(one.padded_vocab, 1024);
  EXPECT_EQ(one.tables, 2);
  EXPECT_EQ(one.bytes, 12288u);
  // tp 2: 512 rows a rank where the tensor-parallel plan holds ceil(1000 / 2) = 500: 2 x 12 x 128 x 2 = 6,144 B.
  EXPECT_EQ(vllm_vocab_padding(g, head_node(g), 1000, 2, true, false, DType::Float16, "m").bytes, 6144u);
}

TEST(VllmWeights, GptqLayoutOfAnExportByHand) {
  const Graph g = llama_tiny_kv();
  VllmQuantization q;
  q.method = "gptq";
  q.bits = 4;
  q.group_size = 32;
  // Per layer, vLLM's modules (qweight [in/8, out] int32, scales [in/32, out] fp16, qzeros [in/32, out/8] int32):
  //   qkv     in 128, out 256: 16 x 256 x 4 + 4 x 256 x 2 + 4 x 32 x 4 = 16,384 + 2,048 + 512 = 18,944
  //   o       in 128, out 128: 8,192 + 1,024 + 256 = 9,472
  //   gate_up in 128, out 704: 45,056 + 5,632 + 1,408 = 52,096
  //   down    in 352, out 128: 44 x 128 x 4 + 11 x 128 x 2 + 11 x 16 x 4 = 22,528 + 2,816 + 704 = 26,048
  // 106,560 a layer, 426,240 for 4. The graph's fp16: (128 x 128 x 2 + 128 x 64 x 2 + 128 x 352 x 3) x 4 x 2 B.
  const VllmQuantizedLinears r = vllm_quantized_linears(g, head_node(g), 1, true, q, 16, DType::Float16, "m");
  EXPECT_EQ(r.layers, 4 * 7);
  EXPECT_EQ(r.modules, 4 * 4);
  EXPECT_EQ(r.quantized_bytes, 426240u);
  EXPECT_EQ(r.dense_bytes, 1474560u);
  EXPECT_EQ(r.dequantized_bytes, 0u);
  // A group that does not divide down's 352 inputs: vLLM's create_weights refuses it.
  q.group_size = 64;
  EXPECT_THROW(vllm_quantized_linears(g, head_node(g), 1, true, q, 16, DType::Float16, "m"), InputError);
}

TEST(VllmWeights, Fp8OneByteAWeightAndAScalePerModule) {
  const Graph g = llama_tiny_kv();
  VllmQuantization q;
  q.method = "fp8";
  // 184,320 weights a layer, one byte each, and 4 float32 scales: (184,320 + 16) x 4.
  EXPECT_EQ(vllm_quantized_linears(g, head_node(g), 1, true, q, 16, DType::BFloat16, "m").quantized_bytes, 737344u);
  q.static_activations = true;  // and one input scale per module
  EXPECT_EQ(vllm_quantized_linears(g, head_node(g), 1, true, q, 16, DType::BFloat16, "m").quantized_bytes, 737408u);
}

}  // namespace
}  // namespace memplan
