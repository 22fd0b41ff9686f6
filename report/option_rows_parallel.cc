// The expert-parallel row of the option schema (report/options.h), after the fine-tuning rows
// (report/option_schema.cc). The graph side is onnx_import/hf_moe_ep.cc, the checks report/option_checks_ep.cc.
#include "report/option_rows.h"

namespace memplan {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<OptionSpec> expert_parallel_option_rows() {
  using K = OptionKind;
  return {
      {.flag = "--ep", .kind = K::Int, .commands = kTraining, .scope = Scope::Train,
       .help = "Expert-parallel GPUs, as torchtitan v0.2.2's ExpertParallel runs them, for a mixture-of-experts "
               "config.json with --experts-implementation grouped_mm (not gpt_oss): each GPU holds E/N experts' "
               "parameters, grads and optimizer states, routes its own batch, and sends each row to its expert's GPU "
               "by all-to-all; the estimate is the busiest GPU's (rank 0: its experts receive the most rows from all "
               "N GPUs under --moe-routing), with the all-to-all send and receive buffers and torchtitan's "
               "permutation padded to 8 rows per expert. The N GPUs are data-parallel ranks: --gpus a multiple of N "
               "with --shard fsdp2 (the other parameters over all --gpus, each expert's slice over --gpus / N); no "
               "--tp or --pp. N must divide the experts. transformers' own DistributedConfig(enable_expert_parallel) "
               "(router masked to the local experts, outputs all-reduced, every GPU on the same batch) is not modelled",
       .field = FIELD(estimate.model.ep), .min = 1, .show_default = true,
       .describe = [](const EstimateArgs& a) { return if_set(a.model.ep > 1, ", ep " + std::to_string(a.model.ep)); }},
  };
}
#pragma GCC diagnostic pop

}  // namespace memplan
