#include "planner/liveness.h"

#include <string>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

constexpr int32_t kUnset = -1;

std::string quoted(const Program& p, int32_t buffer) { return "'" + p.buffers[buffer].name + "'"; }

void check_id(const Program& p, int32_t id, int32_t step) {
  if (id < 0 || static_cast<size_t>(id) >= p.buffers.size())
    throw InternalError("step '" + p.steps[step].name + "' names buffer id " + std::to_string(id) +
                        " but the program has " + std::to_string(p.buffers.size()) + " buffers");
}

}  // namespace

std::vector<LiveRange> compute_liveness(const Program& p) {
  const size_t n = p.buffers.size();
  const int32_t last_step = static_cast<int32_t>(p.steps.size()) - 1;  // -1 when there are no steps
  std::vector<int32_t> writer(n, kUnset), first_read(n, kUnset), last_read(n, kUnset);

  for (int32_t s = 0; s <= last_step; ++s) {
    for (int32_t b : p.steps[s].writes) {
      check_id(p, b, s);
      if (writer[b] != kUnset)
        throw InternalError("buffer " + quoted(p, b) + " is written by both step '" + p.steps[writer[b]].name +
                            "' and step '" + p.steps[s].name + "'");
      writer[b] = s;
    }
    for (int32_t b : p.steps[s].reads) {
      check_id(p, b, s);
      if (first_read[b] == kUnset) first_read[b] = s;
      last_read[b] = s;
    }
  }

  std::vector<LiveRange> ranges(n);
  for (size_t i = 0; i < n; ++i) {
    const Buffer& buf = p.buffers[i];
    const int32_t b = static_cast<int32_t>(i);
    if (buf.resident) {
      ranges[i] = {0, last_step < 0 ? 0 : last_step};
      continue;
    }
    if (buf.live_at_start && writer[i] != kUnset)
      throw InternalError("buffer " + quoted(p, b) + " is live at start and also written by step '" +
                          p.steps[writer[i]].name + "'");
    int32_t first;
    if (buf.live_at_start) {
      first = 0;
    } else if (writer[i] != kUnset) {
      first = writer[i];
    } else {
      throw InternalError("buffer " + quoted(p, b) + " is never written and not live at start");
    }
    // A step may read what it writes (an in-place update); reading earlier is a broken program.
    if (first_read[i] != kUnset && first_read[i] < first)
      throw InternalError("buffer " + quoted(p, b) + " is read by step '" + p.steps[first_read[i]].name +
                          "' before step '" + p.steps[first].name + "' writes it");
    int32_t last = last_read[i] == kUnset ? first : last_read[i];
    if (buf.live_at_end && last_step >= 0) last = last_step;
    ranges[i] = {first, last};
  }
  return ranges;
}

LiveBytes compute_live_bytes(const Program& p, const std::vector<LiveRange>& ranges) {
  if (ranges.size() != p.buffers.size())
    throw InternalError("live ranges for " + std::to_string(ranges.size()) + " buffers, program has " +
                        std::to_string(p.buffers.size()));
  const size_t steps = p.steps.size();
  LiveBytes out;
  out.per_step.assign(steps, 0);
  out.per_step_by_category.assign(steps, {});
  // Difference arrays: +bytes at first, -bytes after last; a prefix sum gives live bytes per step.
  // Additions and subtractions are kept apart so every partial sum stays a true, checkable total.
  std::vector<std::array<uint64_t, kNumCategories>> starts(steps + 1), ends(steps + 1);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& buf = p.buffers[i];
    if (buf.resident) {
      out.resident_bytes = checked_add(out.resident_bytes, buf.bytes, "resident bytes");
      continue;
    }
    if (steps == 0) continue;
    if (ranges[i].first < 0 || ranges[i].last < ranges[i].first || static_cast<size_t>(ranges[i].last) >= steps)
      throw InternalError("buffer '" + buf.name + "' has a live range outside the program's " +
                          std::to_string(steps) + " steps");
    const int c = static_cast<int>(buf.category);
    starts[ranges[i].first][c] = checked_add(starts[ranges[i].first][c], buf.bytes, "live bytes");
    ends[ranges[i].last + 1][c] = checked_add(ends[ranges[i].last + 1][c], buf.bytes, "live bytes");
  }
  std::array<uint64_t, kNumCategories> live{};
  for (size_t s = 0; s < steps; ++s) {
    uint64_t total = 0;
    for (int c = 0; c < kNumCategories; ++c) {
      live[c] = checked_add(live[c], starts[s][c], "live bytes") - ends[s][c];
      total = checked_add(total, live[c], "live bytes");
    }
    out.per_step_by_category[s] = live;
    out.per_step[s] = total;
    if (total > out.peak_bytes) {
      out.peak_bytes = total;
      out.peak_step = static_cast<int32_t>(s);
    }
  }
  return out;
}

uint64_t lower_bound(const Program& p) { return compute_live_bytes(p, compute_liveness(p)).peak_bytes; }

}  // namespace memplan
