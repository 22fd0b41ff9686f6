#include "report/estimate.h"

#include <algorithm>
#include <numeric>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "planner/alloc_ort_bfc.h"
#include "planner/alloc_pytorch.h"
#include "planner/liveness.h"
#include "planner/packing.h"
#include "planner/schedule.h"

namespace memplan {
namespace {

using CategoryBytes = std::array<uint64_t, kNumCategories>;

CategoryBytes resident_by_category(const Program& p) {
  CategoryBytes c{};
  for (const Buffer& b : p.buffers)
    if (b.resident) c[static_cast<int>(b.category)] = checked_add(c[static_cast<int>(b.category)], b.bytes);
  return c;
}

// Exact bytes per category live during `step` (resident included); step -1 is the moment before step 0.
CategoryBytes live_by_category(const Program& p, const LiveBytes& live, int32_t step) {
  CategoryBytes c = resident_by_category(p);
  if (step >= 0) {
    for (int k = 0; k < kNumCategories; ++k) c[k] = checked_add(c[k], live.per_step_by_category[step][k]);
  } else {
    for (const Buffer& b : p.buffers)
      if (!b.resident && b.live_at_start) c[static_cast<int>(b.category)] += b.bytes;
  }
  return c;
}

uint64_t sum(const CategoryBytes& c) {
  uint64_t s = 0;
  for (uint64_t v : c) s = checked_add(s, v);
  return s;
}

void fill_categories(Breakdown& b, const CategoryBytes& c) {
  b.weights = c[static_cast<int>(Category::Weight)];
  b.activations = c[static_cast<int>(Category::Activation)];
  b.activation_grads = c[static_cast<int>(Category::ActivationGrad)];
  b.gradients = c[static_cast<int>(Category::Gradient)];
  b.optimizer_states = c[static_cast<int>(Category::OptimizerState)];
  b.workspace = c[static_cast<int>(Category::Workspace)];
}

// The largest non-resident buffers live during `step`, with the op of the step that wrote them.
std::vector<LiveTensor> top_live_tensors(const Program& p, const std::vector<LiveRange>& ranges, int32_t step, int n) {
  std::vector<std::string> writer_op(p.buffers.size());
  for (const Step& s : p.steps)
    for (int32_t w : s.writes) writer_op[w] = s.op;
  std::vector<int32_t> live;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    if (b.resident || b.bytes == 0) continue;
    const bool is_live = step >= 0 ? ranges[i].first <= step && step <= ranges[i].last : b.live_at_start;
    if (is_live) live.push_back(static_cast<int32_t>(i));
  }
  std::sort(live.begin(), live.end(), [&](int32_t a, int32_t b) {
    if (p.buffers[a].bytes != p.buffers[b].bytes) return p.buffers[a].bytes > p.buffers[b].bytes;
    return a < b;
  });
  if (static_cast<int>(live.size()) > n) live.resize(n);
  std::vector<LiveTensor> out;
  for (int32_t i : live) out.push_back({p.buffers[i].name, writer_op[i], p.buffers[i].category, p.buffers[i].bytes});
  return out;
}

// A simulated allocator's peaks: exact bytes per category at the peak step, allocator rounding
// (allocated − exact) and overhead (reserved − allocated).
void take_allocator_peaks(const Program& program, const LiveBytes& live, int32_t peak_step, const AllocatorReplay& rep,
                          Estimate& e) {
  const CategoryBytes at_peak = live_by_category(program, live, peak_step);
  fill_categories(e.breakdown, at_peak);
  e.allocated_bytes = rep.peak_allocated_bytes;
  e.reserved_bytes = rep.peak_reserved_bytes;
  e.breakdown.allocator_rounding = rep.peak_allocated_bytes - sum(at_peak);
  e.breakdown.allocator_overhead = rep.peak_reserved_bytes - rep.peak_allocated_bytes;
}

// Fills totals, breakdown, peak location and series of `e` for `program` on the chosen runtime.
void assess(const Program& program, Runtime runtime, uint64_t fixed, int top_n, Estimate& e) {
  const std::vector<LiveRange> ranges = compute_liveness(program);
  const LiveBytes live = compute_live_bytes(program, ranges);
  const ProgramRecords recs = usage_records(program, ranges);
  // ideal: exact sizes in one arena. ORT's arena rounds every request to 256 B (bfc_arena.h, kMinAllocationSize).
  const uint64_t alignment = runtime == Runtime::Ideal ? 1 : ort::kMinAllocationSize;
  const BestPacking best = choose_best(recs.records, alignment);

  e.num_steps = static_cast<int32_t>(program.steps.size());
  e.lower_bound_bytes = live.peak_bytes;
  e.resident_bytes = live.resident_bytes;
  e.arena_bytes = best.result.arena_bytes;
  e.packing_algorithm = packing_algorithm_name(best.algorithm);
  e.breakdown = {};
  e.breakdown.fixed = fixed;

  // A program with no steps (every op folded away, say) peaks before the first step: there is no step 0.
  int32_t peak_step = program.steps.empty() ? -1 : live.peak_step;
  switch (runtime) {
    case Runtime::Ideal: {
      const CategoryBytes at_peak = live_by_category(program, live, peak_step);
      fill_categories(e.breakdown, at_peak);
      e.allocated_bytes = checked_add(live.resident_bytes, live.peak_bytes);
      e.reserved_bytes = checked_add(live.resident_bytes, best.result.arena_bytes);
      e.breakdown.allocator_overhead = e.reserved_bytes - sum(at_peak);  // arena fragmentation
      break;
    }
    case Runtime::PyTorch: {
      const AllocatorReplay rep = simulate_pytorch(program);
      peak_step = rep.peak_allocated_step;
      take_allocator_peaks(program, live, peak_step, rep, e);
      e.allocated_per_step = rep.allocated_per_step;
      e.reserved_per_step = rep.reserved_per_step;
      break;
    }
    case Runtime::OnnxRuntime:
      // Steady state with the memory pattern: initializers one by one, then one block of the planned arena.
      take_allocator_peaks(program, live, peak_step, simulate_ort_memory_pattern(program, best.result.arena_bytes), e);
      break;
  }
  e.total_bytes = checked_add(e.reserved_bytes, fixed);

  e.peak_step = peak_step;
  if (peak_step >= 0) {
    const Step& s = program.steps[peak_step];
    e.peak_step_name = s.name;
    e.peak_op = s.op;
    e.peak_phase = s.phase;
  } else {
    e.peak_step_name = "(before the first step)";
  }
  e.top_live = top_live_tensors(program, ranges, peak_step, top_n);

  const CategoryBytes resident = resident_by_category(program);
  e.per_step_by_category.assign(program.steps.size(), resident);
  e.step_names.clear();
  for (size_t s = 0; s < program.steps.size(); ++s) {
    for (int k = 0; k < kNumCategories; ++k) e.per_step_by_category[s][k] += live.per_step_by_category[s][k];
    e.step_names.push_back(program.steps[s].name);
  }
}

}  // namespace

const char* runtime_name(Runtime r) {
  switch (r) {
    case Runtime::Ideal: return "ideal";
    case Runtime::PyTorch: return "pytorch";
    case Runtime::OnnxRuntime: return "onnxruntime";
  }
  return "ideal";
}

const char* mode_name(Mode m) { return m == Mode::Inference ? "inference" : "train"; }

Estimate estimate_graph(const Graph& graph, const EstimateOptions& options) {
  Estimate e;
  e.model = graph.model_path;
  e.mode = options.mode;
  e.runtime = options.runtime;

  Program program;
  uint64_t fixed = 0;
  if (options.mode == Mode::Inference) {
    InferenceOptions io = options.inference;
    io.runtime = options.runtime;
    CostModelResult r = build_inference_program(graph, io);
    program = std::move(r.program);
    fixed = r.fixed_bytes;
    e.notes = std::move(r.notes);
  } else {
    if (options.runtime == Runtime::OnnxRuntime)
      throw InputError("--mode train models a PyTorch training step: use --runtime pytorch or ideal");
    if (options.memory_schedule)
      throw InputError("--schedule memory applies to inference: autograd fixes the order of a training step");
    TrainingOptions first = options.training;
    first.runtime = options.runtime;
    first.steady_state = false;
    TrainingResult first_it = build_training_program(graph, first);
    Estimate first_e;
    assess(first_it.program, options.runtime, first_it.fixed_bytes, 0, first_e);
    e.first_iteration_total_bytes = first_e.total_bytes;

    TrainingOptions steady = options.training;
    steady.runtime = options.runtime;
    steady.steady_state = true;
    TrainingResult r = build_training_program(graph, steady);
    program = std::move(r.program);
    fixed = r.fixed_bytes;
    e.notes = std::move(r.notes);
    e.recompute_percent = r.recompute_percent;
    e.checkpoint_boundaries = r.checkpoint_boundaries;
    e.param_bytes = r.param_bytes;
    e.grad_bytes = r.grad_bytes;
    e.optimizer_state_bytes = r.optimizer_state_bytes;
  }

  e.model_order_peak_bytes = lower_bound(program);
  if (options.memory_schedule) {
    const ScheduleResult sched = memory_aware_schedule(program);
    e.model_order_peak_bytes = sched.original_peak_bytes;
    e.memory_order_peak_bytes = sched.greedy_peak_bytes;
    if (sched.reordered) {
      program = apply_order(program, sched.order);
      e.schedule_used = "memory";
    } else {
      e.notes.push_back("the memory-aware order was not better than the model's order, which is kept");
    }
    if (options.runtime == Runtime::PyTorch && sched.reordered)
      e.notes.push_back("PyTorch eager runs ops in the model's code order; the memory order assumes the code is "
                        "reordered to match");
  }
  assess(program, options.runtime, fixed, options.top_tensors, e);
  return e;
}

}  // namespace memplan
