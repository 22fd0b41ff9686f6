// The lower bound of a program (peak live bytes of its non-resident buffers) plus its resident bytes,
// with the planner's liveness rule. Used by checkpoint `auto` to test a boundary set against a budget;
// the planner computes the reported figures.
#pragma once

#include <cstdint>

#include "planner/program.h"

namespace memplan {

struct ProgramPeak {
  uint64_t live_peak = 0;   // max over steps of live non-resident bytes
  uint64_t resident = 0;    // bytes of resident buffers
  uint64_t total() const;   // overflow-checked sum
};

ProgramPeak program_peak(const Program& p);

}  // namespace memplan
