// Property tests over 100,000-step synthetic programs (fixed seeds): every packing algorithm's plan passes
// the invariant checker, never beats the lower bound, the memory-aware schedule is a valid topological
// order that never raises the bound, and allocator replays hold at least the live bytes at every step.
#include <gtest/gtest.h>

#include "planner/alloc_ort_bfc.h"
#include "planner/alloc_pytorch.h"
#include "planner/invariants.h"
#include "planner/liveness.h"
#include "planner/packing.h"
#include "planner/schedule.h"
#include "synthetic_program.h"

namespace memplan {
namespace {

struct Case {
  const char* name;
  SyntheticOptions options;
};

class PlannerProperty : public ::testing::TestWithParam<Case> {};

TEST_P(PlannerProperty, EveryPlanIsValidAndAboveTheBound) {
  const Program p = synthetic_program(GetParam().options);
  const std::vector<LiveRange> ranges = compute_liveness(p);
  const LiveBytes live = compute_live_bytes(p, ranges);
  const ProgramRecords pr = usage_records(p, ranges);
  for (uint64_t alignment : {uint64_t{1}, kDefaultAlignment}) {
    const uint64_t aligned_bound = aligned_lower_bound(pr.records, alignment);
    EXPECT_GE(aligned_bound, live.peak_bytes);
    const std::vector<PackingResult> all = pack_all(pr.records, alignment);
    for (int a = 0; a < kNumPackingAlgorithms; ++a) {
      const auto algorithm = static_cast<PackingAlgorithm>(a);
      const PackingResult& r = all[a];
      const auto violations = check_plan(pr.records, r.offsets, r.arena_bytes, alignment);
      EXPECT_TRUE(violations.empty()) << packing_algorithm_name(algorithm) << ": " << violations.front().message;
      EXPECT_GE(r.arena_bytes, aligned_bound) << packing_algorithm_name(algorithm);
    }
  }
}

TEST_P(PlannerProperty, ScheduleIsATopologicalOrderThatNeverRaisesTheBound) {
  const Program p = synthetic_program(GetParam().options);
  const ScheduleResult s = memory_aware_schedule(p);
  EXPECT_EQ(check_topological_order(p, s.order), "");
  EXPECT_LE(s.chosen_peak_bytes, s.original_peak_bytes);
  EXPECT_EQ(lower_bound(apply_order(p, s.order)), s.chosen_peak_bytes);
}

TEST_P(PlannerProperty, AllocatorsHoldAtLeastTheLiveBytesAtEveryStep) {
  const Program p = synthetic_program(GetParam().options);
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  // Sampled after a step's allocations, the allocators hold exactly the residents and the buffers live at
  // that step, each rounded up: never less than their exact bytes.
  for (const AllocatorReplay& r : {simulate_pytorch(p), simulate_ort_bfc(p)}) {
    ASSERT_EQ(r.allocated_per_step.size(), p.steps.size());
    for (size_t s = 0; s < p.steps.size(); ++s) {
      ASSERT_GE(r.allocated_per_step[s], live.resident_bytes + live.per_step[s]) << "step " << s;
      ASSERT_GE(r.reserved_per_step[s], r.allocated_per_step[s]) << "step " << s;
    }
    EXPECT_GE(r.peak_reserved_bytes, r.peak_allocated_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    HundredThousandSteps, PlannerProperty,
    ::testing::Values(Case{"network", {.steps = 100000, .seed = 7}},
                      Case{"wide", {.steps = 100000, .seed = 11, .window = 24, .extra_input_per_mille = 700,
                                    .skip_per_mille = 50, .skip_reach = 5000}},
                      Case{"chain", {.steps = 100000, .seed = 13, .window = 1, .extra_input_per_mille = 0,
                                     .skip_per_mille = 0}}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace memplan
