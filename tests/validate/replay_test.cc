// The CPU replay: valid plans pass, overlapping live buffers are caught and attributed, reuse after a
// buffer's last step is not mistaken for an overlap, and usage is measured against the prediction.
#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "plan_builder.h"
#include "validate/cpu_device.h"
#include "validate/pattern.h"
#include "validate/replay.h"

namespace memplan::validate {
namespace {

using testing::make_plan;
using testing::plans_dir;

// glibc hands out chunks of round_up(request + 8, 16) bytes, 8 of them header, so malloc_usable_size is at
// most 15 bytes over the request (malloc/malloc.c, request2size); under ASan it is the request itself.
constexpr uint64_t kMaxSlackPerAllocation = 15;

TEST(PatternTest, BytesAreTheLittleEndianBytesOfTheWord) {
  const uint32_t word = pattern_word(7, 5);
  for (uint64_t k = 0; k < 4; ++k) EXPECT_EQ(pattern_byte(7, 20 + k), (word >> (8 * k)) & 0xff);
}

TEST(PatternTest, BuffersDifferAtTheSamePosition) {
  int equal = 0;
  for (uint64_t w = 0; w < 1000; ++w) equal += pattern_word(1, w) == pattern_word(2, w);
  EXPECT_EQ(equal, 0);  // a chance match has probability 1000 / 2^32
}

TEST(CpuReplayTest, ValidPlanPassesInEveryMode) {
  const Plan plan = load_plan(plans_dir() + "/valid.json");
  auto device = make_cpu_device();
  for (Mode mode : {Mode::kArena, Mode::kMalloc}) {
    const ModeResult r = replay(plan, mode, *device);
    EXPECT_TRUE(r.overlaps.empty()) << mode_name(mode);
    EXPECT_EQ(device->used_bytes(), 0u) << "everything released after " << mode_name(mode);
  }
}

TEST(CpuReplayTest, ArenaModeMeasuresTheArenaAndResidentTensors) {
  const Plan plan = load_plan(plans_dir() + "/valid.json");
  auto device = make_cpu_device();
  const ModeResult r = replay(plan, Mode::kArena, *device);
  EXPECT_EQ(r.predicted_bytes, 1024u + 4096u);  // arena_bytes + the resident weight
  EXPECT_GE(r.measured_bytes, r.predicted_bytes);
  EXPECT_LE(r.measured_bytes, r.predicted_bytes + 2 * kMaxSlackPerAllocation);  // two allocations
  EXPECT_EQ(r.peak_step, 0u);  // the arena exists from the start
}

TEST(CpuReplayTest, MallocModePeaksWhereTheMostBytesAreLive) {
  const Plan plan = load_plan(plans_dir() + "/valid.json");
  auto device = make_cpu_device();
  const ModeResult r = replay(plan, Mode::kMalloc, *device);
  // By hand: step 1 holds x 256 + y 512 + weight 4096 = 4864, the lower bound plus the resident weight.
  EXPECT_EQ(r.predicted_bytes, 4864u);
  EXPECT_GE(r.measured_bytes, 4864u);
  EXPECT_LE(r.measured_bytes, 4864u + 3 * kMaxSlackPerAllocation);
  EXPECT_EQ(r.peak_step, 1u);
  ASSERT_TRUE(r.error_pct().has_value());
  EXPECT_GE(*r.error_pct(), 0.0);
}

TEST(CpuReplayTest, CorruptedPlanIsCaughtAndBothTensorsNamed) {
  // overlap.json puts y at [128, 384) while x [0, 256) is live (steps 0-2 and 1-2): 128 shared bytes.
  const Plan plan = load_plan(plans_dir() + "/overlap.json");
  auto device = make_cpu_device();
  const ModeResult r = replay(plan, Mode::kArena, *device);
  ASSERT_EQ(r.overlaps.size(), 1u);
  const Overlap& o = r.overlaps[0];
  EXPECT_EQ(o.victim, "x");    // y was written after x, over x's last 128 bytes
  EXPECT_EQ(o.culprit, "y");
  EXPECT_EQ(o.victim_index, 0u);
  EXPECT_EQ(o.culprit_index, 1u);
  EXPECT_EQ(o.culprit_first_step, 1u);
  EXPECT_EQ(o.detected_at_step, 2u);
  EXPECT_GE(o.first_bad_offset, 128u);
  EXPECT_LT(o.first_bad_offset, 132u);  // unless a byte agrees by chance (1/256 each), the first is 128
  EXPECT_LE(o.mismatched_bytes, 128u);
  EXPECT_GE(o.mismatched_bytes, 120u);
}

TEST(CpuReplayTest, SeparateAllocationsNeverOverlap) {
  // The same corrupted offsets mean nothing in malloc mode: each buffer gets its own allocation.
  const Plan plan = load_plan(plans_dir() + "/overlap.json");
  auto device = make_cpu_device();
  EXPECT_TRUE(replay(plan, Mode::kMalloc, *device).overlaps.empty());
}

TEST(CpuReplayTest, ReuseAfterLastStepIsNotAnOverlap) {
  // a lives [0, 0], b [1, 2], c [2, 2]; b and c reuse a's bytes after a's last step.
  const Plan plan = make_plan(64, 3,
                              {{/*tensor=*/"a", /*bytes=*/64, /*offset=*/0, /*first=*/0, /*last=*/0},
                               {"b", 32, 0, 1, 2},
                               {"c", 32, 32, 2, 2}});
  auto device = make_cpu_device();
  EXPECT_TRUE(replay(plan, Mode::kArena, *device).overlaps.empty());
}

TEST(CpuReplayTest, ABufferStartingOnAnothersLastStepMustNotOverlapIt) {
  // Inclusive lifetimes: b is produced at step 1, where a is still read. Same bytes: a is damaged.
  const Plan plan = make_plan(64, 2, {{"a", 64, 0, 0, 1}, {"b", 64, 0, 1, 1}});
  auto device = make_cpu_device();
  const ModeResult r = replay(plan, Mode::kArena, *device);
  ASSERT_EQ(r.overlaps.size(), 1u);
  EXPECT_EQ(r.overlaps[0].victim, "a");
  EXPECT_EQ(r.overlaps[0].culprit, "b");
}

TEST(CpuReplayTest, NestedShortLivedBufferIsFoundAtTheVictimsEnd) {
  // b [1, 1] sits inside a [0, 3]; it is verified intact at step 1, and a's damage shows at step 3.
  const Plan plan = make_plan(256, 4, {{"a", 256, 0, 0, 3}, {"b", 64, 64, 1, 1}});
  auto device = make_cpu_device();
  const ModeResult r = replay(plan, Mode::kArena, *device);
  ASSERT_EQ(r.overlaps.size(), 1u);
  EXPECT_EQ(r.overlaps[0].victim, "a");
  EXPECT_EQ(r.overlaps[0].culprit, "b");
  EXPECT_EQ(r.overlaps[0].detected_at_step, 3u);
}

TEST(CpuReplayTest, UnalignedNeighboursPassAndAFourByteOverlapIsCaught) {
  // Odd offsets and sizes exercise the byte-wise edges of the fill and verify loops.
  const Plan touching = make_plan(32, 1, {{"p", 5, 3, 0, 0}, {"q", 7, 8, 0, 0}, {"r", 13, 15, 0, 0}});
  auto device = make_cpu_device();
  EXPECT_TRUE(replay(touching, Mode::kArena, *device).overlaps.empty());

  const Plan overlapping = make_plan(32, 1, {{"p", 9, 3, 0, 0}, {"q", 7, 8, 0, 0}});  // share [8, 12)
  const ModeResult r = replay(overlapping, Mode::kArena, *device);
  ASSERT_EQ(r.overlaps.size(), 1u);
  EXPECT_EQ(r.overlaps[0].victim, "p");
  EXPECT_EQ(r.overlaps[0].culprit, "q");
  EXPECT_GE(r.overlaps[0].first_bad_offset, 8u);
  EXPECT_LT(r.overlaps[0].first_bad_offset, 12u);
}

TEST(CpuReplayTest, SameNamedBuffersAreToldApartByIndex) {
  // Two workspaces both called "ws" (the plan format allows it) overlapping while live.
  const Plan plan = make_plan(128, 1, {{"ws", 64, 0, 0, 0}, {"ws", 64, 32, 0, 0}});
  auto device = make_cpu_device();
  const ModeResult r = replay(plan, Mode::kArena, *device);
  ASSERT_EQ(r.overlaps.size(), 1u);
  EXPECT_EQ(r.overlaps[0].victim_index, 0u);
  EXPECT_EQ(r.overlaps[0].culprit_index, 1u);
}

TEST(CpuReplayTest, ZeroByteBuffersAreSkipped) {
  const Plan plan = make_plan(64, 2, {{"empty", 0, 64, 0, 1}, {"a", 64, 0, 0, 1}});
  auto device = make_cpu_device();
  const ModeResult r = replay(plan, Mode::kMalloc, *device);
  EXPECT_TRUE(r.overlaps.empty());
  EXPECT_EQ(r.predicted_bytes, 64u);
}

TEST(CpuReplayTest, PoolModeNeedsCuda) {
  const Plan plan = make_plan(64, 1, {{"a", 64, 0, 0, 0}});
  auto device = make_cpu_device();
  EXPECT_THROW(replay(plan, Mode::kPool, *device), InputError);
}

}  // namespace
}  // namespace memplan::validate
