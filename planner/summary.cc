#include "planner/summary.h"

#include "onnx_import/errors.h"
#include "planner/invariants.h"
#include "planner/liveness.h"
#include "planner/schedule.h"

namespace memplan {
namespace {

struct Packed {
  std::vector<uint64_t> arenas;
  PackingAlgorithm best = PackingAlgorithm::GreedyBySize;
  uint64_t best_arena = 0;
};

Packed pack_all_checked(const std::vector<UsageRecord>& records, uint64_t alignment) {
  Packed out;
  const std::vector<PackingResult> all = pack_all(records, alignment);
  for (int a = 0; a < kNumPackingAlgorithms; ++a) {
    const auto algorithm = static_cast<PackingAlgorithm>(a);
    const PackingResult& r = all[a];
    if (const auto v = check_plan(records, r.offsets, r.arena_bytes, alignment); !v.empty())
      throw InternalError(std::string(packing_algorithm_name(algorithm)) + " made an invalid plan: " + v[0].message);
    out.arenas.push_back(r.arena_bytes);
    if (a == 0 || r.arena_bytes < out.best_arena) {
      out.best = algorithm;
      out.best_arena = r.arena_bytes;
    }
  }
  return out;
}

}  // namespace

PlannerSummary summarize_planning(const Program& program, uint64_t alignment) {
  PlannerSummary s;
  const std::vector<LiveRange> ranges = compute_liveness(program);
  const LiveBytes live = compute_live_bytes(program, ranges);
  s.lower_bound_bytes = live.peak_bytes;
  s.peak_step = live.peak_step;
  const ProgramRecords pr = usage_records(program, ranges);
  s.aligned_lower_bound_bytes = aligned_lower_bound(pr.records, alignment);
  const Packed packed = pack_all_checked(pr.records, alignment);
  s.arena_by_algorithm = packed.arenas;
  s.best_algorithm = packed.best;
  s.best_arena_bytes = packed.best_arena;

  const ScheduleResult schedule = memory_aware_schedule(program);
  s.reordered = schedule.reordered;
  s.scheduled_lower_bound_bytes = schedule.chosen_peak_bytes;
  if (schedule.reordered) {
    const Program reordered = apply_order(program, schedule.order);
    const ProgramRecords rr = usage_records(reordered, compute_liveness(reordered));
    s.scheduled_best_arena_bytes = pack_all_checked(rr.records, alignment).best_arena;
  } else {
    s.scheduled_best_arena_bytes = s.best_arena_bytes;
  }
  return s;
}

}  // namespace memplan
