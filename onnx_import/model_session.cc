#include "onnx_import/model_session.h"

#include <set>

#include "onnx_import/hf_config.h"
#include "onnx_import/model_reader.h"

namespace memplan {

ModelSession::ModelSession(std::string path, std::string graph) : path_(std::move(path)), graph_(std::move(graph)) {}

ModelSession::~ModelSession() = default;

const ReadModel& ModelSession::model() {
  if (!model_) {
    model_ = std::make_unique<const ReadModel>(read_model_source(path_, graph_));
    ++files_read_;
  }
  return *model_;
}

int64_t ModelSession::max_positions() { return model().max_positions; }

const std::vector<DeclaredInput>& ModelSession::declared_inputs() {
  if (!declared_inputs_) {
    const onnx::GraphProto& g = model().proto.graph();
    std::set<std::string> inits;
    for (const auto& i : g.initializer()) inits.insert(i.name());
    std::vector<DeclaredInput> inputs;
    for (const auto& vi : g.input()) {
      if (inits.count(vi.name()) || !vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) continue;
      DeclaredInput in{vi.name(), {}};
      for (const auto& d : vi.type().tensor_type().shape().dim()) in.dims.push_back(d.has_dim_param() ? d.dim_param() : "");
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
