// The first iteration, then steady ones, on one simulated caching allocator: does a training step that fits on
// its own (what fit measures: the steady program on a fresh allocator, residents placed first) still fit after
// the iterations a real run goes through? Prints, per case, the steady program's required bytes (planner/measure.h)
// and the least capacity (2 MiB units, by bisection) on which the first iteration followed by k steady ones all
// run, for k = 1..8, as a percentage of the former. Not a test: a measurement for bench/iterations/README.md.
//
// The sequence is planner/iterations.h's.
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "planner/alloc_pytorch.h"
#include "planner/alloc_replay.h"
#include "planner/iterations.h"
#include "planner/measure.h"

namespace memplan {
namespace {

// The least capacity, in 2 MiB units (every segment is a multiple of it), on which the first iteration and
// `steadies` steady ones run (planner/iterations.h).
uint64_t least_capacity(const Program& first, const Program& steady, int steadies, uint64_t start) {
  constexpr uint64_t unit = pytorch::kRoundLarge;
  auto runs = [&](uint64_t units) { return run_iterations_at_capacity(first, steady, units * unit, steadies).runs; };
  uint64_t lo = 0, hi = start / unit + 1;
  while (!runs(hi)) hi *= 2;
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (runs(mid) ? hi : lo) = mid;
  }
  return hi * unit;
}

struct Case {
  const char* model;
  int64_t batch;
  Precision precision;
  const char* precision_name;
};

void row(const Case& c) {
  Bindings b;
  b.batch = c.batch;
  const Graph g = import_model(std::string(MEMPLAN_ZOO_DIR) + "/" + c.model, b);
  ExecutionOptions e;
  e.runtime = Runtime::PyTorch;
  TrainingOptions t;
  t.loss = LossKind::CrossEntropy;
  t.optimizer = Optimizer::AdamW;
  t.precision = c.precision;
  t.steady_state = true;
  const TrainingResult steady = build_training_program(g, e, t);
  t.steady_state = false;
  const TrainingResult first = build_training_program(g, e, t);
  const uint64_t alone = measure(steady.program, {AllocatorKind::PytorchCaching, false}).required_bytes;
  std::printf("| %s | %lld | %s | %llu |", c.model, static_cast<long long>(c.batch), c.precision_name,
              static_cast<unsigned long long>(alone));
  for (int k = 1; k <= 8; ++k) {
    const uint64_t need = least_capacity(first.program, steady.program, k, alone);
    std::printf(" %+.2f |", 100.0 * (static_cast<double>(need) - static_cast<double>(alone)) / static_cast<double>(alone));
  }
  std::printf("\n");
}

}  // namespace
}  // namespace memplan

int main() {
  using memplan::Precision;
  std::printf("| model | batch | precision | steady alone (B) | k=1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 |\n"
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const memplan::Case& c : std::vector<memplan::Case>{
           {"resnet18_train.onnx", 256, Precision::Fp32, "fp32"},
           {"resnet50_train.onnx", 128, Precision::Fp32, "fp32"},
           {"resnet50_train.onnx", 256, Precision::AmpBf16, "amp-bf16"},
           {"mobilenet_v2_train.onnx", 256, Precision::Fp32, "fp32"},
           {"efficientnet_b0_train.onnx", 128, Precision::AmpBf16, "amp-bf16"},
           {"vit_b_16_train.onnx", 64, Precision::AmpBf16, "amp-bf16"},
           {"vit_b_16_train.onnx", 128, Precision::Fp32, "fp32"},
       })
    memplan::row(c);
  return 0;
}
