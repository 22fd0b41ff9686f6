#include "planner/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "planner/liveness.h"
#include "planner/summary.h"
#include "program_builder.h"

namespace memplan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kInput;
using testing::kOutput;
using testing::ProgramBuilder;

// Two branches from x, joined at the end, written breadth-first:
//   a:  x -> A1 (100)    b:  x -> B1 (100)    a2: A1 -> A2 (10)    b2: B1 -> B2 (10)    join: A2, B2 -> out (1)
Program two_branches() {
  ProgramBuilder p;
  const int32_t x = p.buffer("x", 1, kInput);
  const int32_t a1 = p.buffer("A1", 100), b1 = p.buffer("B1", 100);
  const int32_t a2 = p.buffer("A2", 10), b2 = p.buffer("B2", 10);
  const int32_t out = p.buffer("out", 1, kOutput);
  p.step("a", {x}, {a1});
  p.step("b", {x}, {b1});
  p.step("a2", {a1}, {a2});
  p.step("b2", {b1}, {b2});
  p.step("join", {a2, b2}, {out});
  return p.program();
}

TEST(Schedule, DepthFirstOrderLowersTheBoundOfTwoBranches) {
  // Original order: s0 x1+A1 100 = 101; s1 x1+A1+B1 = 201; s2 A1+B1+A2 10 = 210; s3 B1+A2+B2 = 120;
  // s4 A2+B2+out 1 = 21. Bound 210.
  // Greedy: ready a (+100), b (+100): tie -> a. Running a leaves b as x's last reader: b's key 99.
  // a2 becomes ready: +10 - 100 (A1's last reader) = -90 -> a2. Then b (99), then b2 (-90), then join.
  // Order a, a2, b, b2, join: s0 101; s1 x1+A1+A2 = 111; s2 x1+A2+B1 = 111; s3 A2+B1+B2 = 120; s4 21.
  const Program p = two_branches();
  const ScheduleResult r = memory_aware_schedule(p);
  EXPECT_THAT(r.order, ElementsAre(0, 2, 1, 3, 4));
  EXPECT_EQ(r.original_peak_bytes, 210u);
  EXPECT_EQ(r.greedy_peak_bytes, 120u);
  EXPECT_EQ(r.chosen_peak_bytes, 120u);
  EXPECT_TRUE(r.reordered);
  EXPECT_EQ(check_topological_order(p, r.order), "");
  EXPECT_EQ(lower_bound(apply_order(p, r.order)), 120u);
}

TEST(Schedule, KeepsTheOriginalOrderWhenNotBetter) {
  // A chain has one topological order.
  ProgramBuilder p;
  const int32_t a = p.buffer("a", 10), b = p.buffer("b", 20), c = p.buffer("c", 30, kOutput);
  p.step("s0", {}, {a});
  p.step("s1", {a}, {b});
  p.step("s2", {b}, {c});
  const ScheduleResult r = memory_aware_schedule(p.program());
  EXPECT_THAT(r.order, ElementsAre(0, 1, 2));
  EXPECT_FALSE(r.reordered);
  // s0 10; s1 10+20 = 30; s2 20+30 = 50.
  EXPECT_EQ(r.original_peak_bytes, 50u);
  EXPECT_EQ(r.chosen_peak_bytes, 50u);
}

TEST(Schedule, RejectsAnOrderThatRunsAReaderBeforeItsWriter) {
  const Program p = two_branches();
  EXPECT_THAT(check_topological_order(p, {2, 0, 1, 3, 4}), HasSubstr("'a2' runs before step 'a'"));
  EXPECT_THAT(check_topological_order(p, {0, 0, 1, 3, 4}), HasSubstr("permutation"));
  EXPECT_THAT(check_topological_order(p, {0, 1}), HasSubstr("5"));
  EXPECT_THROW(apply_order(p, {2, 0, 1, 3, 4}), InternalError);
}

TEST(Schedule, FallsBackWhenTheGreedyOrderIsNoBetter) {
  // s0 writes a temporary t that s3 reads; s1 and s2 write small outputs and depend on nothing.
  ProgramBuilder p;
  const int32_t t = p.buffer("t", 50), u = p.buffer("u", 5, kOutput), v = p.buffer("v", 5, kOutput);
  const int32_t w = p.buffer("w", 1, kOutput);
  p.step("s0", {}, {t});
  p.step("s1", {}, {u});
  p.step("s2", {}, {v});
  p.step("s3", {t}, {w});
  // Original: s0 50; s1 50+5 = 55; s2 50+5+5 = 60; s3 50+5+5+1 = 61. Bound 61.
  // Greedy: ready s0 (+50), s1 (+5), s2 (+5) -> s1 (5, lower index), s2 (5), s0 (50), s3 (1-50).
  // That order: s1 5; s2 10; s0 60; s3 61 -> not better, original kept.
  const ScheduleResult r = memory_aware_schedule(p.program());
  EXPECT_EQ(r.original_peak_bytes, 61u);
  EXPECT_EQ(r.greedy_peak_bytes, 61u);
  EXPECT_FALSE(r.reordered);
  EXPECT_THAT(r.order, ElementsAre(0, 1, 2, 3));
}

}  // namespace
}  // namespace memplan

namespace memplan {
namespace {

TEST(Summary, ReportsTheBoundArenasAndTheScheduleGain) {
  // Alignment 1. Original order (live ranges x [0,1], A1 [0,2], B1 [1,3], A2 [2,4], B2 [3,4], out [4,4]):
  // greedy by size puts A1 at 0, B1 at 100, A2 at 200 (meets both), B2 at 0 (gap below B1 once A1 is
  // gone), x at 200 (x [0,1] and A2 [2,4] never meet), out at 10 (gap between B2 and A2): arena 210 = the
  // bound, so no algorithm does better and greedy_by_size, first in the order, is kept.
  // Scheduled order a, a2, b, b2, join (x [0,2], A1 [0,1], A2 [1,4], B1 [2,3], B2 [3,4], out [4,4]):
  // A1 0, B1 0, A2 100, B2 110, x 110, out 0: arena 120 = its bound.
  const PlannerSummary s = summarize_planning(two_branches(), 1);
  EXPECT_EQ(s.lower_bound_bytes, 210u);
  EXPECT_EQ(s.peak_step, 2);
  EXPECT_EQ(s.aligned_lower_bound_bytes, 210u);
  EXPECT_EQ(s.best_arena_bytes, 210u);
  EXPECT_EQ(s.best_algorithm, PackingAlgorithm::GreedyBySize);
  EXPECT_EQ(s.arena_by_algorithm.size(), static_cast<size_t>(kNumPackingAlgorithms));
  EXPECT_TRUE(s.reordered);
  EXPECT_EQ(s.scheduled_lower_bound_bytes, 120u);
  EXPECT_EQ(s.scheduled_best_arena_bytes, 120u);
}

}  // namespace
}  // namespace memplan
