// Memory-aware scheduling: a topological order of the steps (constrained only by data: the writer of a
// buffer runs before its readers) that lowers the lower bound. The ordering of steps by anything other
// than data (streams, side effects) is not modelled; a cost model that needs such an edge must express it
// as a buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/program.h"

namespace memplan {

struct ScheduleResult {
  std::vector<int32_t> order;          // indices into program.steps, in the chosen execution order
  uint64_t original_peak_bytes = 0;    // lower bound of the program's own order
  uint64_t greedy_peak_bytes = 0;      // lower bound of the greedy order
  uint64_t chosen_peak_bytes = 0;      // min of the two: the greedy order is kept only if strictly better
  bool reordered = false;              // true when `order` is the greedy order
};

// Greedy list scheduling: among the ready steps, run the one that leaves the fewest live bytes after it
// (bytes it allocates minus bytes whose last reader it is), ties to the lower original index. Keys are
// updated incrementally (each buffer changes one ready step's key at most once), so the whole pass is
// O((steps + edges) log steps). Falls back to the original order when that is not worse.
ScheduleResult memory_aware_schedule(const Program& program);

// Empty when `order` is a permutation of the steps in which every buffer's writer precedes its readers;
// otherwise says why not (naming the steps). Uses Boost.Graph for the dependency DAG.
std::string check_topological_order(const Program& program, const std::vector<int32_t>& order);

// The program with its steps in `order` (buffers unchanged). Throws InternalError if the order is invalid.
Program apply_order(const Program& program, const std::vector<int32_t>& order);

}  // namespace memplan
