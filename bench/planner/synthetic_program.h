// Synthetic memory programs shaped like network schedules, for the planner benchmark and the planner's
// property tests. Deterministic for a given seed on every platform (std::mt19937_64 is fully specified,
// and no std:: distribution is used).
#pragma once

#include <cstdint>

#include "planner/program.h"

namespace memplan {

struct SyntheticOptions {
  int32_t steps = 100000;
  uint64_t seed = 1;
  int32_t window = 6;                  // inputs come from the last `window` outputs (a chain when 1)
  int32_t extra_input_per_mille = 300; // chance of a second input from the window (joins, residual adds)
  int32_t skip_per_mille = 20;         // chance of a long skip input from up to `skip_reach` outputs back
  int32_t skip_reach = 2000;
  int32_t second_output_per_mille = 100;  // chance of a second output (forks, saved statistics)
  int32_t workspace_per_mille = 200;      // chance of a scratch buffer live only during its step
  int32_t weight_per_mille = 500;         // chance of reading a resident weight of its own
};

// Step 0 reads a live_at_start input; the last step's output is live_at_end. Activation sizes are
// (1..16) x 2^(10..22) bytes (1 KiB to 64 MiB), weights up to 4 MiB.
Program synthetic_program(const SyntheticOptions& options = {});

}  // namespace memplan
