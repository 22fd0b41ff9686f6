// The grouped-experts tests' fixture: kTinyQwen3MoeConfig written to a folder of this test process, and its training
// graph shaped at batch 1 by the experts' implementation, routing, sequence and expert parallelism asked for.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "onnx_import/model_session.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/tiny_qwen3_moe.h"

namespace memplan::testing {

class TinyQwen3MoeTest : public ::testing::Test {
 protected:
  explicit TinyQwen3MoeTest(std::string folder) : folder_(std::move(folder)) {}
  void SetUp() override {
    dir_ = process_temp_dir(folder_);
    path_ = (dir_ / "config.json").string();
    std::ofstream(path_) << kTinyQwen3MoeConfig;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The "train" graph at batch 1 x `seq`; the session stays alive with the graph.
  std::shared_ptr<const Graph> moe_graph(const std::string& experts, const std::string& routing = "", int64_t seq = 128,
                                         int ep = 1) {
    session_ = std::make_unique<ModelSession>(path_, "train", routing, false, experts, ep);
    Bindings b;
    b.dims = {{"batch", 1}, {"seq", seq}};
    b.graph = "train", b.experts = experts, b.moe_routing = routing, b.expert_parallel = ep;
    return session_->shape(b);
  }
  std::string folder_;
  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<ModelSession> session_;
};

}  // namespace memplan::testing
