// The graphs of a dense Llama-family decoder, built in memory as torch.onnx.export (torch 1.13, opset 17) writes
// them for tests/models/llama.py's modules, which follow transformers' LlamaForCausalLM / MistralForCausalLM /
// Qwen2ForCausalLM / Qwen3ForCausalLM (qk_norm) op for op with eager attention:
//   train    Llama in train mode, TrainingMode.PRESERVE, no constant folding (tests/models/export_llama.py):
//            input_ids (batch, seq) -> logits (batch, seq, vocab), no loss, as the zoo's *_train.onnx;
//   decode   LlamaWithCache(past=True) in eval mode with constant folding (tests/models/export_llama_kv.py,
//            optimum's decoder_with_past_model.onnx): input_ids, attention_mask, position_ids,
//            past_key_values.{i}.key/value -> logits, present.{i}.key/value;
//   prefill  LlamaWithCache(past=False), the same without the past inputs (optimum's decoder_model.onnx).
// Every parameter is an initializer with its dims and float32 dtype and no bytes (external data pointing at a file
// that does not exist), as tests/models/export_llama.py leaves the zoo's big models.
//
// Node for node: the same ops with the same attributes, Constant values, inputs and names as the exporter's graph,
// in its order, with its pooling of the module's Python ints and its constant folding (onnx_import/graph_emitter.h).
// tests/import/hf_config_test.py checks this against torch.onnx.export at test time.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "onnx_import/hf_config.h"

namespace memplan {

// Fills `model` (expected empty) with the `kind` graph. `config` has been checked by parse_decoder_config.
void build_llama_graph(const DecoderConfig& config, ConfigGraph kind, onnx::ModelProto& model);

// The decode graph's KV cache as build_llama_graph names it: past_key_values.{i}.key/value, their tokens at axis 2
// counted by past_sequence_length, and present.{i}.key/value, longer by sequence_length (optimum's names).
StatedKvCache config_kv_cache(const DecoderConfig& config);

// The dimensions of the `kind` graph that are sums of others: the attention mask's total_sequence_length, the cached
// and new tokens of a decode step, the new tokens of a prefill (ReadModel::dim_sums).
std::map<std::string, std::vector<std::string>> config_dim_sums(ConfigGraph kind);

}  // namespace memplan
