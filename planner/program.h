// The planner's input: a memory program. The cost model turns a shaped graph into buffers and steps;
// the planner never knows why a buffer has its size or what a step computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memplan {

// What a buffer is, for breakdowns and timelines only: packing and simulation treat all alike.
enum class Category : uint8_t {
  Weight,          // parameters and buffers of the model (resident)
  Activation,      // node outputs, graph inputs and outputs, saved-for-backward tensors
  Gradient,        // parameter gradients (persist after first write)
  ActivationGrad,  // gradients of activations (transient during backward)
  OptimizerState,  // momentum, exp_avg, exp_avg_sq, fp32 master copies
  Workspace,       // library scratch (cuBLAS, cuDNN), per-step temporaries
};
const char* category_name(Category c);
inline constexpr int kNumCategories = 6;

enum class Phase : uint8_t { Forward, Backward, Optimizer };
const char* phase_name(Phase p);

struct Buffer {
  std::string name;          // tensor name, or a made-up name for workspaces ("cublas_workspace")
  uint64_t bytes = 0;        // exact requested size (no allocator rounding)
  Category category = Category::Activation;
  // Resident for the whole program (weights, persistent workspaces, optimizer states in steady state):
  // allocated before step 0, never freed, excluded from arena packing and reported apart.
  bool resident = false;
  bool live_at_start = false;  // allocated before step 0 (graph inputs), freed after its last use
  bool live_at_end = false;    // kept after the last step (graph outputs, parameter grads)
};

struct Step {
  std::string name;             // node name ("/layer1/conv/Conv", "backward:/layer1/conv/Conv")
  std::string op;               // op type, for reports
  Phase phase = Phase::Forward;
  std::vector<int32_t> reads;   // buffer ids used by this step
  std::vector<int32_t> writes;  // buffer ids first produced by this step (a buffer is written by one step)
  uint64_t flops = 0;           // for recompute cost reports; 0 when unknown
};

struct Program {
  std::vector<Buffer> buffers;
  std::vector<Step> steps;      // the execution order
};

// Inclusive live range of a buffer on the schedule's clock: [first, last] step indices.
struct LiveRange {
  int32_t first = 0;
  int32_t last = 0;
};

}  // namespace memplan
