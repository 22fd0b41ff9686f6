#include "planner/alloc_replay.h"

#include "planner/liveness.h"

namespace memplan {

ReplayOrder replay_order(const Program& p) {
  const std::vector<LiveRange> ranges = compute_liveness(p);
  const size_t steps = p.steps.size();
  ReplayOrder order;
  for (int pass = 0; pass < 2; ++pass)  // residents first, then graph inputs
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const Buffer& buf = p.buffers[b];
      if (pass == 0 ? buf.resident : !buf.resident && buf.live_at_start)
        order.before_first_step.push_back(static_cast<int32_t>(b));
    }
  order.frees_after.resize(steps);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    if (!buf.resident && !buf.live_at_end && steps > 0)
      order.frees_after[ranges[b].last].push_back(static_cast<int32_t>(b));
  }
  return order;
}

AllocatorReplay replay_program(const Program& p, AllocatorModel& allocator, const ReplayObserver& observer) {
  return replay_program(p, replay_order(p), allocator, observer);
}

AllocatorReplay replay_program(const Program& p, const ReplayOrder& order, AllocatorModel& allocator,
                               const ReplayObserver& observer, ReplayCarry* carry) {
  const size_t steps = p.steps.size();
  AllocatorReplay out;
  std::vector<int64_t> handle(p.buffers.size(), -1);
  int32_t current_step = -1;
  auto allocate = [&](int32_t b) {
    if (p.buffers[b].bytes == 0 || (carry && !carry->held.empty() && carry->held[b])) return true;
    handle[b] = allocator.allocate(p.buffers[b].bytes);
    if (handle[b] < 0) {
      out.out_of_memory = true;
      out.oom_buffer = p.buffers[b].name;
      return false;
    }
    if (observer) observer(b, current_step, handle[b], true);
    if (allocator.allocated_bytes() > out.peak_allocated_bytes) {
      out.peak_allocated_bytes = allocator.allocated_bytes();
      out.peak_allocated_step = current_step;
    }
    return true;
  };
  auto finish = [&] {
    out.peak_reserved_bytes = allocator.peak_reserved_bytes();
    out.num_device_allocations = allocator.num_device_allocations();
    out.num_allocs = allocator.num_allocs();
    if (carry) carry->unfreed = std::move(handle);
    return out;
  };

  for (int32_t b : order.before_first_step)
    if (!allocate(b)) return finish();
  out.before_first_step_allocated = allocator.allocated_bytes();

  out.allocated_per_step.reserve(steps);
  out.reserved_per_step.reserve(steps);
  for (size_t s = 0; s < steps; ++s) {
    current_step = static_cast<int32_t>(s);
    for (int32_t b : p.steps[s].writes)  // a resident buffer written in place was allocated up front
      if (!p.buffers[b].resident && !allocate(b)) return finish();
    out.allocated_per_step.push_back(allocator.allocated_bytes());
    out.reserved_per_step.push_back(allocator.reserved_bytes());
    for (int32_t b : order.frees_after[s])
      if (handle[b] >= 0) {
        allocator.release(handle[b]);
        if (observer) observer(b, current_step, handle[b], false);
        handle[b] = -1;
      }
  }
  return finish();
}

}  // namespace memplan
