// build_llama_graph's model around LlamaBuilder's graph (llama_graph.h): the inputs and outputs as
// tests/models/export_llama.py and export_llama_kv.py declare them, the KV cache and the summed dimension the graph
// states, the tie recorded in the metadata, and the initializers pointed at data that does not exist.
#include "onnx_import/llama_graph.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "onnx_import/decoder_builder.h"
#include "onnx_import/graph.h"
#include "onnx_import/hf_param_order.h"

namespace memplan {

using onnx::TensorProto;

namespace {

// A graph input or output: each dim a name (dim_param) or, when `name` is empty, a number.
struct Dim {
  std::string name;
  int64_t value = 0;
};
void add_tensor_value(onnx::ValueInfoProto* v, const std::string& name, int type, const std::vector<Dim>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  for (const Dim& d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (d.name.empty()) dim->set_dim_value(d.value);
    else dim->set_dim_param(d.name);
  }
}

// The weight-less form of tests/models/export_llama.py's point_at_missing_data: every initializer's bytes in a
// data file that does not exist (memplan never opens it), offsets aligned to 4 KiB as onnx's external_data_helper.
void point_at_missing_data(onnx::GraphProto& g) {
  int64_t offset = 0;
  for (TensorProto& t : *g.mutable_initializer()) {
    int64_t length = 4;
    for (int64_t d : t.dims()) length *= d;
    t.set_data_location(TensorProto::EXTERNAL);
    t.clear_external_data();
    for (auto [key, value] : {std::pair<std::string, std::string>{"location", "config.onnx.data"},
                              {"offset", std::to_string(offset)}, {"length", std::to_string(length)}}) {
      auto* entry = t.add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
    offset += (length + 4095) / 4096 * 4096;
  }
}

// The attention mask's length: the cached and the new tokens (ORT GenAI's name, and export_llama_kv.py's).
constexpr const char* kTotalTokensDim = "total_sequence_length";
}  // namespace

std::map<std::string, std::vector<std::string>> config_dim_sums(ConfigGraph kind) {
  if (kind == ConfigGraph::Train) return {};
  const StatedKvCache names = config_kv_cache(DecoderConfig{});
  if (kind == ConfigGraph::Prefill) return {{kTotalTokensDim, {names.new_dim}}};
  return {{kTotalTokensDim, {names.cached_dim, names.new_dim}}};
}

StatedKvCache config_kv_cache(const DecoderConfig& config) {
  StatedKvCache cache{"past_sequence_length", "sequence_length", 2, {}};
  for (int64_t l = 0; l < config.num_hidden_layers; ++l)
    for (const char* part : {"key", "value"})
      cache.pairs.emplace_back("past_key_values." + std::to_string(l) + "." + part,
                               "present." + std::to_string(l) + "." + part);
  return cache;
}

void build_llama_graph(const DecoderConfig& config, ConfigGraph kind, onnx::ModelProto& model) {
  // torch.onnx.export's model header (torch/onnx/utils.py): IR version 8 and opset 17 for torch 1.13, graph
  // "torch_jit". The producer is memplan, which built it.
  model.set_ir_version(8);
  model.set_producer_name("memplan");
  model.set_producer_version("config.json");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  if (config.grouped_experts) {  // the ATen fallback's domain (onnx_import/hf_moe_grouped.h), version 1
    auto* aten = model.add_opset_import();
    aten->set_domain("org.pytorch.aten");
    aten->set_version(1);
  }
  onnx::GraphProto& g = *model.mutable_graph();
  g.set_name("torch_jit");
  const int64_t kv = config.num_key_value_heads, hd = config.head_dim;
  // deepseek_v3's DynamicCache: decompressed keys (qk_nope + qk_rope) and values (v_head_dim) per head.
  const int64_t key_dim = config.mla ? config.qk_nope_head_dim + config.qk_rope_head_dim : hd;
  const int64_t value_dim = config.mla ? config.v_head_dim : hd;
  const bool train = kind == ConfigGraph::Train;
  // tests/models/export_llama.py's and export_llama_kv.py's names (optimum's for the cache).
  const StatedKvCache cache = config_kv_cache(config);
  const std::string batch = train ? "batch" : "batch_size", seq = train ? "seq" : cache.new_dim;
  const std::string total = kind == ConfigGraph::Decode ? kTotalTokensDim : seq;
  add_tensor_value(g.add_input(), "input_ids", TensorProto::INT64, {{batch}, {seq}});
  if (!train) {
    add_tensor_value(g.add_input(), "attention_mask", TensorProto::INT64, {{batch}, {kTotalTokensDim}});
    add_tensor_value(g.add_input(), "position_ids", TensorProto::INT64, {{batch}, {seq}});
  }
  if (kind == ConfigGraph::Decode)
    for (size_t k = 0; k < cache.pairs.size(); ++k)  // key, value of each layer
      add_tensor_value(g.add_input(), cache.pairs[k].first, TensorProto::FLOAT,
                       {{batch}, {"", kv}, {cache.cached_dim}, {"", k % 2 == 0 ? key_dim : value_dim}});
  LlamaBuilder builder(config, kind, g);
  builder.build();
  order_as_registered(config, g);  // transformers' model.parameters() order (onnx_import/hf_param_order.h)
  builder.emitter().finish(g, g.input_size() + builder.initializers(), builder.outputs(), !train);
  // The tie the config states, which folding hides (the head reads a transposed copy of the embedding): recorded in
  // the model's metadata, so that the head is held once (Graph::recorded_tied_copies) here and in an exported file.
  for (const auto& [copy, param] : builder.emitter().tied_copies()) {
    onnx::StringStringEntryProto* e = model.add_metadata_props();
    e->set_key(kTiedCopyMetadataKey);
    e->set_value(copy + "=" + param);
  }
  // The config's hidden_size, which HF Trainer's DeepSpeed "auto" keys read (model.config.hidden_size) and the graph
  // does not always show (Gemma's projections are not square): Graph::recorded_hidden_size.
  onnx::StringStringEntryProto* hidden = model.add_metadata_props();
  hidden->set_key(kHiddenSizeMetadataKey);
  hidden->set_value(std::to_string(config.hidden_size));
  add_tensor_value(g.add_output(), "logits", TensorProto::FLOAT, {{batch}, {seq}, {"", config.vocab_size}});
  if (!train)
    for (size_t k = 0; k < cache.pairs.size(); ++k) {
      const std::string& present = cache.pairs[k].second;
      const bool key = k % 2 == 0;
      add_tensor_value(g.add_output(), present, TensorProto::FLOAT,
                       {{batch}, {"", kv}, {total},
                        // torch's shape inference leaves the prefill's key (cat of the nope keys and the
                        // expanded rope key) a named last dim
                        config.mla && key && kind == ConfigGraph::Prefill ? Dim{"Concat" + present + "_dim_3"}
                                                                          : Dim{"", key ? key_dim : value_dim}});
    }
  point_at_missing_data(g);
}

}  // namespace memplan
