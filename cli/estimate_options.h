// The options of `memplan estimate`, shared by plan, fit, check and timeline.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli/options.h"
#include "report/estimate.h"

namespace memplan::cli {

struct EstimateArgs {
  ModelArgs model;
  std::string mode = "inference";
  std::string runtime = runtime_name(kDefaultRuntime);
  std::string dtype = "fp32";
  std::string schedule = "model";
  std::string arch = "sm90";
  std::string attention = "eager";
  // Training.
  std::string optimizer = "adamw";
  std::string precision = "fp32";
  std::string checkpoint = "none";
  std::string budget;               // --budget for --checkpoint auto
  int grad_accum = 1;
  std::string loss = "cross-entropy";
  int gpus = 1;
  std::string shard = "none";
  std::string optimizer_impl = "foreach";
  bool gradient_as_bucket_view = false;
  int top = EstimateOptions{}.top_tensors;
};

// Adds the model options and every estimate option to `cmd`. With `with_checkpoint_budget` false (check)
// no --budget is added here: check adds its own --budget, the gate's memory limit, into the same
// args.budget, so `check --checkpoint auto` also fits its checkpoints to that limit.
void add_estimate_options(CLI::App* cmd, EstimateArgs& args, bool with_checkpoint_budget = true);

EstimateOptions to_estimate_options(const EstimateArgs& args);

// A one-line description of the configuration: "inference, pytorch runtime, fp32, batch=8, seq=512".
std::string describe_configuration(const EstimateArgs& args, const Graph& graph);

}  // namespace memplan::cli
