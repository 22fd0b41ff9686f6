#include "planner/measure.h"

#include "onnx_import/checked.h"
#include "planner/alloc_ort_bfc.h"
#include "planner/alloc_pytorch.h"

namespace memplan {

uint64_t arena_alignment(AllocatorKind kind) { return kind == AllocatorKind::Exact ? 1 : ort::kMinAllocationSize; }

Measure measure(const Program& program, RuntimeAllocator allocator, MeasureWork* work) {
  MeasureWork local;
  MeasureWork& w = work ? *work : local;
  Measure m;
  if (work || allocator.kind != AllocatorKind::PytorchCaching) {
    w.ranges = compute_liveness(program);
    w.live = compute_live_bytes(program, w.ranges);
  }
  switch (allocator.kind) {
    case AllocatorKind::Exact:
      w.arena = choose_best(usage_records(program, w.ranges).records, arena_alignment(allocator.kind));
      m.allocated_bytes = checked_add(w.live.resident_bytes, w.live.peak_bytes);
      m.reserved_bytes = checked_add(w.live.resident_bytes, w.arena->result.arena_bytes);
      m.required_bytes = m.reserved_bytes;
      break;
    case AllocatorKind::PytorchCaching:
      w.order = replay_order(program);
      w.replay = replay_program(program, w.order, *make_pytorch_allocator({0, allocator.expandable_segments}));
      m.allocated_bytes = w.replay.peak_allocated_bytes;
      m.reserved_bytes = w.replay.peak_reserved_bytes;
      m.required_bytes = pytorch_min_capacity(program, w.order, w.replay, allocator.expandable_segments);
      break;
    case AllocatorKind::OrtMemoryPattern:
      // Steady state with the memory pattern: initializers one by one, then one block of the planned arena.
      w.arena = choose_best(usage_records(program, w.ranges).records, arena_alignment(allocator.kind));
      w.replay = simulate_ort_memory_pattern(program, w.arena->result.arena_bytes);
      m.allocated_bytes = w.replay.peak_allocated_bytes;
      m.reserved_bytes = w.replay.peak_reserved_bytes;
      m.required_bytes = m.reserved_bytes;
      break;
  }
  return m;
}

uint64_t measure_floor(const Program& program) {
  const LiveBytes live = compute_live_bytes(program, compute_liveness(program));
  return checked_add(live.peak_bytes, live.resident_bytes, "peak bytes");
}

}  // namespace memplan
