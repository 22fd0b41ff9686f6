// One call for benchmarks and reports: the lower bound, the arena of every packing algorithm (each
// checked by the invariant checker), the best, and what memory-aware scheduling gains.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/packing.h"
#include "planner/program.h"

namespace memplan {

struct PlannerSummary {
  uint64_t lower_bound_bytes = 0;          // exact sizes, program order
  int32_t peak_step = 0;
  uint64_t aligned_lower_bound_bytes = 0;  // sizes rounded to the alignment: what packing can reach
  std::vector<uint64_t> arena_by_algorithm;  // indexed by PackingAlgorithm
  PackingAlgorithm best_algorithm = PackingAlgorithm::GreedyBySize;
  uint64_t best_arena_bytes = 0;
  // Memory-aware schedule (schedule.h): its lower bound and best arena (equal to the above when the
  // original order was kept).
  bool reordered = false;
  uint64_t scheduled_lower_bound_bytes = 0;
  uint64_t scheduled_best_arena_bytes = 0;
};

// Throws InternalError if any algorithm's plan fails check_plan.
PlannerSummary summarize_planning(const Program& program, uint64_t alignment = kDefaultAlignment);

}  // namespace memplan
