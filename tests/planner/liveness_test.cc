#include "planner/liveness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "program_builder.h"

namespace memplan {

bool operator==(const LiveRange& a, const LiveRange& b) { return a.first == b.first && a.last == b.last; }

namespace {

using ::testing::ElementsAre;
using testing::kInput;
using testing::kOutput;
using testing::kResident;
using testing::ProgramBuilder;

// x (input, 100 B) -> s0 -> a (200 B) -> s1 -> b (300 B); s2 reads a and b -> c (50 B, output);
// s1 also writes d (40 B) that nobody reads; w (resident, 1000 B) is read by s0.
Program small_program() {
  ProgramBuilder p;
  const int32_t x = p.buffer("x", 100, kInput);
  const int32_t w = p.buffer("w", 1000, kResident);
  const int32_t a = p.buffer("a", 200);
  const int32_t b = p.buffer("b", 300);
  const int32_t c = p.buffer("c", 50, kOutput);
  const int32_t d = p.buffer("d", 40);
  p.step("s0", {x, w}, {a});
  p.step("s1", {a}, {b, d});
  p.step("s2", {a, b}, {c});
  return p.program();
}

TEST(Liveness, RangesFollowWritersReadersAndBoundaries) {
  const std::vector<LiveRange> r = compute_liveness(small_program());
  // x: input, last read at s0 -> [0,0]; w: resident -> whole program [0,2]; a: written s0, last read s2;
  // b: written s1, read s2; c: written s2, live at end -> [2,2]; d: written s1, never read -> [1,1].
  EXPECT_THAT(r, ElementsAre(LiveRange{0, 0}, LiveRange{0, 2}, LiveRange{0, 2}, LiveRange{1, 2}, LiveRange{2, 2},
                             LiveRange{1, 1}));
}

TEST(Liveness, LowerBoundIsPeakOfNonResidentLiveBytes) {
  const Program p = small_program();
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  // s0: x 100 + a 200 = 300; s1: a 200 + b 300 + d 40 = 540; s2: a 200 + b 300 + c 50 = 550.
  EXPECT_THAT(live.per_step, ElementsAre(300, 540, 550));
  EXPECT_EQ(live.peak_bytes, 550u);
  EXPECT_EQ(live.peak_step, 2);
  EXPECT_EQ(live.resident_bytes, 1000u);
  EXPECT_EQ(lower_bound(p), 550u);
  EXPECT_EQ(live.per_step_by_category[2][static_cast<int>(Category::Activation)], 550u);
  EXPECT_EQ(live.per_step_by_category[2][static_cast<int>(Category::Weight)], 0u);
}

TEST(Liveness, PeakStepIsTheFirstOfEqualPeaks) {
  ProgramBuilder p;
  const int32_t a = p.buffer("a", 10), b = p.buffer("b", 10);
  p.step("s0", {}, {a});  // live: a 10
  p.step("s1", {a}, {b});  // live: a 10 + b 10 = 20 (a's last read)
  p.step("s2", {b}, {});   // live: b 10
  const int32_t c = p.buffer("c", 20);
  p.step("s3", {}, {c});  // live: c 20 (written, never read)
  const LiveBytes live = compute_live_bytes(p.program(), compute_liveness(p.program()));
  EXPECT_THAT(live.per_step, ElementsAre(10, 20, 10, 20));
  EXPECT_EQ(live.peak_step, 1);
}

TEST(Liveness, CategoriesSplitTheTimeline) {
  ProgramBuilder p;
  const int32_t act = p.buffer("act", 64);
  const int32_t ws = p.buffer("ws", 32, {.category = Category::Workspace});
  p.step("s0", {}, {act, ws});  // ws is a per-step temporary: [0,0]
  p.step("s1", {act}, {});
  const LiveBytes live = compute_live_bytes(p.program(), compute_liveness(p.program()));
  EXPECT_EQ(live.per_step_by_category[0][static_cast<int>(Category::Workspace)], 32u);
  EXPECT_EQ(live.per_step_by_category[1][static_cast<int>(Category::Workspace)], 0u);
  EXPECT_THAT(live.per_step, ElementsAre(96, 64));
}

TEST(Liveness, ReadBeforeWriteIsAnInternalError) {
  ProgramBuilder p;
  const int32_t a = p.buffer("a", 8);
  p.step("reader", {a}, {});
  p.step("writer", {}, {a});
  EXPECT_THROW(compute_liveness(p.program()), InternalError);
}

TEST(Liveness, SecondWriterIsAnInternalError) {
  ProgramBuilder p;
  const int32_t a = p.buffer("a", 8);
  p.step("w1", {}, {a});
  p.step("w2", {}, {a});
  EXPECT_THROW(compute_liveness(p.program()), InternalError);
}

TEST(Liveness, NeverWrittenBufferIsAnInternalError) {
  ProgramBuilder p;
  p.buffer("orphan", 8);
  p.step("s0", {}, {});
  EXPECT_THROW(compute_liveness(p.program()), InternalError);
}

TEST(Liveness, OutOfRangeIdIsAnInternalError) {
  ProgramBuilder p;
  p.step("s0", {7}, {});
  EXPECT_THROW(compute_liveness(p.program()), InternalError);
}

TEST(Liveness, InPlaceReadOfOwnOutputIsAllowed) {
  ProgramBuilder p;
  const int32_t a = p.buffer("a", 8);
  p.step("s0", {a}, {a});
  EXPECT_THAT(compute_liveness(p.program()), ElementsAre(LiveRange{0, 0}));
}

}  // namespace
}  // namespace memplan
