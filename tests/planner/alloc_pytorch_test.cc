#include "planner/alloc_pytorch.h"
#include "planner/alloc_pytorch_expandable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "program_builder.h"

namespace memplan {
namespace {

using ::testing::ElementsAre;
using testing::kInput;
using testing::kOutput;
using testing::kResident;
using testing::KiB;
using testing::MiB;
using testing::ProgramBuilder;

TEST(PytorchRules, RoundSizeAndSegmentSize) {
  EXPECT_EQ(pytorch::round_size(1), 512u);
  EXPECT_EQ(pytorch::round_size(512), 512u);
  EXPECT_EQ(pytorch::round_size(513), 1024u);
  EXPECT_EQ(pytorch::allocation_size(1 * MiB), 2 * MiB);       // <= 1 MiB: small segment
  EXPECT_EQ(pytorch::allocation_size(1 * MiB + 512), 20 * MiB);  // (1, 10) MiB: 20 MiB segment
  EXPECT_EQ(pytorch::allocation_size(10 * MiB), 10 * MiB);     // >= 10 MiB: rounded to 2 MiB
  EXPECT_EQ(pytorch::allocation_size(11 * MiB), 12 * MiB);
  EXPECT_TRUE(pytorch::is_small(1 * MiB));
  EXPECT_FALSE(pytorch::is_small(1 * MiB + 512));
}

TEST(CudaCachingAllocator, ElevenMiBTakesAWholeTwelveMiBSegment) {
  // 11 MiB >= kMinLargeAlloc: a segment of 11 MiB rounded up to 2 MiB = 12 MiB. The 1 MiB rest is not
  // > kSmallSize, so the block is not split and memory_allocated grows by 12 MiB.
  CudaCachingAllocatorSim sim;
  const int64_t h = sim.allocate(11 * MiB);
  EXPECT_EQ(sim.block_size(h), 12 * MiB);
  EXPECT_EQ(sim.allocated_bytes(), 12 * MiB);
  EXPECT_EQ(sim.reserved_bytes(), 12 * MiB);
  EXPECT_EQ(sim.num_device_allocations(), 1);
}

TEST(CudaCachingAllocator, SmallAllocationsShareOneTwoMiBSegment) {
  // 1000 B -> 1024 B; a 2 MiB small segment is split (rest >= 512 B). 300 B -> 512 B, carved from the
  // rest of the same segment right after the first block.
  CudaCachingAllocatorSim sim;
  const int64_t a = sim.allocate(1000);
  const int64_t b = sim.allocate(300);
  EXPECT_EQ(sim.block_size(a), 1024u);
  EXPECT_EQ(sim.block_size(b), 512u);
  EXPECT_EQ(sim.block_address(b), sim.block_address(a) + 1024);
  EXPECT_EQ(sim.allocated_bytes(), 1536u);
  EXPECT_EQ(sim.reserved_bytes(), 2 * MiB);
  EXPECT_EQ(sim.num_device_allocations(), 1);
}

TEST(CudaCachingAllocator, ThreeMiBTakesATwentyMiBSegmentThatFiveMiBSplits) {
  // 3 MiB: a 20 MiB segment, split (17 MiB rest > 1 MiB). 5 MiB: best fit is the cached 17 MiB block,
  // split again (12 MiB rest). allocated 8 MiB, reserved 20 MiB, one cudaMalloc.
  CudaCachingAllocatorSim sim;
  const int64_t a = sim.allocate(3 * MiB);
  const int64_t b = sim.allocate(5 * MiB);
  EXPECT_EQ(sim.block_size(a), 3 * MiB);
  EXPECT_EQ(sim.block_size(b), 5 * MiB);
  EXPECT_EQ(sim.block_address(b), sim.block_address(a) + 3 * MiB);
  EXPECT_EQ(sim.allocated_bytes(), 8 * MiB);
  EXPECT_EQ(sim.reserved_bytes(), 20 * MiB);
  EXPECT_EQ(sim.num_device_allocations(), 1);
}

TEST(CudaCachingAllocator, FreedBlocksAreReusedBestFit) {
  // Segments of 12 MiB (A) and 14 MiB (B), both freed and cached. 13 MiB fits only B's block; its 1 MiB
  // rest is not split, so the whole 14 MiB is handed out. 11 MiB then takes A's 12 MiB block whole.
  CudaCachingAllocatorSim sim;
  const int64_t a = sim.allocate(12 * MiB);
  const int64_t b = sim.allocate(14 * MiB);
  const uint64_t a_address = sim.block_address(a), b_address = sim.block_address(b);
  sim.release(a);
  sim.release(b);
  EXPECT_EQ(sim.allocated_bytes(), 0u);
  const int64_t c = sim.allocate(13 * MiB);
  EXPECT_EQ(sim.block_address(c), b_address);
  EXPECT_EQ(sim.block_size(c), 14 * MiB);
  const int64_t d = sim.allocate(11 * MiB);
  EXPECT_EQ(sim.block_address(d), a_address);
  EXPECT_EQ(sim.allocated_bytes(), 26 * MiB);
  EXPECT_EQ(sim.reserved_bytes(), 26 * MiB);
  EXPECT_EQ(sim.num_device_allocations(), 2);
}

TEST(CudaCachingAllocator, FreeMergesNeighboursInTheSegment) {
  // One 20 MiB segment: a [0,3), b [3,7), c [7,12), free [12,20).
  // Free a and b: they merge into a 7 MiB block at 0, which best-fits a 7 MiB request exactly (without the
  // merge the request would take the 8 MiB tail). Free c: it merges with the tail into [7,20); free the
  // 7 MiB block: the segment is one 20 MiB block again, and 19 MiB reuses it whole (1 MiB rest unsplit).
  CudaCachingAllocatorSim sim;
  const int64_t a = sim.allocate(3 * MiB);
  const int64_t b = sim.allocate(4 * MiB);
  const int64_t c = sim.allocate(5 * MiB);
  sim.release(a);
  sim.release(b);
  const int64_t d = sim.allocate(7 * MiB);
  EXPECT_EQ(sim.block_address(d), sim.block_address(a));
  EXPECT_EQ(sim.block_size(d), 7 * MiB);
  sim.release(c);
  sim.release(d);
  EXPECT_EQ(sim.num_segments(), 1);
  const int64_t e = sim.allocate(19 * MiB);
  EXPECT_EQ(sim.block_size(e), 20 * MiB);
  EXPECT_EQ(sim.allocated_bytes(), 20 * MiB);
  EXPECT_EQ(sim.reserved_bytes(), 20 * MiB);
  EXPECT_EQ(sim.num_device_allocations(), 1);
  EXPECT_EQ(sim.peak_allocated_bytes(), 20 * MiB);
}

TEST(CudaCachingAllocator, SmallAndLargePoolsDoNotShare) {
  // 3 MiB takes a 20 MiB large segment with 17 MiB cached; 1 MiB is a small request and needs its own
  // 2 MiB small segment.
  CudaCachingAllocatorSim sim;
  sim.allocate(3 * MiB);
  sim.allocate(1 * MiB);
  EXPECT_EQ(sim.reserved_bytes(), 22 * MiB);
  EXPECT_EQ(sim.num_device_allocations(), 2);
}

TEST(CudaCachingAllocator, CapacityFreesCachedSegmentsThenRunsOutOfMemory) {
  // Capacity 24 MiB. A 12 MiB segment is cached after its block is freed; 14 MiB does not fit it and
  // 12 + 14 > 24, so the cached segment is released and the 14 MiB one fits. Then 12 MiB more: 14 + 12 > 24
  // with nothing cached -> out of memory.
  CudaCachingAllocatorSim sim({.device_capacity_bytes = 24 * MiB});
  sim.release(sim.allocate(12 * MiB));
  EXPECT_GE(sim.allocate(14 * MiB), 0);
  EXPECT_EQ(sim.reserved_bytes(), 14 * MiB);
  EXPECT_EQ(sim.allocate(12 * MiB), -1);
  EXPECT_EQ(sim.peak_reserved_bytes(), 14 * MiB);
}

TEST(CudaCachingAllocator, ReplaysAProgramInOrder) {
  // w resident 1000 B -> 1024 B in a 2 MiB small segment. x input 2 MiB -> a 20 MiB large segment,
  // x at [0,2) MiB, 18 MiB cached.
  // s0 writes a 4 MiB at [2,6) (14 MiB cached). Sample: 1024 + x 2 + a 4 MiB. x is freed (its last use).
  // s1 writes b 4 MiB: best fit skips x's 2 MiB block and splits the 14 MiB one: b at [6,10).
  //    Sample: 1024 + a 4 + b 4 MiB. a is freed and merges with x's block into [0,6).
  // s2 writes y 1000 B -> 1024 B from the small segment. Sample: 2048 + b 4 MiB. b is freed; y stays.
  ProgramBuilder p;
  const int32_t w = p.buffer("w", 1000, kResident);
  const int32_t x = p.buffer("x", 2 * MiB, kInput);
  const int32_t a = p.buffer("a", 4 * MiB), b = p.buffer("b", 4 * MiB);
  const int32_t y = p.buffer("y", 1000, kOutput);
  p.step("s0", {x, w}, {a});
  p.step("s1", {a}, {b});
  p.step("s2", {b}, {y});
  const AllocatorReplay r = simulate_pytorch(p.program());
  EXPECT_EQ(r.before_first_step_allocated, 1024 + 2 * MiB);
  EXPECT_THAT(r.allocated_per_step, ElementsAre(1024 + 6 * MiB, 1024 + 8 * MiB, 2048 + 4 * MiB));
  EXPECT_THAT(r.reserved_per_step, ElementsAre(22 * MiB, 22 * MiB, 22 * MiB));
  EXPECT_EQ(r.peak_allocated_bytes, 1024 + 8 * MiB);
  EXPECT_EQ(r.peak_allocated_step, 1);
  EXPECT_EQ(r.peak_reserved_bytes, 22 * MiB);
  EXPECT_EQ(r.num_device_allocations, 2);
  EXPECT_EQ(r.num_allocs, 5);
  EXPECT_FALSE(r.out_of_memory);
}

TEST(CudaCachingAllocator, ReplayReportsTheBufferThatRunsOutOfMemory) {
  ProgramBuilder p;
  const int32_t a = p.buffer("a", 12 * MiB), b = p.buffer("big", 14 * MiB, kOutput);
  p.step("s0", {}, {a});
  p.step("s1", {a}, {b});
  const AllocatorReplay r = simulate_pytorch(p.program(), {.device_capacity_bytes = 20 * MiB});
  EXPECT_TRUE(r.out_of_memory);
  EXPECT_EQ(r.oom_buffer, "big");
}

TEST(PytorchMinCapacity, AFlushedCacheLetsTheStepRunBelowItsUnconstrainedReserve) {
  // s0 writes a 12 MiB (a 12 MiB segment); a is freed after s1 and its segment stays cached. s2 writes b
  // 14 MiB: the cached 12 MiB block is too small, so unconstrained the allocator cudaMallocs a second segment
  // and reserves 26 MiB, with 14 MiB allocated at most. At a capacity of 14 MiB the cudaMalloc would pass it:
  // release_cached_blocks frees the unsplit 12 MiB segment and the retry fits. At 12 MiB it cannot.
  ProgramBuilder p;
  const int32_t a = p.buffer("a", 12 * MiB), b = p.buffer("b", 14 * MiB, kOutput);
  p.step("s0", {}, {a});
  p.step("s1", {a}, {});
  p.step("s2", {}, {b});
  const Program program = p.program();
  const ReplayOrder order = replay_order(program);
  const AllocatorReplay free_run = simulate_pytorch(program);
  EXPECT_EQ(free_run.peak_reserved_bytes, 26 * MiB);
  EXPECT_EQ(free_run.peak_allocated_bytes, 14 * MiB);
  EXPECT_EQ(pytorch_min_capacity(program, order, free_run), 14 * MiB);
  const PytorchAtCapacity at14 = simulate_pytorch_at_capacity(program, order, 14 * MiB);
  EXPECT_TRUE(at14.fits);
  EXPECT_EQ(at14.alloc_retries, 1);
  EXPECT_EQ(at14.replay.peak_reserved_bytes, 14 * MiB);
  EXPECT_FALSE(simulate_pytorch_at_capacity(program, order, 14 * MiB - 1).fits);
  EXPECT_EQ(simulate_pytorch_at_capacity(program, order, 26 * MiB).alloc_retries, 0);
}

TEST(PytorchMinCapacity, ASplitSegmentCannotBeFlushed) {
  // s0 writes r1 40 MiB (a 40 MiB segment), freed after s1. s2 writes r2 20 MiB into that cached block, which
  // is split (the 20 MiB rest is > kSmallSize). s3 writes r3 30 MiB: no free block fits, and the 40 MiB
  // segment is split, so release_cached_blocks frees nothing: the step needs 40 + 30 = 70 MiB of device
  // although at most 20 + 30 = 50 MiB (or r1's 40) is ever allocated.
  ProgramBuilder p;
  const int32_t r1 = p.buffer("r1", 40 * MiB), r2 = p.buffer("r2", 20 * MiB, kOutput);
  const int32_t r3 = p.buffer("r3", 30 * MiB, kOutput);
  p.step("s0", {}, {r1});
  p.step("s1", {r1}, {});
  p.step("s2", {}, {r2});
  p.step("s3", {}, {r3});
  const Program program = p.program();
  const AllocatorReplay free_run = simulate_pytorch(program);
  EXPECT_EQ(free_run.peak_allocated_bytes, 50 * MiB);
  EXPECT_EQ(free_run.peak_reserved_bytes, 70 * MiB);
  EXPECT_EQ(pytorch_min_capacity(program, replay_order(program), free_run), 70 * MiB);
  const PytorchAtCapacity short_of_it = simulate_pytorch_at_capacity(program, replay_order(program), 68 * MiB);
  EXPECT_FALSE(short_of_it.fits);
  EXPECT_EQ(short_of_it.replay.oom_buffer, "r3");
}

TEST(PytorchMinCapacity, UnconstrainedReserveIsNotMonotoneButTheNeedIs) {
  // The pattern behind a full fine-tune whose max_memory_reserved falls as the sequence grows: a
  // logits-sized buffer (tokens x vocab) is freed before a weight-sized gradient (vocab x hidden) is made.
  // Best fit never hands out a smaller cached block, so with logits of 36 MiB the 40 MiB gradient gets a
  // segment of its own (76 MiB reserved); at exactly 40 MiB it reuses the cached one (40 MiB); at 44 MiB it
  // splits it (the 4 MiB rest is > kSmallSize; 44 MiB). At the capacity of the device, the first case flushes
  // the cached 36 MiB segment and retries, so what each needs of the device is 40, 40 and 44 MiB.
  auto program = [](uint64_t logits) {
    ProgramBuilder p;
    const int32_t l = p.buffer("logits", logits), g = p.buffer("grad", 40 * MiB, kOutput);
    p.step("forward", {}, {l});
    p.step("loss", {l}, {});
    p.step("backward", {}, {g});
    return p.program();
  };
  const uint64_t logits[] = {36 * MiB, 40 * MiB, 44 * MiB}, reserved[] = {76 * MiB, 40 * MiB, 44 * MiB},
                 need[] = {40 * MiB, 40 * MiB, 44 * MiB};
  for (int i = 0; i < 3; ++i) {
    const Program p = program(logits[i]);
    const AllocatorReplay free_run = simulate_pytorch(p);
    EXPECT_EQ(free_run.peak_reserved_bytes, reserved[i]) << i;
    EXPECT_EQ(pytorch_min_capacity(p, replay_order(p), free_run), need[i]) << i;
  }
}

// ---- expandable_segments:True (planner/alloc_pytorch_expandable.h) ----

// X 60 MiB is made and freed; then A, B, C of 20 MiB each, B freed after C is made; then D 40 MiB. A, C, D are
// outputs. The allocated peak is A + C + D = 80 MiB; both allocators reserve 100 MiB unconstrained.
Program hole_then_big_request() {
  ProgramBuilder p;
  const int32_t x = p.buffer("x", 60 * MiB), a = p.buffer("a", 20 * MiB, kOutput), b = p.buffer("b", 20 * MiB);
  const int32_t c = p.buffer("c", 20 * MiB, kOutput), d = p.buffer("d", 40 * MiB, kOutput);
  p.step("s0", {}, {x});
  p.step("s1", {x}, {});
  p.step("s2", {}, {a});
  p.step("s3", {}, {b});
  p.step("s4", {b}, {c});
  p.step("s5", {}, {d});
  return p.program();
}

TEST(ExpandableSegments, FreePagesInsideALiveRangeAreGivenBack) {
  // Fixed segments: A, B and C are carved out of X's cached 60 MiB segment, so B's hole sits in a split
  // segment, D takes a new 40 MiB one, and at any capacity below 100 MiB release_cached_blocks frees nothing.
  // Expandable: X maps 3 pages of 20 MiB; A, B, C split them; D maps 2 more (100 MiB). At 80 MiB the map
  // fails, release_cached_blocks unmaps B's page (unmap_block), and D's two pages then fit: 40 + 40.
  const Program p = hole_then_big_request();
  const ReplayOrder order = replay_order(p);
  const AllocatorReplay fixed = simulate_pytorch(p);
  const AllocatorReplay expandable = simulate_pytorch(p, {.expandable_segments = true});
  EXPECT_EQ(fixed.peak_reserved_bytes, 100 * MiB);
  EXPECT_EQ(expandable.peak_reserved_bytes, 100 * MiB);
  EXPECT_EQ(expandable.peak_allocated_bytes, 80 * MiB);
  EXPECT_EQ(pytorch_min_capacity(p, order, fixed), 100 * MiB);
  EXPECT_EQ(pytorch_min_capacity(p, order, expandable, /*expandable_segments=*/true), 80 * MiB);
  const PytorchAtCapacity at80 = simulate_pytorch_at_capacity(p, order, 80 * MiB, /*expandable_segments=*/true);
  EXPECT_TRUE(at80.fits);
  EXPECT_EQ(at80.alloc_retries, 1);
}

TEST(ExpandableSegments, LargeRequestsMapTwentyMiBPagesAndSplitAnyRest) {
  // 36 MiB maps two 20 MiB pages (kLargeBuffer) and splits off the 4 MiB rest (a fixed segment would be
  // exactly 36 MiB). Freed, the 40 MiB of pages serve a 40 MiB request without mapping more: 40 MiB reserved
  // where fixed segments need 76 (the logits-vs-gradient pattern above).
  ExpandableSegmentsSim sim;
  const int64_t logits = sim.allocate(36 * MiB);
  EXPECT_EQ(sim.block_size(logits), 36 * MiB);
  EXPECT_EQ(sim.reserved_bytes(), 40 * MiB);
  sim.release(logits);
  const int64_t grad = sim.allocate(40 * MiB);
  EXPECT_EQ(sim.block_address(grad), sim.block_address(logits));
  EXPECT_EQ(sim.reserved_bytes(), 40 * MiB);
  EXPECT_EQ(sim.num_device_allocations(), 1);
  // A small request maps one 2 MiB page of the small pool; 1000 B rounds to 1024 and the rest splits.
  const int64_t tiny = sim.allocate(1000);
  EXPECT_EQ(sim.block_size(tiny), 1024u);
  EXPECT_EQ(sim.reserved_bytes(), 42 * MiB);
}

TEST(ExpandableSegments, ARequestSpanningAFreeBlockAndNewPagesGrowsInPlace) {
  // a 20 MiB and b 20 MiB fill two pages; a is freed. c 30 MiB: no cached block fits; the lowest unmapped
  // space is after b, so c maps two pages there (reserved 80 MiB), leaving a's page cached. Then b is freed:
  // a and b merge into 40 MiB free, and d 40 MiB reuses them.
  ExpandableSegmentsSim sim;
  const int64_t a = sim.allocate(20 * MiB), b = sim.allocate(20 * MiB);
  sim.release(a);
  const int64_t c = sim.allocate(30 * MiB);
  EXPECT_EQ(sim.block_address(c), sim.block_address(b) + 20 * MiB);
  EXPECT_EQ(sim.reserved_bytes(), 80 * MiB);
  sim.release(b);
  const int64_t d = sim.allocate(40 * MiB);
  EXPECT_EQ(sim.block_address(d), sim.block_address(a));
  EXPECT_EQ(sim.reserved_bytes(), 80 * MiB);
  // At a capacity, a failed map unmaps whole free pages first: here c's free 10 MiB rest is less than a page.
  ExpandableSegmentsSim capped(60 * MiB);
  const int64_t x = capped.allocate(20 * MiB), y = capped.allocate(20 * MiB);
  capped.release(x);
  EXPECT_GE(capped.allocate(30 * MiB), 0);  // 40 + 40 > 60: x's page is unmapped, then y + 2 pages = 60
  EXPECT_EQ(capped.num_alloc_retries(), 1);
  EXPECT_EQ(capped.reserved_bytes(), 60 * MiB);
  (void)y;
}

TEST(PytorchMinCapacity, AnEmptyProgramNeedsNothing) {
  ProgramBuilder p;
  const Program program = p.program();
  EXPECT_EQ(pytorch_min_capacity(program, replay_order(program), simulate_pytorch(program)), 0u);
}

}  // namespace
}  // namespace memplan
