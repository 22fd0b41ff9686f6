#include "report/trace.h"

#include <unordered_map>

#include "onnx_import/errors.h"
#include "planner/alloc_pytorch.h"

namespace memplan {

AllocationTrace pytorch_allocation_trace(const Graph& graph, const EstimateOptions& options) {
  if (options.execution.runtime != Runtime::PyTorch)
    throw InputError(std::string("an allocation trace replays PyTorch's caching allocator: --runtime ") +
                     runtime_name(options.execution.runtime) + " has none (use --runtime pytorch)");
  const EstimateProgram ep = build_estimate_program(graph, options);
  const Program& p = ep.program;
  AllocationTrace t;
  for (const Buffer& b : p.buffers) t.buffers.push_back({b.name, b.category});
  for (const Step& s : p.steps) t.step_names.push_back(s.name);
  CudaCachingAllocatorSim sim;
  uint64_t reserved = 0;
  std::unordered_map<int64_t, std::pair<uint64_t, uint64_t>> blocks;  // handle -> (address, size) when allocated
  const AllocatorReplay r = replay_program(p, sim, [&](int32_t buffer, int32_t step, int64_t handle, bool allocated) {
    const uint64_t requested = p.buffers[buffer].bytes;
    if (!allocated) {
      const auto [address, size] = blocks.at(handle);
      t.events.push_back({TraceEvent::Free, address, size, requested, buffer, step});
      blocks.erase(handle);
      return;
    }
    const uint64_t address = sim.block_address(handle), size = sim.block_size(handle);
    // A miss cudaMallocs a segment and carves the block from its start (no segment is ever released here:
    // the replay sets no capacity, so release_cached_blocks never runs).
    if (sim.reserved_bytes() > reserved) {
      t.events.push_back({TraceEvent::SegmentAlloc, address, sim.reserved_bytes() - reserved, 0, -1, step});
      reserved = sim.reserved_bytes();
    }
    t.events.push_back({TraceEvent::Alloc, address, size, requested, buffer, step});
    blocks[handle] = {address, size};
  });
  t.peak_allocated_bytes = r.peak_allocated_bytes;
  t.peak_reserved_bytes = r.peak_reserved_bytes;
  return t;
}

}  // namespace memplan
