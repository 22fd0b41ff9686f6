#include "planner/schedule.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>

#include "onnx_import/errors.h"
#include "planner/liveness.h"

namespace memplan {
namespace {

// Steps are vertices; an edge writer -> reader for every buffer read by another step than its writer.
using DependencyGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

// The distinct reader steps of each buffer, and the writer (or -1).
struct BufferUse {
  std::vector<std::vector<int32_t>> readers;
  std::vector<int32_t> writer;
};

BufferUse buffer_use(const Program& p) {
  BufferUse use;
  use.readers.resize(p.buffers.size());
  use.writer.assign(p.buffers.size(), -1);
  for (int32_t s = 0; s < static_cast<int32_t>(p.steps.size()); ++s) {
    for (int32_t b : p.steps[s].writes) use.writer[b] = s;
    for (int32_t b : p.steps[s].reads)
      if (use.readers[b].empty() || use.readers[b].back() != s) use.readers[b].push_back(s);
  }
  for (auto& r : use.readers) r.erase(std::unique(r.begin(), r.end()), r.end());  // steps ascend already
  return use;
}

DependencyGraph dependency_graph(const Program& p, const BufferUse& use) {
  std::vector<std::pair<int32_t, int32_t>> edges;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const int32_t w = use.writer[b];
    if (!p.buffers[b].resident) {
      for (int32_t r : use.readers[b])
        if (w >= 0 && w != r) edges.emplace_back(w, r);
      continue;
    }
    // A resident buffer exists before step 0 and may be updated in place after it is read (an optimizer
    // writing a weight): keep the program's order between its writer and every reader, on both sides.
    if (w < 0) continue;
    for (int32_t r : use.readers[b])
      if (r != w) edges.emplace_back(std::min(r, w), std::max(r, w));
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  DependencyGraph g(edges.begin(), edges.end(), p.steps.size());
  std::vector<DependencyGraph::vertex_descriptor> sorted;
  try {
    boost::topological_sort(g, std::back_inserter(sorted));
  } catch (const boost::not_a_dag&) {
    throw InternalError("the steps' data dependencies form a cycle");
  }
  return g;
}

// Signed bytes: live-byte deltas need a sign and sums of uint64 sizes must not wrap.
using Delta = __int128;

class GreedyScheduler {
 public:
  GreedyScheduler(const Program& p, const BufferUse& use, const DependencyGraph& g)
      : p_(p), use_(use), g_(g), remaining_(p.buffers.size()), waiting_(p.steps.size()),
        done_(p.steps.size(), false), key_(p.steps.size(), 0) {
    for (size_t b = 0; b < p.buffers.size(); ++b) remaining_[b] = static_cast<int32_t>(use.readers[b].size());
    for (size_t s = 0; s < p.steps.size(); ++s) waiting_[s] = static_cast<int32_t>(boost::in_degree(s, g));
  }

  std::vector<int32_t> run() {
    std::vector<int32_t> order;
    order.reserve(p_.steps.size());
    for (int32_t s = 0; s < static_cast<int32_t>(p_.steps.size()); ++s)
      if (waiting_[s] == 0) make_ready(s);
    while (!ready_.empty()) {
      const int32_t s = ready_.begin()->second;
      ready_.erase(ready_.begin());
      order.push_back(s);
      execute(s);
    }
    return order;
  }

 private:
  bool frees_when_done(int32_t b) const {
    const Buffer& buf = p_.buffers[b];
    return !buf.resident && !buf.live_at_end;
  }

  // Bytes the step allocates minus the bytes whose last remaining reader it is.
  Delta delta_of(int32_t s) const {
    Delta d = 0;
    for (int32_t b : p_.steps[s].writes)
      if (!p_.buffers[b].resident) d += p_.buffers[b].bytes;
    std::vector<int32_t> reads = p_.steps[s].reads;
    std::sort(reads.begin(), reads.end());
    reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
    for (int32_t b : reads)
      if (remaining_[b] == 1 && frees_when_done(b)) d -= p_.buffers[b].bytes;
    return d;
  }

  void make_ready(int32_t s) {
    key_[s] = delta_of(s);
    ready_.insert({key_[s], s});
  }

  void execute(int32_t s) {
    done_[s] = true;
    std::vector<int32_t> reads = p_.steps[s].reads;
    std::sort(reads.begin(), reads.end());
    reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
    for (int32_t b : reads) {
      if (--remaining_[b] != 1 || !frees_when_done(b)) continue;
      // One reader is left: running it now frees b, so its key improves if it is ready.
      for (int32_t r : use_.readers[b]) {
        if (done_[r]) continue;
        auto it = ready_.find({key_[r], r});
        if (it != ready_.end()) {
          ready_.erase(it);
          key_[r] -= p_.buffers[b].bytes;
          ready_.insert({key_[r], r});
        }
        break;
      }
    }
    for (auto e : boost::make_iterator_range(boost::out_edges(s, g_))) {
      const int32_t t = static_cast<int32_t>(boost::target(e, g_));
      if (--waiting_[t] == 0) make_ready(t);
    }
  }

  const Program& p_;
  const BufferUse& use_;
  const DependencyGraph& g_;
  std::vector<int32_t> remaining_;  // readers of each buffer not yet executed
  std::vector<int32_t> waiting_;    // unexecuted predecessors of each step
  std::vector<bool> done_;
  std::vector<Delta> key_;
  std::set<std::pair<Delta, int32_t>> ready_;  // (key, original index): total order, deterministic
};

// Lower bound of the program run in `order` (a valid topological order), without copying the program.
uint64_t peak_of_order(const Program& p, const BufferUse& use, const std::vector<int32_t>& order) {
  const int32_t n = static_cast<int32_t>(order.size());
  if (n == 0) return 0;
  std::vector<int32_t> position(n);
  for (int32_t i = 0; i < n; ++i) position[order[i]] = i;
  std::vector<Delta> change(n + 1, 0);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    if (buf.resident) continue;
    const int32_t first = buf.live_at_start ? 0 : position[use.writer[b]];
    int32_t last = first;
    for (int32_t r : use.readers[b]) last = std::max(last, position[r]);
    if (buf.live_at_end) last = n - 1;
    change[first] += buf.bytes;
    change[last + 1] -= buf.bytes;
  }
  Delta live = 0, peak = 0;
  for (int32_t i = 0; i < n; ++i) peak = std::max(peak, live += change[i]);
  return static_cast<uint64_t>(peak);
}

}  // namespace

std::string check_topological_order(const Program& p, const std::vector<int32_t>& order) {
  const size_t n = p.steps.size();
  if (order.size() != n)
    return "the order has " + std::to_string(order.size()) + " steps, the program " + std::to_string(n);
  std::vector<int32_t> position(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const int32_t s = order[i];
    if (s < 0 || static_cast<size_t>(s) >= n || position[s] != -1)
      return "the order is not a permutation of the steps (at position " + std::to_string(i) + ")";
    position[s] = static_cast<int32_t>(i);
  }
  compute_liveness(p);  // validates buffer ids and that writers precede readers in the original order
  const BufferUse use = buffer_use(p);
  const DependencyGraph g = dependency_graph(p, use);
  for (auto e : boost::make_iterator_range(boost::edges(g))) {
    const auto from = boost::source(e, g), to = boost::target(e, g);
    if (position[from] > position[to])
      return "step '" + p.steps[to].name + "' runs before step '" + p.steps[from].name + "', which writes its input";
  }
  return "";
}

Program apply_order(const Program& p, const std::vector<int32_t>& order) {
  if (std::string why = check_topological_order(p, order); !why.empty()) throw InternalError(why);
  Program out;
  out.buffers = p.buffers;
  out.steps.reserve(order.size());
  for (int32_t s : order) out.steps.push_back(p.steps[s]);
  return out;
}

ScheduleResult memory_aware_schedule(const Program& p) {
  ScheduleResult out;
  out.original_peak_bytes = lower_bound(p);  // also validates the program (ids, read-before-write)
  const BufferUse use = buffer_use(p);
  const DependencyGraph g = dependency_graph(p, use);
  const std::vector<int32_t> greedy = GreedyScheduler(p, use, g).run();
  if (greedy.size() != p.steps.size()) throw InternalError("the greedy schedule lost steps");
  out.greedy_peak_bytes = peak_of_order(p, use, greedy);
  out.reordered = out.greedy_peak_bytes < out.original_peak_bytes;
  if (out.reordered) {
    out.order = greedy;
  } else {
    out.order.resize(p.steps.size());
    std::iota(out.order.begin(), out.order.end(), 0);
  }
  out.chosen_peak_bytes = std::min(out.original_peak_bytes, out.greedy_peak_bytes);
  return out;
}

}  // namespace memplan
