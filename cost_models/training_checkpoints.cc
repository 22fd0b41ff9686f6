// Which segments of a training step are checkpointed (--checkpoint): the boundaries each mode chooses among the
// separators (checkpoint_plan.h), the repeated blocks of layers and torchtitan's selective modes
// (selective_checkpoint.h), and auto's search with the program builder.
#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "cost_models/checkpoint_plan.h"
#include "cost_models/selective_checkpoint.h"
#include "cost_models/training_step.h"
#include "cost_models/wrap_units.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "planner/measure.h"

namespace memplan {

namespace {

// --checkpoint layers: the repeated blocks (wrap_units.h's default rule) in forward order.
std::vector<std::string> repeated_blocks(const TrainingContext& c) {
  const WrapUnits w = find_wrap_units(*c.graph, c.ops, c.module_parameters, "");
  std::vector<std::pair<int32_t, std::string>> order;
  for (size_t u = 1; u < w.count(); ++u)
    if (w.first_op[u] >= 0) order.emplace_back(w.first_op[u], w.names[u]);
  std::sort(order.begin(), order.end());
  std::vector<std::string> names;
  for (const auto& [first, name] : order) names.push_back(name);
  return names;
}

std::vector<int32_t> boundary_ops(const TrainingContext& c, const std::vector<int32_t>& chosen) {
  std::vector<int32_t> ops;
  for (int32_t i : chosen) ops.push_back(c.separators[i].op);
  return ops;
}

// --checkpoint auto: the fewest recomputed FLOPs whose step fits the budget, judged as fit and check judge it:
// by what the runtime's allocator needs (training_measure). Recompute is the forward FLOPs up to the last
// boundary, so try last boundaries from the first candidate onwards; for each, boundaries every K candidates
// ending there, K from a small ladder, and take the set that needs least among those that fit.
// A set whose floor (resident plus the exact live peak, planner/measure.h) is over the budget cannot fit: its
// allocator is simulated only if no set fits, to find the one that needs least (the first tried among equals),
// in floor order until a floor exceeds the least need found. The programs of the kKeptPrograms sets of lowest
// floor are kept from the first pass (names dropped: measure reads sizes and order only), so those, the first
// measured, are not built again (on resnet50_train at 512 MiB, 105 sets are measured). More kept programs save
// more builds but hold more memory, whose page faults cost more system time than the builds save: 16 measured
// best there (bench/decisions/README.md).
std::vector<int32_t> auto_boundaries(const TrainingContext& c, std::vector<std::string>& notes) {
  const uint64_t budget = c.options.checkpoint.budget_bytes;
  if (budget == 0) throw InputError("--checkpoint auto needs --budget SIZE");
  auto build = [&](const std::vector<int32_t>& chosen) { return TrainingStep(c, boundary_ops(c, chosen)).build(); };
  auto need = [&](const CostModelResult& r) { return training_measure(r, c.execution).required_bytes; };
  if (need(build({})) <= budget) return {};
  struct Tried {
    std::vector<int32_t> chosen;
    uint64_t floor = 0;
    std::optional<uint64_t> need;
  };
  std::vector<Tried> tried;
  constexpr size_t kKeptPrograms = 16;
  std::map<std::pair<uint64_t, size_t>, CostModelResult> kept;  // by (floor, index in tried): the lowest floors
  auto keep = [&](TrainingResult& r, uint64_t floor, size_t index) {
    if (kept.size() == kKeptPrograms && std::prev(kept.end())->first < std::make_pair(floor, index)) return;
    CostModelResult& k = kept[{floor, index}];
    k.program = std::move(r.program);
    k.fixed_bytes = r.fixed_bytes;
    for (Buffer& b : k.program.buffers) std::string().swap(b.name);
    for (Step& s : k.program.steps) std::string().swap(s.name), std::string().swap(s.op);
    if (kept.size() > kKeptPrograms) kept.erase(std::prev(kept.end()));
  };
  const int32_t n = static_cast<int32_t>(c.separators.size());
  for (int32_t last = 0; last < n; ++last) {
    std::optional<size_t> fitting;
    for (int32_t k : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32}) {
      if (k > last + 1 && k != 1) break;
      Tried t{every_k_ending_at(last, k), 0, std::nullopt};
      TrainingResult r = build(t.chosen);
      t.floor = checked_add(measure_floor(r.program), r.fixed_bytes, "required bytes");
      if (t.floor <= budget) t.need = need(r);
      else keep(r, t.floor, tried.size());
      tried.push_back(std::move(t));
      const Tried& now = tried.back();
      if (now.need && *now.need <= budget && (!fitting || *now.need < *tried[*fitting].need)) fitting = tried.size() - 1;
    }
    if (fitting) return tried[*fitting].chosen;
  }
  notes.push_back("No checkpoint boundary set fits the budget of " + std::to_string(budget) +
                  " bytes; using the set found that needs the least of the device (the allocator's required bytes).");
  std::vector<size_t> by_floor(tried.size());
  for (size_t i = 0; i < by_floor.size(); ++i) by_floor[i] = i;
  std::stable_sort(by_floor.begin(), by_floor.end(), [&](size_t a, size_t b) { return tried[a].floor < tried[b].floor; });
  std::optional<size_t> best;
  for (size_t i : by_floor) {
    Tried& t = tried[i];
    if (best && t.floor > *tried[*best].need) break;  // needs at least its floor: cannot beat the best
    if (!t.need) {
      const auto k = kept.find({t.floor, i});
      t.need = k != kept.end() ? need(k->second) : need(build(t.chosen));
    }
    if (!best || *t.need < *tried[*best].need || (*t.need == *tried[*best].need && i < *best)) best = i;
  }
  return best ? tried[*best].chosen : std::vector<int32_t>{};
}

// The separators named `names` (an earlier auto search's choice, in order), as indices.
std::vector<int32_t> separators_named(const TrainingContext& c, const std::vector<std::string>& names) {
  std::vector<int32_t> out;
  for (const std::string& name : names) {
    int32_t found = -1;
    for (size_t i = 0; i < c.separators.size() && found < 0; ++i)
      if (c.graph->tensors[c.separators[i].tensor].name == name) found = static_cast<int32_t>(i);
    if (found < 0) throw InternalError("the checkpoint boundary " + name + " chosen before is not a separator of this step");
    out.push_back(found);
  }
  return out;
}

}  // namespace

SegmentPlan plan_segments(const TrainingContext& context, std::vector<int32_t>& chosen, std::vector<std::string>& notes) {
  const CheckpointOptions& o = context.options.checkpoint;
  const Graph& graph = *context.graph;
  SegmentPlan plan;
  plan.from_first_boundary = o.mode == CheckpointMode::At;
  const bool selective = o.mode == CheckpointMode::SelectiveOp || o.mode == CheckpointMode::SelectiveLayers;
  if (o.mode == CheckpointMode::Auto && o.auto_chosen) {
    chosen = separators_named(context, *o.auto_chosen);
  } else if (o.mode == CheckpointMode::Auto) {
    chosen = auto_boundaries(context, notes);
  } else if (o.mode == CheckpointMode::Layers || selective) {
    const std::vector<std::string> names = repeated_blocks(context);
    const BlockBoundaries blocks = block_boundaries(graph, context.separators, names);
    chosen = blocks.chosen;
    plan.from_first_boundary = blocks.from_first_boundary;
    if (o.mode == CheckpointMode::SelectiveLayers) {  // block b is segment b + first
      const size_t first = blocks.from_first_boundary ? 1 : 0;
      if (chosen.size() != names.size() + first)
        throw InternalError("block_boundaries gave " + std::to_string(chosen.size()) + " boundaries for " +
                            std::to_string(names.size()) + " blocks");
      plan.checkpointed.assign(chosen.size(), false);
      for (size_t b = 0; b < names.size(); ++b) plan.checkpointed[b + first] = layer_sac_checkpoints(b, o.every);
    }
    plan.per_op = o.mode == CheckpointMode::SelectiveOp;
  } else {
    chosen = choose_boundaries(graph, context.separators, o);
  }
  plan.reentrant = !selective && o.reentrant;  // torchtitan's ptd_checkpoint_wrapper: CheckpointImpl.NO_REENTRANT
  // selective:op stops early too: the cached outputs the stopped recomputation never pops stay in the policy's
  // storage to the segment's backward end (training_forward.cc recompute_segment).
  plan.early_stop = !plan.reentrant && o.early_stop;
  plan.end_ops = boundary_ops(context, chosen);
  if (!plan.checkpointed.empty()) {  // report the boundaries of the checkpointed segments only
    std::vector<int32_t> kept;
    for (size_t s = 0; s < chosen.size(); ++s)
      if (plan.checkpointed[s] || (s + 1 < chosen.size() && plan.checkpointed[s + 1])) kept.push_back(chosen[s]);
    chosen = std::move(kept);
  }
  return plan;
}

}  // namespace memplan
