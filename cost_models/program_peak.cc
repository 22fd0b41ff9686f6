#include "cost_models/program_peak.h"

#include <algorithm>
#include <vector>

#include "onnx_import/checked.h"

namespace memplan {

uint64_t ProgramPeak::total() const { return checked_add(live_peak, resident, "peak bytes"); }

ProgramPeak program_peak(const Program& p) {
  const int32_t n = static_cast<int32_t>(p.steps.size());
  ProgramPeak out;
  if (n == 0) return out;
  std::vector<int32_t> first(p.buffers.size(), -1), last(p.buffers.size(), -1);
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t b : p.steps[s].writes) first[b] = last[b] = s;
    for (int32_t b : p.steps[s].reads) last[b] = std::max(last[b], s);
  }
  // Bytes that start and stop being live at each step, then a running sum (all overflow-checked).
  std::vector<uint64_t> starts(n + 1, 0), stops(n + 1, 0);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    if (buf.resident) {
      out.resident = checked_add(out.resident, buf.bytes, "resident bytes");
      continue;
    }
    const int32_t lo = buf.live_at_start ? 0 : first[b];
    if (lo < 0) continue;
    const int32_t hi = buf.live_at_end ? n - 1 : std::max(last[b], lo);
    starts[lo] = checked_add(starts[lo], buf.bytes, "live bytes");
    stops[hi + 1] = checked_add(stops[hi + 1], buf.bytes, "live bytes");
  }
  uint64_t live = 0;
  for (int32_t s = 0; s < n; ++s) {
    live = checked_add(live, starts[s], "live bytes") - stops[s];
    out.live_peak = std::max(out.live_peak, live);
  }
  return out;
}

}  // namespace memplan
