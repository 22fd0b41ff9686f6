// The cuDNN convolution workspace of a PyTorch program, as a range: memplan cannot know which engine
// cuDNN runs (that depends on the cuDNN version, the GPU, the shapes and cudnn.benchmark), but PyTorch
// bounds what the engine may take.
//  - Lower end, 0 bytes: what the estimate counts, and what `fit` budgets. PyTorch never fails a step on a
//    workspace: without cudnn.benchmark it tries cuDNN's heuristic engine configs in order and moves to the
//    next on an out-of-memory error (Conv_v8.cpp, try_configs; Conv_v7.cpp, AlgoIterator::try_all); with
//    it, it only times plans whose workspace fits, halving the trial workspace on an out-of-memory error
//    (Conv_v8.cpp, generate_and_filter_plans).
//  - Upper end, the free memory at the call: with cudnn.benchmark the first call of each shape allocates
//    the largest plan workspace not above CUDACachingAllocator::cacheInfo's largest block, which starts
//    from cudaMemGetInfo's free bytes (CUDACachingAllocator.cpp, cacheInfo): reserved memory can rise to
//    the card's capacity there, cached afterwards and released on a later cudaMalloc failure. On a card,
//    that is its usable memory minus what is allocated at the convolution call with the least in use.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/program.h"

namespace memplan {

struct CudnnWorkspaceRange {
  int32_t convolution_steps = 0;                 // steps that call cuDNN convolutions
  uint64_t counted_bytes = 0;                    // the lower end: included in the estimate (and in fit)
  uint64_t least_allocated_at_convolution = 0;   // allocated bytes at the convolution step with the least
};

// nullopt when no step calls a cuDNN convolution. `allocated_per_step`: the PyTorch allocator replay's.
std::optional<CudnnWorkspaceRange> cudnn_workspace_range(const Program& program,
                                                         const std::vector<uint64_t>& allocated_per_step);

}  // namespace memplan
