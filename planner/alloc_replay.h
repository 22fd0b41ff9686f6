// Replays a Program through an allocator model, in program order: first every resident buffer (buffer
// order), then every live_at_start buffer (buffer order), then at each step its writes in order, after
// which every non-resident, non-live_at_end buffer whose live range ends at that step is freed (buffer
// order). Zero-byte buffers are skipped: both runtimes return no memory for them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/program.h"

namespace memplan {

// What a simulated runtime allocator reports over a replay.
struct AllocatorReplay {
  uint64_t peak_allocated_bytes = 0;  // PyTorch max_memory_allocated / ORT MaxInUse
  uint64_t peak_reserved_bytes = 0;   // PyTorch max_memory_reserved / ORT TotalAllocated (high-water)
  int32_t peak_allocated_step = -1;   // step during which the allocated peak is first reached (-1: before step 0)
  // Per step, sampled after the step's writes are allocated and before its frees (the step's high point).
  std::vector<uint64_t> allocated_per_step;
  std::vector<uint64_t> reserved_per_step;
  uint64_t before_first_step_allocated = 0;  // after residents and live_at_start buffers
  int64_t num_device_allocations = 0;  // cudaMalloc calls (PyTorch segments / ORT arena extensions)
  int64_t num_allocs = 0;              // allocation requests served
  bool out_of_memory = false;          // a request could not be served within the capacity
  std::string oom_buffer;              // the buffer that failed, when out_of_memory
};

// The interface a simulated allocator offers to the replay.
class AllocatorModel {
 public:
  virtual ~AllocatorModel() = default;
  // Returns a handle, or -1 when the request cannot be served (out of memory). bytes > 0.
  virtual int64_t allocate(uint64_t bytes) = 0;
  virtual void release(int64_t handle) = 0;
  virtual uint64_t allocated_bytes() const = 0;  // currently handed out, in allocator units (rounded)
  virtual uint64_t reserved_bytes() const = 0;   // currently obtained from the device
  virtual uint64_t peak_allocated_bytes() const = 0;
  virtual uint64_t peak_reserved_bytes() const = 0;
  virtual int64_t num_device_allocations() const = 0;
  virtual int64_t num_allocs() const = 0;
  // Requests retried after the allocator freed its cache at the capacity (0 for allocators that never do).
  virtual int64_t num_alloc_retries() const { return 0; }
};

// The order a replay allocates and frees in, from the program's liveness: computed once, replayed through
// any number of allocators (a search over device capacities replays one program many times).
struct ReplayOrder {
  std::vector<int32_t> before_first_step;         // resident buffers, then live_at_start ones (buffer order)
  std::vector<std::vector<int32_t>> frees_after;  // per step, the buffers freed after it (buffer order)
};
ReplayOrder replay_order(const Program& program);

// Told of every request the replay makes, after the allocator served it: buffer id, the step (-1 before the first
// step), the allocator's handle, and whether it was an allocation (true) or a release. For traces (memplan.torch's
// snapshot), which read addresses and sizes from the allocator through the handle.
using ReplayObserver = std::function<void(int32_t buffer, int32_t step, int64_t handle, bool allocated)>;

// A replay that continues an earlier one on the same allocator (planner/iterations.h: a training run's iterations):
// the buffers already held, which it skips, and, after it, the handle of every buffer it allocated and did not
// free (-1 for the others).
struct ReplayCarry {
  std::vector<bool> held;        // by buffer id; empty when none is held
  std::vector<int64_t> unfreed;  // out, by buffer id
};

// Stops at the first request the model cannot serve (out_of_memory set; the series end there).
AllocatorReplay replay_program(const Program& program, const ReplayOrder& order, AllocatorModel& allocator,
                               const ReplayObserver& observer = {}, ReplayCarry* carry = nullptr);
AllocatorReplay replay_program(const Program& program, AllocatorModel& allocator, const ReplayObserver& observer = {});

}  // namespace memplan
