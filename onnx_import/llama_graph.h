// The training graph of a dense Llama-family decoder, built in memory as torch.onnx.export (torch 1.13, opset 17,
// TrainingMode.PRESERVE, no constant folding) writes it for tests/models/llama.py's module, which follows
// transformers' LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM op for op with eager attention:
// input_ids (batch, seq) -> logits (batch, seq, vocab), no loss (as the zoo's *_train.onnx). Every parameter is
// an initializer with its dims and float32 dtype and no bytes (external data pointing at a file that does not
// exist), as tests/models/export_llama.py leaves the zoo's big models.
//
// Node for node: the same ops with the same attributes, Constant values and inputs as the exporter's graph, with
// its naming (per-scope counters, /layers.K/self_attn/Reshape_3), its pooling of the module's Python ints (one
// Constant per value, at its first use) and its order for the nodes that compute tensors.
// tests/import/hf_config_test.py checks this against torch.onnx.export at test time.
#pragma once

#include "onnx/onnx_pb.h"
#include "onnx_import/hf_config.h"

namespace memplan {

// Fills `model` (expected empty). `config` has been checked by parse_decoder_config.
void build_llama_train_graph(const DecoderConfig& config, onnx::ModelProto& model);

}  // namespace memplan
