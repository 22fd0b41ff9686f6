// What the option schema's rows are written with (report/option_schema.cc, report/option_rows_serve.cc): the
// field accessor, the command masks, the configuration line's helper, and serve's own rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/options.h"

namespace memplan {

// A row's field: an accessor on CommandArgs, e.g. FIELD(estimate.grad_accum).
#define FIELD(path) FieldRef(+[](CommandArgs& a) -> decltype(auto) { return (a.path); })

// The commands that read a model and answer about it; export only writes a config's graph (MODEL, --graph, -o).
inline constexpr uint32_t kAnalysing = kInspect | kEstimate | kTimeline | kFit | kCheck | kServe | kPlan;
inline constexpr uint32_t kAll = kAnalysing | kExport;
// The commands that estimate a step (serve: inference steps only, so no training option).
inline constexpr uint32_t kEstimating = kEstimate | kTimeline | kFit | kCheck | kServe;
inline constexpr uint32_t kTraining = kEstimate | kTimeline | kFit | kCheck;

// A row's part of the configuration line: `text` when `set`, else "".
inline std::string if_set(bool set, std::string text) { return set ? text : ""; }

// The loss rows (report/option_rows_loss.cc): --loss to --upcast, after --grad-accum.
std::vector<OptionSpec> loss_option_rows();
// The fine-tuning rows (report/option_rows_finetune.cc): --trainable to --optimizer-in-backward, after --zero-grad.
std::vector<OptionSpec> finetune_option_rows();
// --ep (report/option_rows_parallel.cc), after the fine-tuning rows.
std::vector<OptionSpec> expert_parallel_option_rows();
// serve's rows: the engines' settings (report/option_rows_serve.cc), after fit's in the schema.
std::vector<OptionSpec> serve_option_rows();
// check's rows and the output rows (report/option_rows_output.cc), last in the schema.
std::vector<OptionSpec> check_and_output_option_rows();

}  // namespace memplan
