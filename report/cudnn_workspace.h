// The cuDNN convolution workspace of a PyTorch program, as a range: memplan cannot know which engine
// cuDNN runs (that depends on the cuDNN version, the GPU, the shapes and cudnn.benchmark), but PyTorch
// bounds what the engine may take, and PyTorch never fails a step on it.
//  - Lower end, 0 bytes: what the estimate counts, and what `fit` and `check` budget, with or without
//    cudnn.benchmark (--cudnn-benchmark). Every allocation of a convolution's workspace that fails is caught and
//    another engine is taken:
//      without benchmark, the heuristic engine configs are tried in order, an out-of-memory error moving to the
//      next (aten/src/ATen/native/cudnn/Conv_v8.cpp, run_single_conv -> try_configs; Conv_v7.cpp,
//      AlgoIterator::try_all);
//      with benchmark, the first call of each shape times only the plans whose workspace is not above the
//      largest free block (generate_and_filter_plans: get_available_workspace, CUDACachingAllocator::cacheInfo),
//      halving the trial workspace on an out-of-memory error, then runs the fastest plan whose workspace can be
//      allocated (try_plans, catching c10::OutOfMemoryError) and caches it (benchmark_cache.update);
//      at a later call the cached plan's workspace is allocated again, and when it no longer fits the
//      OutOfMemoryError is caught and the benchmark runs again at what is free then, its plan replacing the cached
//      one (run_single_conv: the benchmark_cache.find branch; the entry is overwritten since pytorch/pytorch#97838).
//      Conv_v7.cpp does the same: AlgoIterator::try_all catches the cached algorithm's OutOfMemoryError and
//      searches again (findAlgorithms with getMaxWorkspaceSize's cacheInfo limit).
//  - Upper end, the free memory at the call: with cudnn.benchmark the plan kept is the fastest one whose
//    workspace fits in the largest free block when it is timed, so its workspace can be anything up to the free
//    memory at that call (cacheInfo starts from cudaMemGetInfo's free bytes). On a card, that is its usable
//    memory minus what is allocated at the convolution.
// Training: the first iteration runs before the optimizer's states exist (torch.optim creates them lazily at the
// first step()), so a convolution of the first iteration can have more free memory than the same convolution
// later: first_iteration_extra_free says how much more, at most, over the convolutions. A plan chosen then with
// a workspace larger than what is free later is timed again at the second iteration's call (above): a cache
// flush and a benchmark, once per such convolution, not an out-of-memory error.
// What memplan does not model: the workspace block a call leaves cached in the allocator can be split by the
// tensors allocated after it (fragmentation); how much depends on the plan's workspace, which is not knowable
// before cuDNN times the plans.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/program.h"

namespace memplan {

struct CudnnWorkspaceRange {
  int32_t convolution_steps = 0;                 // steps that call cuDNN convolutions
  uint64_t counted_bytes = 0;                    // the lower end: included in the estimate (and in fit)
  uint64_t least_allocated_at_convolution = 0;   // allocated bytes at the convolution step with the least
  bool benchmark = true;                         // torch.backends.cudnn.benchmark (--cudnn-benchmark)
  // Training with benchmark: the largest (allocated at a convolution step of the steady iteration) − (allocated
  // at the step of the same name in the first iteration), 0 when no convolution has less free later; the step
  // where it is largest ("" when 0). nullopt: not compared (inference, or benchmark off).
  std::optional<uint64_t> first_iteration_extra_free;
  std::string first_iteration_extra_free_at;
};

// The first iteration of a training step, to compare with the steady one: its program and the PyTorch
// allocator replay's allocated bytes per step.
struct FirstIterationAllocated {
  const Program* program = nullptr;
  const std::vector<uint64_t>* allocated_per_step = nullptr;
};

// nullopt when no step calls a cuDNN convolution. `allocated_per_step`: the PyTorch allocator replay's.
std::optional<CudnnWorkspaceRange> cudnn_workspace_range(const Program& program,
                                                         const std::vector<uint64_t>& allocated_per_step,
                                                         bool benchmark = true,
                                                         const FirstIterationAllocated& first_iteration = {});

// The estimate's note on the range: what is counted, why, and (benchmark) what the benchmark may take.
std::string cudnn_workspace_note(const CudnnWorkspaceRange& r);

}  // namespace memplan
