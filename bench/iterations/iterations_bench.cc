// The first iteration, then steady ones, on one simulated caching allocator: does a training step that fits on
// its own (what fit measures: the steady program on a fresh allocator, residents placed first) still fit after
// the iterations a real run goes through? Prints, per case, the steady program's required bytes (planner/measure.h)
// and the least capacity (2 MiB units, by bisection) on which the first iteration followed by k steady ones all
// run, for k = 1..8, as a percentage of the former. Not a test: a measurement for bench/iterations/README.md.
//
// The sequence, as PyTorch runs it (c10/cuda/CUDACachingAllocator.cpp keeps every segment it cudaMalloc'd until a
// cudaMalloc fails; torch.optim creates its states at the first step(), torch/optim/adam.py _init_group):
//  1. the first iteration's program (TrainingOptions::steady_state = false): the optimizer's states are written
//     at its optimizer step, into whatever the forward and backward left in the cache;
//  2. what the steady program holds before its first step (its resident buffers: weights, optimizer states,
//     library workspaces) is the first iteration's block of the same name, kept; everything else the first
//     iteration left (the grads, which zero_grad(set_to_none=True) frees; outputs) is freed;
//  3. the steady program, k times, each time without its resident buffers (kept), freeing what it left that is
//     not resident before the next one.
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "planner/alloc_pytorch.h"
#include "planner/alloc_replay.h"
#include "planner/measure.h"

namespace memplan {
namespace {

class Iterations {
 public:
  Iterations(const Program& first, const Program& steady)
      : first_(first), steady_(steady), first_order_(replay_order(first)), steady_order_(replay_order(steady)) {}

  // Whether the first iteration and `steadies` steady ones all run on a device of `capacity` bytes.
  bool run(uint64_t capacity, int steadies) const {
    CudaCachingAllocatorSim a({capacity, false});
    std::vector<int64_t> fh(first_.buffers.size(), -1), sh(steady_.buffers.size(), -1);
    if (!replay(a, first_, first_order_, fh, {})) return false;
    std::map<std::string, int32_t> resident;
    for (int32_t b : steady_order_.before_first_step)
      if (steady_.buffers[b].resident) resident[steady_.buffers[b].name] = b;
    std::set<int32_t> kept;
    for (size_t b = 0; b < first_.buffers.size(); ++b) {
      if (fh[b] < 0) continue;
      if (auto it = resident.find(first_.buffers[b].name); it != resident.end()) {
        kept.insert(it->second);
      } else {
        a.release(fh[b]);
      }
    }
    for (int k = 0; k < steadies; ++k) {
      std::fill(sh.begin(), sh.end(), -1);
      if (!replay(a, steady_, steady_order_, sh, kept)) return false;
      for (size_t b = 0; b < steady_.buffers.size(); ++b)
        if (sh[b] >= 0) a.release(sh[b]);  // kept residents were never allocated here (handle -1)
    }
    return true;
  }

  // The least capacity, in 2 MiB units (every segment is a multiple of it), on which run(capacity, steadies) holds.
  uint64_t least_capacity(int steadies, uint64_t start) const {
    constexpr uint64_t unit = pytorch::kRoundLarge;
    uint64_t lo = 0, hi = start / unit + 1;
    while (!run(hi * unit, steadies)) hi *= 2;
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      (run(mid * unit, steadies) ? hi : lo) = mid;
    }
    return hi * unit;
  }

 private:
  // replay_program's order (planner/alloc_replay.h), skipping `kept` and holding what is not freed in `h`.
  static bool replay(CudaCachingAllocatorSim& a, const Program& p, const ReplayOrder& order, std::vector<int64_t>& h,
                     const std::set<int32_t>& kept) {
    auto allocate = [&](int32_t b) {
      if (p.buffers[b].bytes == 0 || kept.count(b)) return true;
      return (h[b] = a.allocate(p.buffers[b].bytes)) >= 0;
    };
    for (int32_t b : order.before_first_step)
      if (!allocate(b)) return false;
    for (size_t s = 0; s < p.steps.size(); ++s) {
      for (int32_t b : p.steps[s].writes)
        if (!p.buffers[b].resident && !allocate(b)) return false;
      for (int32_t b : order.frees_after[s])
        if (h[b] >= 0) {
          a.release(h[b]);
          h[b] = -1;
        }
    }
    return true;
  }

  const Program& first_;
  const Program& steady_;
  const ReplayOrder first_order_, steady_order_;
};

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
  const Iterations it(first.program, steady.program);
  std::printf("| %s | %lld | %s | %llu |", c.model, static_cast<long long>(c.batch), c.precision_name,
              static_cast<unsigned long long>(alone));
  for (int k = 1; k <= 8; ++k) {
    const uint64_t need = it.least_capacity(k, alone);
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
