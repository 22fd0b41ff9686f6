#include "onnx_import/model_session.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "onnx_import/hf_config.h"
#include "onnx_import/model_reader.h"

namespace memplan {

ModelSession::ModelSession(std::string path, std::string graph, std::string moe_routing, bool vllm_serve,
                           std::string experts, int expert_parallel)
    : path_(std::move(path)), graph_(std::move(graph)), moe_routing_(std::move(moe_routing)),
      experts_(std::move(experts)), expert_parallel_(expert_parallel), vllm_serve_(vllm_serve) {}

ModelSession::~ModelSession() = default;

const ReadModel& ModelSession::model() {
  if (!model_) {
    model_ = std::make_unique<const ReadModel>(read_model_source(path_, graph_, moe_routing_, vllm_serve_, experts_, expert_parallel_));
    ++files_read_;
  }
  return *model_;
}

int64_t ModelSession::max_positions() { return model().max_positions; }

const std::string& ModelSession::model_type() { return model().model_type; }

const StoredQuantization& ModelSession::quantization() { return model().quantization; }

int64_t ModelSession::sliding_window() { return model().sliding_window; }

const std::vector<bool>& ModelSession::sliding_layers() { return model().sliding_layers; }

int64_t ModelSession::rotary_dim() { return model().rotary_dim; }

int64_t ModelSession::rotary_tables() { return model().rotary_tables; }
const MlaDims& ModelSession::mla() { return model().mla; }
const StatedKvCache& ModelSession::stated_kv_cache() { return model().kv_cache; }

bool ModelSession::rotary_scaled() { return model().rotary_scaled; }

namespace {

DType torch_dtype_type(const std::string& torch_dtype) {
  if (torch_dtype == "bfloat16") return DType::BFloat16;
  if (torch_dtype == "float16") return DType::Float16;
  return DType::Float32;
}

DType stored_float_dtype_of(const ReadModel& m) {
  if (!m.stored_dtype.empty()) return torch_dtype_type(m.stored_dtype);
  std::map<int, uint64_t> bytes;  // TensorProto data type -> elements of the floating initializers
  for (const auto& init : m.proto.graph().initializer()) {
    const int t = init.data_type();
    if (t != onnx::TensorProto::FLOAT && t != onnx::TensorProto::FLOAT16 && t != onnx::TensorProto::BFLOAT16) continue;
    uint64_t n = 1;
    for (int64_t d : init.dims()) {  // saturating: a file's dims may claim more than 2^64 elements
      const uint64_t k = static_cast<uint64_t>(std::max<int64_t>(d, 0));
      n = k != 0 && n > UINT64_MAX / k ? UINT64_MAX : n * k;
    }
    bytes[t] = bytes[t] > UINT64_MAX - n ? UINT64_MAX : bytes[t] + n;
  }
  int most = onnx::TensorProto::FLOAT;
  for (const auto& [t, n] : bytes)
    if (n > bytes[most]) most = t;
  return most == onnx::TensorProto::FLOAT16 ? DType::Float16 : most == onnx::TensorProto::BFLOAT16 ? DType::BFloat16
                                                                                                   : DType::Float32;
}

}  // namespace

DType ModelSession::stored_float_dtype() { return stored_float_dtype_of(model()); }

DType stored_float_dtype_at(const std::string& path) {
  if (is_config_path(path)) return torch_dtype_type(config_torch_dtype(path));
  return stored_float_dtype_of(read_model_file(path));
}

const std::vector<DeclaredInput>& ModelSession::declared_inputs() {
  if (!declared_inputs_) {
    const onnx::GraphProto& g = model().proto.graph();
    std::set<std::string> inits;
    for (const auto& i : g.initializer()) inits.insert(i.name());
    std::vector<DeclaredInput> inputs;
    for (const auto& vi : g.input()) {
      if (inits.count(vi.name()) || !vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) continue;
      DeclaredInput in{vi.name(), {}, {}, dtype_from_onnx(vi.type().tensor_type().elem_type()).value_or(DType::Undefined)};
      for (const auto& d : vi.type().tensor_type().shape().dim()) {
        in.dims.push_back(d.has_dim_param() ? d.dim_param() : "");
        in.values.push_back(d.has_dim_value() ? d.dim_value() : -1);
      }
      inputs.push_back(std::move(in));
    }
    declared_inputs_ = std::move(inputs);
  }
  return *declared_inputs_;
}

std::shared_ptr<const Graph> ModelSession::shape(const Bindings& bindings) {
  if (const auto it = graphs_.find(bindings); it != graphs_.end())
    if (std::shared_ptr<const Graph> held = it->second.lock()) return held;
  auto graph = std::make_shared<const Graph>(import_model(model(), path_, bindings));
  ++graphs_shaped_;
  std::erase_if(graphs_, [](const auto& entry) { return entry.second.expired(); });
  graphs_[bindings] = graph;
  return graph;
}

}  // namespace memplan
