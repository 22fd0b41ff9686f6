// The flags of `memplan estimate`, shared by plan, fit, check and timeline; they fill EstimateArgs
// (report/estimate_config.h), which turns them into EstimateOptions.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli/options.h"
#include "report/estimate_config.h"

namespace memplan::cli {

// Adds the model options and every estimate option to `cmd`. With `with_checkpoint_budget` false (check)
// no --budget is added here: check adds its own --budget, the gate's memory limit, into the same
// args.budget, so `check --checkpoint auto` also fits its checkpoints to that limit.
void add_estimate_options(CLI::App* cmd, EstimateArgs& args, bool with_checkpoint_budget = true);

}  // namespace memplan::cli
