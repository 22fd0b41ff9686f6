// The predicted allocation trace of an estimate's program through PyTorch's caching allocator: every request in
// replay order with the block's simulated address and size, and every segment cudaMalloc'd. What
// memplan.torch.snapshot writes in the format of torch.cuda.memory._dump_snapshot for PyTorch's memory viewer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx_import/graph.h"
#include "report/estimate.h"

namespace memplan {

struct TraceEvent {
  enum Action { SegmentAlloc, Alloc, Free } action = Alloc;
  uint64_t address = 0;
  uint64_t size = 0;            // the block (rounded by the allocator) or the segment
  uint64_t requested_bytes = 0; // the buffer's exact bytes (Alloc, Free)
  int32_t buffer = -1;          // index into AllocationTrace::buffers (-1 for SegmentAlloc)
  int32_t step = -1;            // -1: before the first step (weights, states, inputs)
};

struct TraceBuffer {
  std::string name;
  Category category = Category::Activation;
};

struct AllocationTrace {
  std::vector<TraceBuffer> buffers;
  std::vector<std::string> step_names;
  std::vector<TraceEvent> events;
  uint64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;  // as estimate_graph's pytorch runtime reports
};

// build_estimate_program(graph, options).program replayed through CudaCachingAllocatorSim (runtime pytorch; the
// options' runtime must be pytorch). Throws InputError for other runtimes.
AllocationTrace pytorch_allocation_trace(const Graph& graph, const EstimateOptions& options);

}  // namespace memplan
