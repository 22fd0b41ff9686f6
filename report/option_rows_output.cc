// check's rows and the output rows of the option schema (report/options.h): baselines, plan and timeline files,
// --format and --json.
#include "report/option_choices.h"
#include "report/option_rows.h"

namespace memplan {

// Rows are designated initializers that name only what differs from OptionSpec's defaults; GCC 12's -Wextra
// would warn for every member left to its default member initializer.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<OptionSpec> check_and_output_option_rows() {
  using K = OptionKind;
  return {
      // check.
      {.flag = "--baseline", .kind = K::Text, .commands = kCheck,
       .help = "Fail when the estimate grew more than --max-increase over this baseline", .field = FIELD(baseline)},
      {.flag = "--max-increase", .kind = K::Real, .commands = kCheck, .help = "Allowed growth over the baseline, in percent",
       .field = FIELD(max_increase_percent), .min = 0, .max = 1e300, .show_default = true},
      {.flag = "--write-baseline", .kind = K::Text, .commands = kCheck,
       .help = "Write the current estimate as a baseline file", .field = FIELD(write_baseline)},
      {.flag = "--metric", .kind = K::Choice, .commands = kCheck,
       .help = "The figure the regression limit compares with the baseline, and a written baseline records: total "
               "(the headline: what the runtime holds at its peak), allocated (torch.cuda.max_memory_allocated), "
               "reserved (max_memory_reserved) or device (what nvidia-smi shows: total + the CUDA context and NCCL "
               "buffers). Compare the one your monitoring reports",
       .field = FIELD(metric), .choices = kMetricChoices.names(), .show_default = true},
      // plan and timeline.
      {.flag = "--alignment", .kind = K::Int, .commands = kPlan, .help = "Offset alignment in bytes (cudaMalloc aligns to 256)",
       .field = FIELD(alignment), .min = 1, .show_default = true},
      {.flag = "-o,--output", .kind = K::Text, .commands = kPlan, .help = "Write the plan here (default: standard output)",
       .field = FIELD(output)},
      {.flag = "-o,--output", .keyword = "-", .kind = K::Text, .commands = kTimeline,
       .help = "FILE.svg or FILE.html", .field = FIELD(output), .required = true},
      {.flag = "-o,--output", .kind = K::Text, .commands = kExport,
       .help = "FILE.onnx: the config's --graph as a weight-less ONNX file (replaced if it exists; never the config)",
       .field = FIELD(output), .required = true},
      // Output (the CLI's: Python returns the JSON's dictionary).
      {.flag = "--format", .keyword = "-", .kind = K::Choice, .commands = kAnalysing & ~kTimeline & ~kPlan,
       .help = "Output format: table (for people), json (for scripts; see docs/json.md), markdown (for pull-request "
               "comments)",
       .field = FIELD(format), .choices = kFormatChoices.names(), .show_default = true},
      {.flag = "--format", .keyword = "-", .kind = K::Choice, .commands = kPlan,
       .help = "What goes to standard output without -o: json (the plan file), table or markdown (a summary)",
       .field = FIELD(plan_format), .choices = kFormatChoices.names(), .show_default = true},
      {.flag = "--json", .keyword = "-", .kind = K::Flag, .commands = kAnalysing & ~kTimeline, .help = "Short for --format json",
       .field = FIELD(json)},
  };
}
#pragma GCC diagnostic pop

}  // namespace memplan
