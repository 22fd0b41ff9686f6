// The model zoo (tests/models/*.onnx) as memory programs, for the planner's zoo benchmark and zoo test:
// every export at a batch size, inference exports through the PyTorch inference cost model, *_train
// exports through the PyTorch training cost model (Adam, fp32, steady state). The text models (gpt*, bert*)
// get seq 128.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/program.h"

namespace memplan {

struct ZooModel {
  std::string name;  // file stem, e.g. "resnet18_train"
  std::string path;
  bool training = false;
};

// Every *.onnx under `models_dir`, sorted by name.
std::vector<ZooModel> zoo_models(const std::string& models_dir);

// Imports the model with batch `batch` (and seq 128 where the graph has a "seq" dimension) and builds its
// program. Throws what the importer and cost models throw.
Program zoo_program(const ZooModel& model, int64_t batch);

}  // namespace memplan
