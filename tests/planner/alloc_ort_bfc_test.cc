#include "planner/alloc_ort_bfc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "program_builder.h"

namespace memplan {
namespace {

using ::testing::ElementsAre;
using testing::kOutput;
using testing::kResident;
using testing::KiB;
using testing::MiB;
using testing::ProgramBuilder;

TEST(BfcArena, RoundsTo256Bytes) {
  EXPECT_EQ(ort::rounded_bytes(1), 256u);
  EXPECT_EQ(ort::rounded_bytes(256), 256u);
  EXPECT_EQ(ort::rounded_bytes(257), 512u);
}

TEST(BfcArena, RegionsGrowByPowersOfTwo) {
  // The region size starts at 1 MiB. A miss doubles it until it holds the request; if it already did,
  // it is doubled after use, for the next miss.
  //  512 KiB: region 1 MiB (next 2); split (1 MiB >= 2 x 512 KiB) -> 512 KiB free.
  //  1 MiB: no free chunk fits -> region 2 MiB (next 4); split -> 1 MiB free.
  //  1.5 MiB: -> region 4 MiB (next 8); split -> 2.5 MiB free.
  //  3 MiB: -> region 8 MiB (next 16); split -> 5 MiB free.
  //  20 MiB: 16 < 20 -> 32 MiB region, the size was raised so it stays 32. 32 < 2 x 20 and the 12 MiB
  //     waste < 128 MiB: not split, the whole 32 MiB chunk is in use.
  //  6 MiB: no free chunk >= 6 MiB -> region 32 MiB (not raised: next 64); split -> 26 MiB free.
  //  40 MiB: -> region 64 MiB (next 128); 64 < 80, waste 24 MiB: not split.
  BfcArenaSim arena;
  arena.allocate(512 * KiB);
  arena.allocate(1 * MiB);
  arena.allocate(1536 * KiB);
  arena.allocate(3 * MiB);
  EXPECT_THAT(arena.region_sizes(), ElementsAre(1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB));
  EXPECT_EQ(arena.reserved_bytes(), 15 * MiB);
  EXPECT_EQ(arena.allocated_bytes(), 6 * MiB);
  const int64_t big = arena.allocate(20 * MiB);
  EXPECT_EQ(arena.chunk_size(big), 32 * MiB);
  arena.allocate(6 * MiB);
  const int64_t bigger = arena.allocate(40 * MiB);
  EXPECT_EQ(arena.chunk_size(bigger), 64 * MiB);
  EXPECT_THAT(arena.region_sizes(), ElementsAre(1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB, 32 * MiB, 32 * MiB, 64 * MiB));
  EXPECT_EQ(arena.reserved_bytes(), 143 * MiB);
  EXPECT_EQ(arena.allocated_bytes(), 108 * MiB);  // 0.5 + 1 + 1.5 + 3 + 32 + 6 + 64
  EXPECT_EQ(arena.num_device_allocations(), 7);
}

TEST(BfcArena, SmallRequestsReuseFreeChunksBestFit) {
  // After 512 KiB and 1 MiB the free chunks are 512 KiB (region 1) and 1 MiB (region 2). 100 KiB best-fits
  // the 512 KiB chunk, which is split (512 >= 2 x 100): no new region.
  BfcArenaSim arena;
  const int64_t a = arena.allocate(512 * KiB);
  arena.allocate(1 * MiB);
  const int64_t c = arena.allocate(100 * KiB);
  EXPECT_EQ(arena.chunk_address(c), arena.chunk_address(a) + 512 * KiB);
  EXPECT_EQ(arena.chunk_size(c), 100 * KiB);
  EXPECT_EQ(arena.num_device_allocations(), 2);
}

TEST(BfcArena, FreeCoalescesWithNeighbours) {
  // One 1 MiB region:
  //   a = 256 KiB: region 1 MiB, split -> a [0,256K), free [256K,1M).
  //   b = 256 KiB: best fit 768 KiB chunk, split (768 >= 512) -> b [256K,512K), free [512K,1M).
  // Free a, then b: b merges with the free tail and then with a -> one 1 MiB chunk. 1 MiB then fits it
  // without a new region (1 MiB >= 2 x 1 MiB is false: not split).
  BfcArenaSim arena;
  const int64_t a = arena.allocate(256 * KiB);
  const int64_t b = arena.allocate(256 * KiB);
  EXPECT_EQ(arena.chunk_address(b), arena.chunk_address(a) + 256 * KiB);
  arena.release(a);
  arena.release(b);
  EXPECT_EQ(arena.allocated_bytes(), 0u);
  const int64_t c = arena.allocate(1 * MiB);
  EXPECT_EQ(arena.chunk_address(c), arena.chunk_address(a));
  EXPECT_EQ(arena.chunk_size(c), 1 * MiB);
  EXPECT_EQ(arena.num_device_allocations(), 1);
  EXPECT_EQ(arena.peak_allocated_bytes(), 1 * MiB);
}

TEST(BfcArena, SplitsWhenTheWasteWouldReachMaxDeadBytes) {
  // 300 MiB: 1 MiB doubled to 512 MiB. 512 < 2 x 300, but the 212 MiB waste >= 128 MiB: split.
  BfcArenaSim arena;
  const int64_t a = arena.allocate(300 * MiB);
  EXPECT_EQ(arena.chunk_size(a), 300 * MiB);
  EXPECT_EQ(arena.reserved_bytes(), 512 * MiB);
  EXPECT_EQ(arena.allocated_bytes(), 300 * MiB);
}

TEST(BfcArena, SameAsRequestedExtendsByTheRequest) {
  BfcArenaSim arena({.extend_strategy = ArenaExtendStrategy::kSameAsRequested});
  arena.allocate(3 * MiB);
  arena.allocate(1000);
  EXPECT_THAT(arena.region_sizes(), ElementsAre(3 * MiB, 1024));
}

TEST(BfcArena, MemoryLimitStopsExtension) {
  BfcArenaSim arena({.memory_limit_bytes = 4 * MiB});
  EXPECT_GE(arena.allocate(3 * MiB), 0);   // region 4 MiB (1 -> 2 -> 4), not split: 4 < 6, waste 1 MiB
  EXPECT_EQ(arena.allocate(256), -1);      // nothing free, 0 bytes left under the limit
}

TEST(BfcArena, ReplaysAProgram) {
  // w resident 3 MiB: region 4 MiB, not split (4 < 6) -> InUse 4 MiB.
  // s0 writes a 1 MiB: region: the size was raised to 4 on the last miss and stays 4 -> 4 MiB region
  //   (next 8), split (4 >= 2) -> InUse 5 MiB. Sample 5 MiB.
  // s1 writes out 1 MiB: best fit is the 3 MiB rest, split (3 >= 2) -> InUse 6 MiB. a is freed.
  ProgramBuilder p;
  const int32_t w = p.buffer("w", 3 * MiB, kResident);
  const int32_t a = p.buffer("a", 1 * MiB);
  const int32_t out = p.buffer("out", 1 * MiB, kOutput);
  p.step("s0", {w}, {a});
  p.step("s1", {a}, {out});
  const AllocatorReplay r = simulate_ort_bfc(p.program());
  EXPECT_THAT(r.allocated_per_step, ElementsAre(5 * MiB, 6 * MiB));
  EXPECT_THAT(r.reserved_per_step, ElementsAre(8 * MiB, 8 * MiB));
  EXPECT_EQ(r.peak_allocated_bytes, 6 * MiB);
  EXPECT_EQ(r.peak_reserved_bytes, 8 * MiB);
  EXPECT_EQ(r.num_device_allocations, 2);
}

TEST(BfcArena, MemoryPatternAllocatesOneBlockAfterTheInitializers) {
  // w 3 MiB: region 4 MiB (raised, stays 4), not split. The 10 MiB pattern block: 4 -> 8 -> 16 MiB region,
  // 16 < 20 and 6 MiB waste < 128 MiB: not split. InUse 20 MiB = TotalAllocated.
  ProgramBuilder p;
  const int32_t w = p.buffer("w", 3 * MiB, kResident);
  const int32_t a = p.buffer("a", 1 * MiB, kOutput);
  p.step("s0", {w}, {a});
  const AllocatorReplay r = simulate_ort_memory_pattern(p.program(), 10 * MiB);
  EXPECT_EQ(r.before_first_step_allocated, 4 * MiB);
  EXPECT_EQ(r.peak_allocated_bytes, 20 * MiB);
  EXPECT_EQ(r.peak_reserved_bytes, 20 * MiB);
  EXPECT_EQ(r.num_device_allocations, 2);
}

}  // namespace
}  // namespace memplan
