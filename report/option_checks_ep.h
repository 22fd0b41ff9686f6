// --ep N's requirements, model-free (report/option_checks_ep.cc): part of check_requirements
// (report/option_checks.cc), so every entry meets them.
#pragma once

#include "report/options.h"

namespace memplan {

// --ep N against --mode, --gpus, --shard, --tp, --pp, LoRA, --frozen-dtype and --deepspeed. Throws InputError
// naming both flags.
void check_expert_parallel_options(const EstimateArgs& args);

}  // namespace memplan
