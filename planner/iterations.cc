#include "planner/iterations.h"

#include <map>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "planner/alloc_pytorch.h"
#include "planner/alloc_replay.h"

namespace memplan {
namespace {

// replay_program, skipping the buffers `held` marks and handing back the handles of what it did not free.
bool replay(CudaCachingAllocatorSim& a, const Program& p, const ReplayOrder& order, std::vector<int64_t>& h,
            std::vector<bool> held) {
  ReplayCarry carry{std::move(held), {}};
  const bool ran = !replay_program(p, order, a, {}, &carry).out_of_memory;
  h = std::move(carry.unfreed);
  return ran;
}

}  // namespace

IterationsAtCapacity run_iterations_at_capacity(const Program& first, const Program& steady, uint64_t capacity,
                                                int max_steady) {
  IterationsAtCapacity r;
  const ReplayOrder first_order = replay_order(first), steady_order = replay_order(steady);
  CudaCachingAllocatorSim a({capacity, false});
  std::vector<int64_t> fh(first.buffers.size(), -1), sh(steady.buffers.size(), -1);
  if (!replay(a, first, first_order, fh, {})) return r;
  // The steady program's residents, found by name among the first iteration's blocks and kept; the rest freed.
  std::map<std::string, int32_t> resident;
  for (int32_t b : steady_order.before_first_step)
    if (steady.buffers[b].resident) resident[steady.buffers[b].name] = b;
  std::vector<bool> kept(steady.buffers.size(), false);
  for (size_t b = 0; b < first.buffers.size(); ++b) {
    if (fh[b] < 0) continue;
    if (auto it = resident.find(first.buffers[b].name); it != resident.end()) kept[it->second] = true;
    else a.release(fh[b]);
  }
  std::set<std::vector<uint64_t>> seen{a.layout()};
  while (r.steady_iterations < max_steady) {
    ++r.steady_iterations;
    if (!replay(a, steady, steady_order, sh, kept)) return r;
    for (size_t b = 0; b < steady.buffers.size(); ++b) {
      if (sh[b] < 0) continue;  // kept residents were never allocated here (handle -1)
      if (steady.buffers[b].resident) kept[b] = true;  // one the first iteration lacked: kept
      else a.release(sh[b]);
    }
    if (!seen.insert(a.layout()).second) {
      r.settled = true;
      break;
    }
  }
  r.runs = true;
  return r;
}

}  // namespace memplan
