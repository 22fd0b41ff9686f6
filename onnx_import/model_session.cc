#include "onnx_import/model_session.h"

#include "onnx_import/model_reader.h"

namespace memplan {

ModelSession::ModelSession(std::string path) : path_(std::move(path)) {}

ModelSession::~ModelSession() = default;

const ReadModel& ModelSession::model() {
  if (!model_) {
    model_ = std::make_unique<const ReadModel>(read_model_file(path_));
    ++files_read_;
  }
  return *model_;
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
