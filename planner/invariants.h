// The plan checker run on every plan (as bloaty's CheckConsistency): no two records that share a step
// overlap in bytes, every record fits inside the arena, and offsets respect the alignment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/packing.h"

namespace memplan {

struct PlanViolation {
  enum class Kind : uint8_t { Overlap, OutsideArena, Misaligned, BadInput };
  Kind kind = Kind::Overlap;
  int32_t a = -1;  // record index
  int32_t b = -1;  // the other record of an overlap, else -1
  std::string message;  // names both buffers (by `names` when given, else "record <i>")
};

// Sweeps the clock once, keeping the live records in a set ordered by offset, and checks each new
// record against its neighbours there: O(n log n), fine for 100k buffers. Records overlap when they
// share a step and their exact byte ranges [offset, offset + bytes) intersect; zero-byte records never
// overlap. With overlaps present the report holds at least one violation per record placed on top of
// another (not necessarily every pair). An empty result proves the plan valid.
std::vector<PlanViolation> check_plan(const std::vector<UsageRecord>& records,
                                      const std::vector<uint64_t>& offsets, uint64_t arena_bytes,
                                      uint64_t alignment = 1, const std::vector<std::string>* names = nullptr);

}  // namespace memplan
