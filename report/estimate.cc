#include "report/estimate.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "cost_models/runtime_rules.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "planner/alloc_pytorch.h"
#include "planner/liveness.h"
#include "planner/measure.h"
#include "planner/packing.h"
#include "planner/schedule.h"
#include "report/sizes.h"

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

// The allocator of the runtime an estimate is for: what every total and decision is measured on.
RuntimeAllocator allocator_of(const EstimateOptions& options) {
  return runtime_model(options.execution, options.mode == Mode::Training).allocator;
}

// Fills totals, breakdown, peak location and series of `e` for `program` on the chosen runtime. The totals are
// measure()'s (planner/measure.h), the figures estimate_totals() and every decision take too.
void assess(const Program& program, const EstimateOptions& options, uint64_t fixed, int top_n,
            std::optional<uint64_t> budget, Estimate& e) {
  const RuntimeAllocator allocator = allocator_of(options);
  MeasureWork work;
  const Measure m = measure(program, allocator, &work);
  const std::vector<LiveRange>& ranges = work.ranges;
  const LiveBytes& live = work.live;
  // The static arena the report shows: the one the totals rest on, else packed for the report alone (pytorch).
  const BestPacking best =
      work.arena ? *work.arena : choose_best(usage_records(program, ranges).records, arena_alignment(allocator.kind));

  e.num_steps = static_cast<int32_t>(program.steps.size());
  e.lower_bound_bytes = live.peak_bytes;
  e.resident_bytes = live.resident_bytes;
  e.arena_bytes = best.result.arena_bytes;
  e.packing_algorithm = packing_algorithm_name(best.algorithm);
  e.breakdown = {};
  e.breakdown.fixed = fixed;
  e.allocated_bytes = m.allocated_bytes;
  e.reserved_bytes = m.reserved_bytes;
  e.total_bytes = checked_add(m.reserved_bytes, fixed);
  e.required_bytes = checked_add(m.required_bytes, fixed);

  // A program with no steps (every op folded away, say) peaks before the first step: there is no step 0. On
  // PyTorch's allocator, the step where its allocated peak is first reached.
  int32_t peak_step = program.steps.empty() ? -1 : live.peak_step;
  if (allocator.kind == AllocatorKind::PytorchCaching) peak_step = work.replay.peak_allocated_step;
  const CategoryBytes at_peak = live_by_category(program, live, peak_step);
  fill_categories(e.breakdown, at_peak);
  if (allocator.kind == AllocatorKind::Exact) {
    e.breakdown.allocator_overhead = m.reserved_bytes - sum(at_peak);  // arena fragmentation
  } else {  // a simulated allocator: rounding (allocated − exact) and overhead (reserved − allocated)
    e.breakdown.allocator_rounding = m.allocated_bytes - sum(at_peak);
    e.breakdown.allocator_overhead = m.reserved_bytes - m.allocated_bytes;
  }
  if (allocator.kind == AllocatorKind::PytorchCaching) {
    e.allocated_per_step = work.replay.allocated_per_step;
    e.reserved_per_step = work.replay.reserved_per_step;
    if (budget) {
      const PytorchAtCapacity at = simulate_pytorch_at_capacity(program, work.order, *budget > fixed ? *budget - fixed : 0,
                                                                allocator.expandable_segments);
      e.at_budget = AtBudget{*budget, at.fits, at.alloc_retries, checked_add(at.replay.peak_reserved_bytes, fixed),
                             at.replay.oom_buffer};
    }
    e.cudnn_workspace = cudnn_workspace_range(program, work.replay.allocated_per_step, options.cudnn_benchmark);
  } else if (budget) {
    e.at_budget = AtBudget{*budget, e.total_bytes <= *budget, 0, e.total_bytes, ""};
  }

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

namespace {

// Refused before (report/option_checks.cc: --runtime onnxruntime with --mode train, --schedule's mode).
void check_training_options(const EstimateOptions& options) {
  precondition(options.execution.runtime != Runtime::OnnxRuntime && !options.memory_schedule,
               "a training step for ONNX Runtime or in a memory-aware order");
}

// The training step's facts a report shows, from the cost model's result (the same members).
void take_training_facts(TrainingResult& from, TrainingFacts& to) {
  to.recompute_percent = from.recompute_percent;
  to.checkpoint_boundaries = std::move(from.checkpoint_boundaries);
  to.param_bytes = from.param_bytes;
  to.grad_bytes = from.grad_bytes;
  to.optimizer_state_bytes = from.optimizer_state_bytes;
  to.lora_adapted_layers = from.lora_adapted_layers;
  to.lora_adapted_parameters = from.lora_adapted_parameters;
  to.lora_parameters = from.lora_parameters;
  to.frozen_stored_bytes = from.frozen_stored_bytes;
  to.paged_state_bytes = from.paged_state_bytes;
  to.offloaded_host_bytes = from.offloaded_host_bytes;
  to.deepspeed_host_bytes = from.deepspeed_host_bytes;
  to.deepspeed_param_host_bytes = from.deepspeed_param_host_bytes;
  to.deepspeed_nvme_bytes = from.deepspeed_nvme_bytes;
  to.fsdp_offload_host_bytes = from.fsdp_offload_host_bytes;
  to.pipeline_stages = from.pipeline_stages;
  to.pipeline_busiest_stage = from.pipeline_busiest_stage;
}

TrainingResult training_program(const Graph& graph, const EstimateOptions& options, bool steady_state) {
  TrainingOptions t = options.training;
  t.steady_state = steady_state;
  return build_training_program(graph, options.execution, t);
}

}  // namespace

EstimateProgram build_estimate_program(const Graph& graph, const EstimateOptions& options) {
  EstimateProgram p;
  if (options.mode == Mode::Inference) {
    CostModelResult r = build_inference_program(graph, options.execution, options.inference);
    p.program = std::move(r.program);
    p.fixed_bytes = r.fixed_bytes;
    p.notes = std::move(r.notes);
  } else {
    check_training_options(options);
    TrainingResult r = training_program(graph, options, /*steady_state=*/true);
    p.program = std::move(r.program);
    p.fixed_bytes = r.fixed_bytes;
    p.notes = std::move(r.notes);
    take_training_facts(r, p);
  }
  if (options.memory_schedule) {
    const ScheduleResult sched = memory_aware_schedule(p.program);
    p.memory_order_computed = true;
    p.model_order_peak_bytes = sched.original_peak_bytes;
    p.memory_order_peak_bytes = sched.greedy_peak_bytes;
    if (sched.reordered) {
      p.program = apply_order(p.program, sched.order);
      p.schedule_used = "memory";
    } else {
      p.notes.push_back("the memory-aware order was not better than the model's order, which is kept");
    }
    if (options.execution.runtime == Runtime::PyTorch && sched.reordered)
      p.notes.push_back("PyTorch eager runs ops in the model's code order; the memory order assumes the code is "
                        "reordered to match");
  }
  return p;
}

Estimate estimate_graph(const Graph& graph, const EstimateOptions& options) {
  Estimate e;
  e.model = graph.model_path;
  e.mode = options.mode;
  e.tp = options.execution.tp;
  e.sequence_parallel = options.execution.sequence_parallel;
  e.runtime = options.execution.runtime;

  EstimateProgram p = build_estimate_program(graph, options);
  std::optional<TrainingResult> first_it;
  MeasureWork first_work;  // the first iteration's replay, for the cuDNN workspace's comparison
  if (options.mode == Mode::Training) {
    // The first iteration runs with the steady state's checkpoints (--checkpoint auto: the set it chose, not a
    // second search over the first iteration's program).
    EstimateOptions first = options;
    if (first.training.checkpoint.mode == CheckpointMode::Auto)
      first.training.checkpoint.auto_chosen = p.checkpoint_boundaries;
    first_it = training_program(graph, first, /*steady_state=*/false);
    // Its per-step replay only where the cuDNN workspace's comparison reads it (a PyTorch step that convolves).
    const bool compare = options.cudnn_benchmark && allocator_of(options).kind == AllocatorKind::PytorchCaching &&
                         std::any_of(p.program.steps.begin(), p.program.steps.end(),
                                     [](const Step& s) { return calls_cudnn_convolution(s.op); });
    e.first_iteration_total_bytes =
        checked_add(measure(first_it->program, allocator_of(options), compare ? &first_work : nullptr).reserved_bytes,
                    first_it->fixed_bytes);
  }
  e.notes = std::move(p.notes);
  static_cast<TrainingFacts&>(e) = std::move(static_cast<TrainingFacts&>(p));
  e.schedule_used = p.schedule_used;
  if (p.memory_order_computed) {
    e.model_order_peak_bytes = p.model_order_peak_bytes;
    e.memory_order_peak_bytes = p.memory_order_peak_bytes;
  } else {
    e.model_order_peak_bytes = lower_bound(p.program);
  }
  assess(p.program, options, p.fixed_bytes, options.top_tensors, options.device_budget, e);
  e.outside = outside_allocator(options);
  e.device_bytes = checked_add(e.total_bytes, e.outside.total());
  if (e.outside.nccl.communicators > 0)
    e.notes.push_back(fmt::format(
        "device (what nvidia-smi shows) counts NCCL's ring buffers: {} communicator(s) x {} channels x {} "
        "(--nccl-channels: NCCL_DEBUG=INFO prints its 'coll channels'); tree, NVLS and send/recv buffers are not "
        "counted",
        e.outside.nccl.communicators, e.outside.nccl.channels, format_bytes(e.outside.nccl.bytes_per_channel)));
  if (e.cudnn_workspace) {
    FirstIterationAllocated first;
    if (first_it && !first_work.replay.allocated_per_step.empty())
      first = {&first_it->program, &first_work.replay.allocated_per_step};
    e.cudnn_workspace = cudnn_workspace_range(p.program, e.allocated_per_step, options.cudnn_benchmark, first);
    e.notes.push_back(cudnn_workspace_note(*e.cudnn_workspace));
  }
  return e;
}

uint64_t metric_bytes(const Estimate& e, Metric metric) {
  switch (metric) {
    case Metric::Allocated: return e.allocated_bytes;
    case Metric::Reserved: return e.reserved_bytes;
    case Metric::Device: return e.device_bytes;
    case Metric::Total: break;
  }
  return e.total_bytes;
}

std::optional<IterationsAtCapacity> iterations_on_budget(const Graph& graph, const EstimateOptions& options,
                                                         uint64_t budget_bytes) {
  const RuntimeAllocator allocator = allocator_of(options);
  if (options.mode != Mode::Training || allocator.kind != AllocatorKind::PytorchCaching ||
      allocator.expandable_segments)
    return std::nullopt;
  const EstimateProgram steady = build_estimate_program(graph, options);
  EstimateOptions first = options;  // the steady state's checkpoints, as estimate_graph's first iteration
  if (first.training.checkpoint.mode == CheckpointMode::Auto)
    first.training.checkpoint.auto_chosen = steady.checkpoint_boundaries;
  const TrainingResult first_it = training_program(graph, first, /*steady_state=*/false);
  const uint64_t capacity = budget_bytes > steady.fixed_bytes ? budget_bytes - steady.fixed_bytes : 0;
  return run_iterations_at_capacity(first_it.program, steady.program, capacity);
}

OutsideAllocator outside_allocator(const EstimateOptions& options) {
  OutsideAllocator o;
  o.context_bytes = options.context_bytes;
  o.context_source = options.context_source;
  const bool data_parallel = options.mode == Mode::Training && options.training.gpus > 1;
  // --ep N: the experts' FSDP2 group over gpus / N (torchtitan's efsdp mesh, cost_models/training_ep.cc) is a
  // communicator of its own when it has several GPUs; the ep group's all-to-all is send/recv (not counted).
  const int ep = options.training.expert_parallel;
  const bool experts_group = data_parallel && ep > 1 && options.training.gpus / ep > 1;
  o.nccl = nccl_ring_buffers((data_parallel ? 1 : 0) + (experts_group ? 1 : 0) + (options.execution.tp > 1 ? 1 : 0),
                             options.nccl_channels);
  return o;
}

EstimateTotals estimate_totals(const Graph& graph, const EstimateOptions& options) {
  const EstimateProgram p = build_estimate_program(graph, options);
  const Measure m = measure(p.program, allocator_of(options));
  return {checked_add(m.reserved_bytes, p.fixed_bytes), checked_add(m.required_bytes, p.fixed_bytes)};
}

}  // namespace memplan
