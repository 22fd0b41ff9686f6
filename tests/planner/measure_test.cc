// planner/measure.h: one program on each runtime's allocator, every figure traced by hand.
#include <gtest/gtest.h>

#include "planner/measure.h"
#include "tests/planner/program_builder.h"

namespace memplan {
namespace {

using testing::kOutput;
using testing::kResident;
using testing::MiB;
using testing::ProgramBuilder;

// A resident weight w of 1 MiB; s0 writes r1 40 MiB, freed after s1; s2 writes r2 20 MiB and s3 r3 30 MiB,
// both kept to the end. Live at once: at most r2 + r3 = 50 MiB besides w.
Program split_segment_program() {
  ProgramBuilder p;
  p.buffer("w", 1 * MiB, kResident);
  const int32_t r1 = p.buffer("r1", 40 * MiB), r2 = p.buffer("r2", 20 * MiB, kOutput);
  const int32_t r3 = p.buffer("r3", 30 * MiB, kOutput);
  p.step("s0", {}, {r1});
  p.step("s1", {r1}, {});
  p.step("s2", {}, {r2});
  p.step("s3", {}, {r3});
  return p.program();
}

// Exact: w + the live peak r2 + r3 = 51 MiB allocated; r1 lives alone, so the best arena overlaps it with
// r2 and r3 (20 + 30 = 50 MiB): 51 MiB reserved, and required.
TEST(Measure, ExactIsResidentPlusThePackedArena) {
  MeasureWork work;
  const Measure m = measure(split_segment_program(), {AllocatorKind::Exact, false}, &work);
  EXPECT_EQ(m.allocated_bytes, 51 * MiB);
  EXPECT_EQ(m.reserved_bytes, 51 * MiB);
  EXPECT_EQ(m.required_bytes, 51 * MiB);
  ASSERT_TRUE(work.arena.has_value());
  EXPECT_EQ(work.arena->result.arena_bytes, 50 * MiB);
  EXPECT_EQ(work.live.peak_bytes, 50 * MiB);
}

// PyTorch's caching allocator: w (1 MiB, the small pool) takes a 2 MiB segment; r1 a 40 MiB one, cached once
// freed; r2 splits it (the 20 MiB rest is > kSmallSize); r3 finds no free block of 30 MiB and gets a segment of
// its own. Allocated 1 + 20 + 30 = 51 MiB, reserved 2 + 40 + 30 = 72 MiB; no segment is free when r3 comes (w's
// is in use, r1's is split), so flushing the cache frees nothing: it needs all 72 MiB. The floor is 51 MiB.
TEST(Measure, PytorchNeedsWhatItCannotFlush) {
  const Program p = split_segment_program();
  MeasureWork work;
  const Measure m = measure(p, {AllocatorKind::PytorchCaching, false}, &work);
  EXPECT_EQ(m.allocated_bytes, 51 * MiB);
  EXPECT_EQ(m.reserved_bytes, 72 * MiB);
  EXPECT_EQ(m.required_bytes, 72 * MiB);
  EXPECT_FALSE(work.arena.has_value());  // PyTorch's figures rest on no static arena
  EXPECT_EQ(work.replay.peak_reserved_bytes, 72 * MiB);
  EXPECT_EQ(measure_floor(p), 51 * MiB);
  // Without `work` the same figures.
  const Measure again = measure(p, {AllocatorKind::PytorchCaching, false});
  EXPECT_EQ(again.required_bytes, 72 * MiB);
}

// ONNX Runtime's memory pattern: w first (a 1 MiB region, the initial chunk; the next region is doubled to
// 2 MiB), then one block of the planned arena, 50 MiB: the region doubles 2 -> 64 MiB to hold it, and the 64 MiB
// chunk is not split (a split needs a chunk of twice the request or the request + 128 MiB), so 65 MiB are in
// use and reserved, and required.
TEST(Measure, OrtMemoryPatternIsOneBlockOfThePlannedArena) {
  MeasureWork work;
  const Measure m = measure(split_segment_program(), {AllocatorKind::OrtMemoryPattern, false}, &work);
  ASSERT_TRUE(work.arena.has_value());
  EXPECT_EQ(work.arena->result.arena_bytes, 50 * MiB);  // sizes are multiples of 256: as exact
  EXPECT_EQ(m.allocated_bytes, 65 * MiB);
  EXPECT_EQ(m.reserved_bytes, 65 * MiB);
  EXPECT_EQ(m.required_bytes, 65 * MiB);
}

}  // namespace
}  // namespace memplan
