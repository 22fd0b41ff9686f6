#include "planner/packing_place.h"

#include <algorithm>
#include <deque>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan::detail {

// Two static indexes in flat arrays (no per-node allocation):
//  - a segment tree over steps, each record stored at the O(log T) canonical nodes of its range, so the
//    records containing a step are those on the root-to-leaf path (a stabbing query);
//  - the records sorted by first step, so those starting inside (first, last] are one contiguous run.
// Together they give every record sharing a step with [first, last], each exactly once.
OverlapIndex::OverlapIndex(const std::vector<UsageRecord>& records, int32_t steps) : steps_(std::max(steps, 1)) {
  double lengths = 0;
  for (size_t i = 0; i < records.size(); ++i)
    if (records[i].bytes != 0) {
      by_first_.push_back(static_cast<int32_t>(i));
      lengths += static_cast<double>(records[i].last - records[i].first + 1);
    }
  mean_live_ = lengths / steps_;
  std::stable_sort(by_first_.begin(), by_first_.end(),
                   [&](int32_t a, int32_t b) { return records[a].first < records[b].first; });
  start_begin_.assign(static_cast<size_t>(steps_) + 2, 0);  // start_begin_[t]: first position with first >= t
  for (int32_t id : by_first_) ++start_begin_[records[id].first + 1];
  for (size_t t = 1; t < start_begin_.size(); ++t) start_begin_[t] += start_begin_[t - 1];

  const size_t nodes = 4 * static_cast<size_t>(steps_);
  node_begin_.assign(nodes + 1, 0);
  for (size_t k = 0; k < by_first_.size(); ++k)  // count per node, then prefix sums, then fill (CSR)
    add_canonical(1, 0, steps_ - 1, records[by_first_[k]], static_cast<uint32_t>(k), true);
  for (size_t i = 1; i <= nodes; ++i) node_begin_[i] += node_begin_[i - 1];
  node_positions_.resize(node_begin_[nodes]);
  fill_.assign(node_begin_.begin(), node_begin_.end() - 1);
  for (size_t k = 0; k < by_first_.size(); ++k)
    add_canonical(1, 0, steps_ - 1, records[by_first_[k]], static_cast<uint32_t>(k), false);
  fill_ = {};
}

void OverlapIndex::add_canonical(size_t node, int32_t lo, int32_t hi, const UsageRecord& r, uint32_t position,
                                 bool count_only) {
  if (r.first <= lo && hi <= r.last) {
    if (count_only) {
      ++node_begin_[node + 1];
    } else {
      node_positions_[fill_[node]++] = position;
    }
    return;
  }
  const int32_t mid = lo + (hi - lo) / 2;
  if (r.first <= mid) add_canonical(2 * node, lo, mid, r, position, count_only);
  if (r.last > mid) add_canonical(2 * node + 1, mid + 1, hi, r, position, count_only);
}

template <typename F>
void OverlapIndex::for_each_containing(int32_t step, F&& f) const {
  size_t node = 1;
  int32_t lo = 0, hi = steps_ - 1;
  while (true) {
    for (size_t k = node_begin_[node]; k < node_begin_[node + 1]; ++k) f(node_positions_[k]);
    if (lo == hi) break;
    const int32_t mid = lo + (hi - lo) / 2;
    if (step <= mid) {
      node = 2 * node;
      hi = mid;
    } else {
      node = 2 * node + 1;
      lo = mid + 1;
    }
  }
}

int32_t validate_records(const std::vector<UsageRecord>& records) {
  int32_t steps = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const UsageRecord& r = records[i];
    if (r.first < 0 || r.last < r.first)
      throw InternalError("usage record " + std::to_string(i) + " has an invalid live range [" +
                          std::to_string(r.first) + ", " + std::to_string(r.last) + "]");
    steps = std::max(steps, r.last + 1);
  }
  return steps;
}

std::vector<uint64_t> aligned_sizes(const std::vector<UsageRecord>& records, uint64_t alignment) {
  if (alignment == 0) throw InputError("arena alignment must be at least 1 byte");
  std::vector<uint64_t> sizes(records.size());
  for (size_t i = 0; i < records.size(); ++i) sizes[i] = round_up(records[i].bytes, alignment);
  return sizes;
}

namespace {

// The rule's choice for one record of `size` bytes, shown the taken [start, end) ranges beside it in order of
// start: `top` is the end of everything seen so far, so a range that starts above it opens a gap [top, start).
// The smallest gap that fits wins, the lowest on a tie (one of exactly the size cannot be beaten: exact());
// with none, the record goes above everything seen.
class GapChoice {
 public:
  explicit GapChoice(uint64_t size) : size_(size) {}
  void see(uint64_t start, uint64_t end) {
    if (start > top_ && start - top_ >= size_ && start - top_ < best_gap_) {
      best_gap_ = start - top_;
      best_ = top_;
    }
    top_ = std::max(top_, end);
  }
  bool exact() const { return best_gap_ == size_; }
  uint64_t top() const { return top_; }  // a range ending at or below it changes nothing
  uint64_t offset() const { return best_gap_ != UINT64_MAX ? best_ : top_; }

 private:
  uint64_t size_, top_ = 0, best_ = 0, best_gap_ = UINT64_MAX;
};

}  // namespace

PackingResult place_by_scan(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes,
                            const std::vector<int32_t>& order, const OverlapIndex& index) {
  PackingResult out;
  out.offsets.assign(records.size(), 0);
  // Where each placed record sits, by its position in the index; end == 0 means not placed yet (placed
  // records all have a size above 0).
  struct Slot {
    uint64_t offset = 0, end = 0;
  };
  std::vector<Slot> slots(index.by_first().size());
  std::vector<uint32_t> position(records.size(), 0);
  for (size_t k = 0; k < index.by_first().size(); ++k) position[index.by_first()[k]] = static_cast<uint32_t>(k);
  std::vector<std::pair<uint64_t, uint64_t>> neighbours;  // [offset, end) of placed records sharing a step
  const auto add_if_placed = [&](size_t k) {
    if (slots[k].end != 0) neighbours.emplace_back(slots[k].offset, slots[k].end);
  };
  for (int32_t id : order) {
    const uint64_t size = sizes[id];
    if (size == 0) continue;  // takes no space, overlaps nothing
    neighbours.clear();
    index.for_each_containing(records[id].first, add_if_placed);
    const auto [begin, end] = index.starting_within(records[id].first, records[id].last);
    for (size_t k = begin; k < end; ++k) add_if_placed(k);
    std::sort(neighbours.begin(), neighbours.end());
    GapChoice choice(size);
    for (const auto& [start, end] : neighbours) choice.see(start, end);
    const uint64_t offset = choice.offset();
    const uint64_t end_of_id = checked_add(offset, size, "arena bytes");
    slots[position[id]] = {offset, end_of_id};
    out.offsets[id] = offset;
    out.arena_bytes = std::max(out.arena_bytes, end_of_id);
  }
  return out;
}

namespace {

// Bytes [start, end) taken, as disjoint runs that do not touch (touching runs are one), sorted by start: a flat
// array, not a tree. A placement walks every run of several sets (place_by_runs), so reading them in order is
// the cost that matters; an insertion moves the runs above it, a memmove of 16-byte pairs
// (bench/planner/README.md, "Flat runs", measures both).
class Runs {
 public:
  using Run = std::pair<uint64_t, uint64_t>;
  void add(uint64_t start, uint64_t end) {
    // The first run starting above `start`; the run before it may reach `start` and then absorbs it.
    auto it = std::upper_bound(runs_.begin(), runs_.end(), start, [](uint64_t v, const Run& r) { return v < r.first; });
    if (it != runs_.begin() && std::prev(it)->second >= start) {
      --it;
      start = it->first;
      end = std::max(end, it->second);
    }
    auto last = it;
    while (last != runs_.end() && last->first <= end) {
      end = std::max(end, last->second);
      ++last;
    }
    if (last == it) {
      runs_.insert(it, Run{start, end});
      return;
    }
    *it = Run{start, end};
    runs_.erase(it + 1, last);
  }
  const Run* begin() const { return runs_.data(); }
  const Run* end() const { return runs_.data() + runs_.size(); }

 private:
  std::vector<Run> runs_;
};

// The bytes taken by placed records, by time: a segment tree over steps. A record is stored at the O(log T)
// canonical nodes of its range (`cover`) and in `below` of every node on the way to them, so below(n) is
// what the records stored anywhere in n's subtree take. A record shares a step with [first, last] exactly
// when one of its canonical nodes is inside, or contains, one of the range's canonical nodes (segment-tree
// nodes nest or are disjoint): the bytes taken beside [first, last] are below() of the range's canonical
// nodes and cover() of the nodes above them.
class Occupancy {
 public:
  explicit Occupancy(int32_t steps) : steps_(std::max(steps, 1)), cover_(4 * static_cast<size_t>(steps_), 0),
                                      below_(4 * static_cast<size_t>(steps_), 0) {
    sets_.emplace_back();  // id 0: no set
  }

  void take(int32_t first, int32_t last, uint64_t start, uint64_t end) { take(1, 0, steps_ - 1, first, last, start, end); }

  // The sets whose union is every byte taken by a record sharing a step with [first, last].
  void beside(int32_t first, int32_t last, std::vector<const Runs*>& out) const {
    out.clear();
    beside(1, 0, steps_ - 1, first, last, out);
  }

 private:
  Runs& set(std::vector<uint32_t>& ids, size_t node) {
    if (ids[node] == 0) {
      ids[node] = static_cast<uint32_t>(sets_.size());
      sets_.emplace_back();
    }
    return sets_[ids[node]];
  }
  void take(size_t node, int32_t lo, int32_t hi, int32_t first, int32_t last, uint64_t start, uint64_t end) {
    set(below_, node).add(start, end);
    if (first <= lo && hi <= last) {
      set(cover_, node).add(start, end);
      return;
    }
    const int32_t mid = lo + (hi - lo) / 2;
    if (first <= mid) take(2 * node, lo, mid, first, last, start, end);
    if (last > mid) take(2 * node + 1, mid + 1, hi, first, last, start, end);
  }
  void beside(size_t node, int32_t lo, int32_t hi, int32_t first, int32_t last, std::vector<const Runs*>& out) const {
    if (first <= lo && hi <= last) {
      if (below_[node] != 0) out.push_back(&sets_[below_[node]]);
      return;
    }
    if (cover_[node] != 0) out.push_back(&sets_[cover_[node]]);
    if (below_[node] == 0) return;  // nothing placed in this subtree
    const int32_t mid = lo + (hi - lo) / 2;
    if (first <= mid) beside(2 * node, lo, mid, first, last, out);
    if (last > mid) beside(2 * node + 1, mid + 1, hi, first, last, out);
  }

  int32_t steps_;
  std::vector<uint32_t> cover_, below_;  // node -> index into sets_ (0: none yet)
  std::deque<Runs> sets_;
};

}  // namespace

PackingResult place_by_runs(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes,
                            const std::vector<int32_t>& order, int32_t steps) {
  PackingResult out;
  out.offsets.assign(records.size(), 0);
  Occupancy taken(steps);
  std::vector<const Runs*> sets;
  // One set's walk: its current run [start, end) (the key, kept here so the heap reads no run), then the runs
  // after it. A run absorbs the set's following runs while the gaps between them are smaller than the record:
  // a gap of the union lies inside one gap of every set, so none of those could hold the record, and filling
  // them leaves every gap that could, in order, and the top unchanged. The choice is the same; the heap sees a
  // fraction of the runs (a training step's saved tensors leave thousands of holes too small for the record).
  struct Cursor {
    uint64_t start, end;
    const Runs::Run *next, *last;
  };
  std::vector<Cursor> cursors;  // a min-heap by start
  const auto later = [](const Cursor& a, const Cursor& b) { return a.start > b.start; };
  // Sets c to the run at c.next merged with its followers across gaps below `size`; false when none is left.
  const auto advance = [](Cursor& c, uint64_t size) {
    if (c.next == c.last) return false;
    c.start = c.next->first;
    c.end = c.next->second;
    for (++c.next; c.next != c.last && c.next->first - c.end < size; ++c.next) c.end = c.next->second;
    return true;
  };
  for (int32_t id : order) {
    const uint64_t size = sizes[id];
    if (size == 0) continue;  // takes no space, overlaps nothing
    taken.beside(records[id].first, records[id].last, sets);
    cursors.clear();
    for (const Runs* s : sets) {
      Cursor c{0, 0, s->begin(), s->end()};
      if (advance(c, size)) cursors.push_back(c);
    }
    std::make_heap(cursors.begin(), cursors.end(), later);
    GapChoice choice(size);
    // The taken runs by start, merged across the sets. A set's runs are disjoint and sorted, so their ends rise
    // too: once one ends at or below the top seen so far, the set's next runs up to the top are skipped at once
    // (the same bytes are in several sets: a record is stored at every node on the way to its canonical ones).
    while (!cursors.empty() && !choice.exact()) {
      std::pop_heap(cursors.begin(), cursors.end(), later);
      Cursor& c = cursors.back();
      if (c.end <= choice.top()) {
        c.next = std::upper_bound(c.next, c.last, choice.top(),
                                  [](uint64_t top, const Runs::Run& r) { return top < r.second; });
      } else {
        choice.see(c.start, c.end);
      }
      if (!advance(c, size)) {
        cursors.pop_back();
      } else {
        std::push_heap(cursors.begin(), cursors.end(), later);
      }
    }
    const uint64_t offset = choice.offset();
    const uint64_t end_of_id = checked_add(offset, size, "arena bytes");
    taken.take(records[id].first, records[id].last, offset, end_of_id);
    out.offsets[id] = offset;
    out.arena_bytes = std::max(out.arena_bytes, end_of_id);
  }
  return out;
}

PackingResult place_in_order(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes,
                             const std::vector<int32_t>& order, const OverlapIndex& index) {
  // Where the scan's sort of K records starts to cost more than the tree's run-set updates: bench/planner/
  // README.md ("Scan or runs") times both. Synthetic inference-shaped programs (21 to 390 live at a step): the
  // scan 1.4 to 5x faster. Training steps built from config.json: Llama-3.1-70B (936 live) 1.24 -> 0.40 s
  // for the whole estimate, Qwen3-30B-A3B at 4 layers (1,940) 3.95 -> 0.64 s, at 16 layers 72 -> 4.3 s.
  constexpr double kDenseMeanLive = 256;
  return index.mean_live() > kDenseMeanLive ? place_by_runs(records, sizes, order, index.steps())
                                            : place_by_scan(records, sizes, order, index);
}

}  // namespace memplan::detail
