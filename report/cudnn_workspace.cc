#include "report/cudnn_workspace.h"

#include <algorithm>

#include "cost_models/runtime_rules.h"

namespace memplan {

std::optional<CudnnWorkspaceRange> cudnn_workspace_range(const Program& program,
                                                         const std::vector<uint64_t>& allocated_per_step) {
  CudnnWorkspaceRange r;
  for (size_t s = 0; s < program.steps.size() && s < allocated_per_step.size(); ++s) {
    if (!calls_cudnn_convolution(program.steps[s].op)) continue;
    r.least_allocated_at_convolution = r.convolution_steps == 0
                                           ? allocated_per_step[s]
                                           : std::min(r.least_allocated_at_convolution, allocated_per_step[s]);
    ++r.convolution_steps;
  }
  if (r.convolution_steps == 0) return std::nullopt;
  return r;
}

}  // namespace memplan
