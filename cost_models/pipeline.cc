// Pipeline parallelism, 1F1B (pipeline.h).
#include "cost_models/pipeline.h"

#include <algorithm>
#include <tuple>

#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "planner/liveness.h"

namespace memplan {

namespace {

struct Split {
  std::vector<int32_t> stage_of_op;
  std::vector<std::vector<int32_t>> units;  // per stage: its blocks, in forward order
};

Split split_stages(const TrainingContext& c, const WrapUnits& w, int pp) {
  std::vector<int32_t> blocks;
  for (size_t u = 1; u < w.count(); ++u)
    if (w.first_op[u] >= 0) blocks.push_back(static_cast<int32_t>(u));
  std::sort(blocks.begin(), blocks.end(), [&](int32_t a, int32_t b) { return w.first_op[a] < w.first_op[b]; });
  const int n = static_cast<int>(blocks.size());
  if (n < pp)
    throw InputError("--pp " + std::to_string(pp) + " needs at least " + std::to_string(pp) + " blocks (wrapping units) in model '" +
                     c.graph->model_path + "', which has " + std::to_string(n));
  Split s;
  s.units.resize(pp);
  std::vector<int32_t> stage_of_unit(w.count(), -1);
  // An even split; when N does not divide the blocks, the first stages take one more.
  for (int i = 0, next = 0; i < pp; ++i) {
    const int count = n / pp + (i < n % pp ? 1 : 0);
    for (int k = 0; k < count; ++k, ++next) {
      s.units[i].push_back(blocks[next]);
      stage_of_unit[blocks[next]] = i;
    }
  }
  const int32_t last_block_op = w.last_op[blocks.back()];
  int32_t current = 0;
  for (size_t i = 0; i < c.ops.size(); ++i) {
    const int32_t u = w.unit_of_op[i];
    int32_t stage = u > 0 && stage_of_unit[u] >= 0 ? stage_of_unit[u] : static_cast<int32_t>(i) > last_block_op ? pp - 1 : current;
    current = std::max(current, stage);
    s.stage_of_op.push_back(current);
  }
  return s;
}

uint64_t peak_with_resident(const Program& p) {
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  return checked_add(live.peak_bytes, live.resident_bytes, "peak bytes");
}

// The activations one micro-batch leaves for its backward: those live when the backward starts.
uint64_t saved_activation_bytes(const Program& p) {
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].phase == Phase::Backward) return live.per_step_by_category[s][static_cast<int>(Category::Activation)];
  return 0;
}

}  // namespace

std::vector<PipelineStage> build_pipeline_stages(const TrainingContext& c) {
  const TrainingOptions& o = c.options;
  const int pp = o.pp;
  const int m = o.micro_batches > 0 ? o.micro_batches : pp;
  // Refused before any cost model runs (report/option_checks.cc's combination matrix).
  precondition(o.shard != Sharding::Fsdp && o.shard != Sharding::Fsdp2 && o.checkpoint.mode == CheckpointMode::None, "--pp with FSDP or checkpointing");
  const WrapUnits w = find_wrap_units(*c.graph, c.ops, c.module_parameters, o.fsdp_wrap);
  const Split split = split_stages(c, w, pp);
  std::vector<PipelineStage> stages;
  for (int i = 0; i < pp; ++i) {
    StageGraph graph = stage_graph(c, split.stage_of_op, i);
    TrainingContext s = stage_context(c, graph);
    PipelineStageFacts f;
    f.first_unit = w.names[split.units[i].front()];
    f.last_unit = w.names[split.units[i].back()];
    f.units = static_cast<int>(split.units[i].size());
    f.in_flight_micro_batches = std::min(pp - i, m);
    f.saved_bytes_per_micro_batch = saved_activation_bytes(TrainingStep(s, std::vector<int32_t>{}).build().program);
    s.in_flight_bytes.assign(f.in_flight_micro_batches - 1, f.saved_bytes_per_micro_batch);
    TrainingResult r = TrainingStep(s, std::vector<int32_t>{}).build();
    f.param_bytes = r.param_bytes;
    f.peak_bytes = peak_with_resident(r.program);
    const Measure m = training_measure(r, c.execution);
    f.required_bytes = m.required_bytes;
    stages.push_back({std::move(r), std::move(f), m.reserved_bytes, std::move(graph)});
  }
  return stages;
}

TrainingResult build_pipeline_program(const TrainingContext& c, std::vector<std::string>& notes) {
  const int pp = c.options.pp;
  const int m = c.options.micro_batches > 0 ? c.options.micro_batches : pp;
  std::vector<PipelineStage> stages = build_pipeline_stages(c);
  int busiest = 0;
  // What fit and check would find each GPU needs; among equals, what its allocator reserves (the estimate's
  // total), then the lower bound.
  auto load = [&](int i) {
    return std::make_tuple(stages[i].facts.required_bytes, stages[i].reserved_bytes, stages[i].facts.peak_bytes);
  };
  for (int i = 1; i < pp; ++i)
    if (load(i) > load(busiest)) busiest = i;
  TrainingResult best = std::move(stages[busiest].result);
  best.pipeline_busiest_stage = busiest;
  for (PipelineStage& s : stages) best.pipeline_stages.push_back(std::move(s.facts));
  const PipelineStageFacts& b = best.pipeline_stages[busiest];
  notes.push_back("Pipeline parallel, 1F1B over " + std::to_string(pp) + " stages and " + std::to_string(m) +
                  " micro-batches (the batch is one micro-batch): stage i holds the activations of min(" +
                  std::to_string(pp) + " - i, " + std::to_string(m) + ") micro-batches. The estimate is the busiest "
                  "GPU's, stage " + std::to_string(busiest) + " (" + b.first_unit + " to " +
                  b.last_unit + ", " + std::to_string(b.in_flight_micro_batches) + " in flight).");
  return best;
}

}  // namespace memplan
