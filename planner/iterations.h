// A training run as the caching allocator sees it: the first iteration, then steady ones, on one allocator of a
// given capacity. fit and check decide on the steady step measured on a fresh allocator, its resident buffers
// placed first (planner/measure.h); a real run reaches that step through the first iteration, whose blocks
// PyTorch's caching allocator keeps cached until a cudaMalloc fails (c10/cuda/CUDACachingAllocator.cpp), and
// torch.optim creates its states at the first step() (torch/optim/adam.py _init_group), into whatever the first
// forward and backward left in the cache. On the zoo the sequence needs up to 2.33 % more than the steady step
// alone (bench/iterations/README.md).
//
// The sequence:
//  1. the first iteration's program: everything it allocates is held until freed by its own order;
//  2. what the steady program holds before its first step (its resident buffers: weights, optimizer states,
//     library workspaces) is the first iteration's block of the same name, kept (a resident the first iteration
//     lacks is allocated by the first steady one and kept from then on); everything else the first iteration
//     left (the grads, which zero_grad(set_to_none=True) frees; outputs) is freed;
//  3. the steady program, again and again, without its resident buffers (kept), freeing what it left that is not
//     resident before the next one, until the allocator's layout at an iteration's start repeats one seen before
//     (CudaCachingAllocatorSim::layout): the replay is deterministic, so every later iteration repeats one that
//     ran.
#pragma once

#include <cstdint>

#include "planner/program.h"

namespace memplan {

// A guard on the iterations replayed, never reached on the zoo (bench/iterations: settled within six).
inline constexpr int kMaxSteadyIterations = 32;

struct IterationsAtCapacity {
  bool runs = false;           // the first iteration and every steady one replayed ran
  bool settled = false;        // the layout repeated: every later iteration runs too
  int steady_iterations = 0;   // steady iterations replayed
};

// The sequence above on PyTorch's caching allocator (no expandable segments) of `capacity` bytes, stopping at the
// first request it cannot serve, once the layout repeats, or after `max_steady` steady iterations.
IterationsAtCapacity run_iterations_at_capacity(const Program& first, const Program& steady, uint64_t capacity,
                                                int max_steady = kMaxSteadyIterations);

}  // namespace memplan
