// What a program needs of a device, measured on the allocator of the runtime that runs it: the one measure
// every decision takes (estimate's totals, fit and check against a budget, --checkpoint auto, the busiest
// pipeline stage). Knows allocators, not why a buffer has its size.
//   allocated  the allocator's peak of bytes handed out: the exact live peak plus resident bytes (Exact),
//              max_memory_allocated (PytorchCaching), MaxInUse (OrtMemoryPattern)
//   reserved   its peak of bytes obtained from the device: resident bytes plus the best packed arena of exact
//              sizes (Exact), max_memory_reserved with no capacity (PytorchCaching), TotalAllocated (Ort)
//   required   the least device memory the program runs in: for PytorchCaching the capacity on which the
//              allocator, freeing its cache and retrying when a cudaMalloc fails, serves every request and one
//              2 MiB unit less does not (pytorch_min_capacity, by bisection: between allocated and reserved;
//              not always the least capacity that runs); for the others reserved (one arena
//              of its planned size)
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/alloc_replay.h"
#include "planner/liveness.h"
#include "planner/packing.h"
#include "planner/program.h"

namespace memplan {

enum class AllocatorKind : uint8_t {
  Exact,             // one arena of exact sizes, packed as well as the planner packs (no runtime's rounding)
  PytorchCaching,    // PyTorch's CUDA caching allocator (alloc_pytorch.h)
  OrtMemoryPattern,  // ONNX Runtime's BFC arena in the memory pattern's steady state (alloc_ort_bfc.h)
};

struct RuntimeAllocator {
  AllocatorKind kind = AllocatorKind::Exact;
  bool expandable_segments = false;  // PytorchCaching: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
};

struct Measure {
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t required_bytes = 0;
};

// What a measure computed on the way, for a report that shows more than the three figures.
struct MeasureWork {
  std::vector<LiveRange> ranges;
  LiveBytes live;
  std::optional<BestPacking> arena;  // Exact, OrtMemoryPattern: the packed arena the figures rest on
  ReplayOrder order;                 // PytorchCaching
  AllocatorReplay replay;            // PytorchCaching: with no capacity; OrtMemoryPattern: the memory pattern
};

// `work`, when given, receives the liveness and the allocator's work (computed once either way).
Measure measure(const Program& program, RuntimeAllocator allocator, MeasureWork* work = nullptr);

// Resident bytes plus the exact live peak: no allocator's required bytes are fewer (each hands out at least
// the exact bytes of what is live at once). Cheap: no packing, no replay; a search can pass over a program
// whose floor is already more than it looks for.
uint64_t measure_floor(const Program& program);

// The alignment of the static arena a report shows for an allocator: exact sizes for Exact, ORT's 256-byte
// rounding (bfc_arena.h, kMinAllocationSize) otherwise (the memory pattern's arena; PyTorch's figures do not
// depend on it).
uint64_t arena_alignment(AllocatorKind kind);

}  // namespace memplan
