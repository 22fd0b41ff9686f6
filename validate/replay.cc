#include "validate/replay.h"

#include <algorithm>
#include <utility>

#include "onnx_import/checked.h"
#include "validate/pattern.h"

namespace memplan::validate {
namespace {

// Buffer indices by the step where they start and where they end, in index order (deterministic).
struct StepIndex {
  std::vector<std::vector<uint32_t>> starting, ending;

  explicit StepIndex(const Plan& plan) : starting(plan.schedule.size()), ending(plan.schedule.size()) {
    for (uint32_t i = 0; i < plan.buffers.size(); ++i) {
      if (plan.buffers[i].bytes == 0) continue;  // nothing to allocate, fill or damage
      starting[plan.buffers[i].first].push_back(i);
      ending[plan.buffers[i].last].push_back(i);
    }
  }
};

// Does `found` (bytes read from arena offset `position` on) hold buffer c's pattern wherever c covers it?
bool holds_pattern_of(const PlanBuffer& c, uint32_t c_id, uint64_t position, const std::vector<uint8_t>& found) {
  bool covered_any = false;
  for (uint64_t k = 0; k < found.size(); ++k) {
    const uint64_t p = position + k;
    if (p < c.offset || p >= c.offset + c.bytes) continue;
    covered_any = true;
    if (found[k] != pattern_byte(c_id, p)) return false;
  }
  return covered_any;
}

// In the arena, the culprit is the other buffer covering the damaged byte whose pattern is found there.
// If several match (a hash collision, 2^-32 per word), the most recently started one wrote last.
void attribute_culprit(const Plan& plan, uint32_t victim_id, const Mismatch& m, Overlap& overlap) {
  std::optional<uint32_t> best;
  for (uint32_t c = 0; c < plan.buffers.size(); ++c) {
    const PlanBuffer& b = plan.buffers[c];
    if (c == victim_id || m.position < b.offset || m.position >= b.offset + b.bytes) continue;
    if (!holds_pattern_of(b, c, m.position, m.found)) continue;
    if (!best || b.first >= plan.buffers[*best].first) best = c;
  }
  if (best) {
    overlap.culprit = plan.buffers[*best].tensor;
    overlap.culprit_index = *best;
    overlap.culprit_first_step = plan.buffers[*best].first;
  }
}

class Replayer {
 public:
  Replayer(const Plan& plan, Mode mode, Device& device)
      : plan_(plan), mode_(mode), device_(device), where_(plan.buffers.size(), nullptr) {}

  ModeResult run() {
    result_.mode = mode_;
    result_.predicted_bytes = predicted_bytes();
    device_.begin_mode(mode_);
    result_.baseline_bytes = device_.used_bytes();
    result_.peak_used_bytes = result_.baseline_bytes;
    try {
      allocate_resident();
      if (mode_ == Mode::kArena && plan_.arena_bytes > 0)
        arena_ = static_cast<uint8_t*>(device_.allocate(plan_.arena_bytes, mode_, "the arena"));
      sample(0);
      const StepIndex index(plan_);
      for (uint64_t step = 0; step < plan_.schedule.size(); ++step) run_step(step, index);
    } catch (...) {
      release_all();
      throw;
    }
    release_all();
    result_.allocator = device_.end_mode(mode_);
    result_.measured_bytes = result_.peak_used_bytes - result_.baseline_bytes;
    return result_;
  }

 private:
  uint64_t predicted_bytes() const {
    const uint64_t planned = mode_ == Mode::kArena ? plan_.arena_bytes : live_bytes_lower_bound(plan_);
    return checked_add(planned, resident_bytes(plan_), "predicted bytes");
  }

  void allocate_resident() {
    for (const ResidentTensor& r : plan_.resident)
      if (r.bytes > 0) resident_.push_back(device_.allocate(r.bytes, mode_, "resident tensor '" + r.tensor + "'"));
  }

  void run_step(uint64_t step, const StepIndex& index) {
    for (uint32_t id : index.starting[step]) start_buffer(id);
    sample(step);
    for (uint32_t id : index.ending[step]) end_buffer(id, step);
  }

  void start_buffer(uint32_t id) {
    const PlanBuffer& b = plan_.buffers[id];
    if (mode_ == Mode::kArena) {
      where_[id] = arena_ + b.offset;
    } else {
      where_[id] = static_cast<uint8_t*>(device_.allocate(b.bytes, mode_, "tensor '" + b.tensor + "'"));
    }
    device_.fill(where_[id], position(id), b.bytes, id);
  }

  void end_buffer(uint32_t id, uint64_t step) {
    const PlanBuffer& b = plan_.buffers[id];
    if (auto m = device_.verify(where_[id], position(id), b.bytes, id)) record_overlap(id, step, *m);
    if (mode_ != Mode::kArena) device_.release(where_[id], mode_);
    where_[id] = nullptr;
  }

  // Arena mode writes patterns in arena coordinates so damage can be attributed; separate allocations
  // cannot overlap each other, so their pattern starts at 0.
  uint64_t position(uint32_t id) const { return mode_ == Mode::kArena ? plan_.buffers[id].offset : 0; }

  void record_overlap(uint32_t victim_id, uint64_t step, const Mismatch& m) {
    Overlap overlap;
    overlap.victim = plan_.buffers[victim_id].tensor;
    overlap.victim_index = victim_id;
    overlap.first_bad_offset = m.position;
    overlap.mismatched_bytes = m.mismatched_bytes;
    overlap.detected_at_step = step;
    if (mode_ == Mode::kArena) attribute_culprit(plan_, victim_id, m, overlap);
    result_.overlaps.push_back(std::move(overlap));
  }

  void sample(uint64_t step) {
    const uint64_t used = device_.used_bytes();
    if (used > result_.peak_used_bytes) {
      result_.peak_used_bytes = used;
      result_.peak_step = step;
    }
  }

  void release_all() {
    if (mode_ != Mode::kArena)
      for (uint8_t*& ptr : where_)
        if (ptr != nullptr) device_.release(std::exchange(ptr, nullptr), mode_);
    if (arena_ != nullptr) device_.release(std::exchange(arena_, nullptr), mode_);
    for (void* ptr : resident_) device_.release(ptr, mode_);
    resident_.clear();
  }

  const Plan& plan_;
  const Mode mode_;
  Device& device_;
  ModeResult result_;
  uint8_t* arena_ = nullptr;
  std::vector<uint8_t*> where_;  // each buffer's address while it is live
  std::vector<void*> resident_;
};

}  // namespace

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kArena: return "arena";
    case Mode::kMalloc: return "malloc";
    case Mode::kPool: return "pool";
  }
  return "?";
}

std::optional<double> ModeResult::error_pct() const {
  if (predicted_bytes == 0) return std::nullopt;
  return 100.0 * (static_cast<double>(measured_bytes) - static_cast<double>(predicted_bytes)) /
         static_cast<double>(predicted_bytes);
}

ModeResult replay(const Plan& plan, Mode mode, Device& device) {
  if (!device.supports(mode))
    throw InputError(std::string("mode ") + mode_name(mode) + " is not available on the " + device.kind() + " device");
  return Replayer(plan, mode, device).run();
}

}  // namespace memplan::validate

