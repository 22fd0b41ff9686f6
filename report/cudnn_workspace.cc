#include "report/cudnn_workspace.h"

#include <algorithm>
#include <map>

#include "cost_models/runtime_rules.h"

namespace memplan {

std::optional<CudnnWorkspaceRange> cudnn_workspace_range(const Program& program,
                                                         const std::vector<uint64_t>& allocated_per_step,
                                                         bool benchmark, const FirstIterationAllocated& first) {
  CudnnWorkspaceRange r;
  r.benchmark = benchmark;
  for (size_t s = 0; s < program.steps.size() && s < allocated_per_step.size(); ++s) {
    if (!calls_cudnn_convolution(program.steps[s].op)) continue;
    r.least_allocated_at_convolution = r.convolution_steps == 0
                                           ? allocated_per_step[s]
                                           : std::min(r.least_allocated_at_convolution, allocated_per_step[s]);
    ++r.convolution_steps;
  }
  if (r.convolution_steps == 0) return std::nullopt;
  if (!benchmark || !first.program || !first.allocated_per_step) return r;

  // The first iteration's allocated bytes at each convolution step, by name (the first step of a name: a
  // checkpointed segment's recomputation repeats its forward's names, and the forward's call comes first).
  std::map<std::string, uint64_t> first_at;
  for (size_t s = 0; s < first.program->steps.size() && s < first.allocated_per_step->size(); ++s)
    if (calls_cudnn_convolution(first.program->steps[s].op))
      first_at.emplace(first.program->steps[s].name, (*first.allocated_per_step)[s]);
  uint64_t extra = 0;
  std::string at;
  std::map<std::string, bool> seen;
  for (size_t s = 0; s < program.steps.size() && s < allocated_per_step.size(); ++s) {
    const Step& step = program.steps[s];
    if (!calls_cudnn_convolution(step.op) || !seen.emplace(step.name, true).second) continue;
    const auto it = first_at.find(step.name);
    if (it == first_at.end() || allocated_per_step[s] <= it->second) continue;
    if (allocated_per_step[s] - it->second > extra) {
      extra = allocated_per_step[s] - it->second;
      at = step.name;
    }
  }
  r.first_iteration_extra_free = extra;
  r.first_iteration_extra_free_at = at;
  return r;
}

std::string cudnn_workspace_note(const CudnnWorkspaceRange& r) {
  std::string note = "cuDNN convolution workspace (" + std::to_string(r.convolution_steps) +
                     " convolution steps): counted as 0 bytes, what fit and check budget: PyTorch never fails a step "
                     "on it, taking another engine when a workspace cannot be allocated. ";
  const std::string least = std::to_string(r.least_allocated_at_convolution);
  if (!r.benchmark)
    return note + "Without cudnn.benchmark (--cudnn-benchmark off) the heuristic engines are tried in order, one whose "
                  "workspace does not fit passed over; the workspace is at most the free memory at the call: on a "
                  "card, its usable memory minus " + least + " bytes allocated at the least loaded convolution.";
  note += "With cudnn.benchmark (--cudnn-benchmark on) each convolution keeps the fastest plan whose workspace fitted "
          "when it was timed, so the workspace can take up to the free memory at the call: on a card, its usable "
          "memory minus " + least + " bytes allocated at the least loaded convolution; a cached plan whose workspace "
          "no longer fits is timed again at that call.";
  if (r.first_iteration_extra_free && *r.first_iteration_extra_free > 0)
    note += " The first iteration has up to " + std::to_string(*r.first_iteration_extra_free) +
            " bytes more free at a convolution (" + r.first_iteration_extra_free_at +
            ") than later ones, before the optimizer's states exist: a plan chosen there that needs more than is "
            "free later is timed again in the second iteration (a cache flush and a benchmark), not an "
            "out-of-memory error.";
  return note + " The workspace block a call leaves in the allocator's cache can be split by later tensors: that "
                "fragmentation is not modelled.";
}

}  // namespace memplan
