// Reads an ONNX file into a ModelProto without materializing its weights.
//
// The file is read through a small pread window and its protobuf wire format walked by hand; everything
// is copied into a small buffer except the data payloads of large tensors, and only that buffer is parsed. Peak memory
// therefore grows with the model's structure (nodes, names, shapes), not with its weight bytes.
// External data files are never opened, so their locations (however hostile) are never followed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/arena.h>

#include "onnx_import/hf_config.h"  // StoredQuantization
#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h

namespace memplan {

// A dropped payload is marked data_location=EXTERNAL so later stages know its values are unknown;
// dims and data_type are always kept. Payloads up to these sizes (data bytes, summed over a tensor's
// data fields) are kept, because shape computations read them (Reshape targets, Slice bounds, Resize scales).
inline constexpr uint64_t kKeptIntegerPayloadBytes = 64 * 1024;  // int*/uint*/bool tensors
inline constexpr uint64_t kKeptOtherPayloadBytes = 256;          // float, string and complex tensors

// Protobuf messages may nest at most this deep (ModelProto = 1; each subgraph level adds 3: attribute,
// graph, node). Deeper files are refused rather than risk exhausting the stack. Protobuf's own
// default recursion limit is 100; this bound stays below it.
inline constexpr int kMaxMessageDepth = 64;

// The last IR version ONNX 1.12 (the libonnx-dev memplan builds with) knows; newer files are read with
// a warning, since their new fields are kept as unknown fields and ignored.
inline constexpr int64_t kNewestKnownIrVersion = 8;

struct ReadModel {
  ReadModel();
  // The proto is allocated on `arena` (google/protobuf/arena.h): parsing a model of thousands of nodes
  // takes a few large blocks instead of one allocation per message and string, and frees them at once.
  std::unique_ptr<google::protobuf::Arena> arena;
  onnx::ModelProto& proto;
  uint64_t file_bytes = 0;
  uint64_t dropped_payload_bytes = 0;  // tensor data bytes skipped without reading
  // The model's position limit where its source states one (a config.json's max_position_embeddings); 0: not
  // stated (an ONNX file does not say).
  int64_t max_positions = 0;
  // What its source says the weights are stored in, and its architecture (a config.json's torch_dtype, e.g.
  // "bfloat16", and model_type); "": not stated (an ONNX file: its initializers' types say it).
  std::string stored_dtype, model_type;
  // What its source says the linear weights are quantized as (a config.json's quantization_config, as vLLM's
  // QuantizationConfig.from_config reads it); method "": not stated.
  StoredQuantization quantization;
  // The sliding window vLLM gives the model's attention layers (a mistral config.json's sliding_window, carried
  // for serve --engine vllm only: onnx_import/hf_config.h), and per decoder layer whether it is windowed; 0 and
  // empty: none stated (an ONNX file does not say).
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // The rotated part of head_dim where the source states it (a config.json: Phi-3's partial_rotary_factor, else
  // head_dim); 0: not stated.
  int64_t rotary_dim = 0;
  // The rotary tables of distinct configurations the layers use where the source states them (a config.json: 2 for
  // gemma3_text's sliding layers on rope_local_base_freq beside its full ones on rope_theta, else 1), and whether a
  // linear rope_scaling stretches one (gemma3_text's factor); 0 and false: not stated.
  int64_t rotary_tables = 0;
  bool rotary_scaled = false;
  MlaDims mla;
  // The KV cache where the source states it (a config.json's decode graph: onnx_import/llama_graph.h
  // config_kv_cache); no pairs: not stated (an ONNX file, whose cache cost_models/kv_cache.h finds by probing).
  StatedKvCache kv_cache;
  // Dimensions the source defines as sums of others (a config.json's attention mask: total_sequence_length =
  // past_sequence_length + sequence_length in its decode graph), which import_model binds from their terms when
  // every term is bound and the sum is not; empty for an ONNX file.
  std::map<std::string, std::vector<std::string>> dim_sums;
  std::vector<std::string> warnings;
};

// Throws InputError naming `path` when the file is missing, a directory, empty, not protobuf, not an
// ONNX model (no graph), nested too deep, or holds a tensor with a negative dim or an unknown dtype.
ReadModel read_model_file(const std::string& path);

// The same on bytes already in memory (tests; `name` stands for the file in messages).
ReadModel read_model_bytes(const std::string& name, const uint8_t* data, uint64_t size);

}  // namespace memplan
