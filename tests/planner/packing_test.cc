#include "planner/packing.h"

#include <algorithm>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "planner/invariants.h"
#include "planner/packing_place.h"

namespace memplan {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

void expect_valid(const std::vector<UsageRecord>& records, const PackingResult& r, uint64_t alignment) {
  EXPECT_THAT(check_plan(records, r.offsets, r.arena_bytes, alignment), IsEmpty());
}

// Alignment 1 (exact bytes). Live bytes per step: s0 0, s1 0, s2 32+24 = 56, s3 24+32+24 = 80,
// s4 24+40 = 64, s5 64. Lower bound 80.
const std::vector<UsageRecord> kFiveRecords = {
    {/*bytes=*/32, /*first=*/2, /*last=*/2},  // r0
    {/*bytes=*/24, /*first=*/3, /*last=*/5},  // r1
    {/*bytes=*/40, /*first=*/4, /*last=*/5},  // r2
    {/*bytes=*/32, /*first=*/3, /*last=*/3},  // r3
    {/*bytes=*/24, /*first=*/2, /*last=*/3},  // r4
};

TEST(Packing, GreedyBySizeHandTrace) {
  // Order by size: r2 40, r0 32, r3 32, r1 24, r4 24.
  // r2 -> 0. r0 shares no step with r2 -> 0. r3 shares none with r2 [4,5] or r0 [2,2] -> 0.
  // r1 [3,5] meets r2 [0,40) and r3 [0,32) -> above them at 40.
  // r4 [2,3] meets r0 [0,32), r3 [0,32), r1 [40,64): the gap [32,40) is 8 < 24 -> top, 64. Arena 88.
  const PackingResult r = pack_greedy_by_size(kFiveRecords, 1);
  EXPECT_THAT(r.offsets, ElementsAre(0, 40, 0, 0, 64));
  EXPECT_EQ(r.arena_bytes, 88u);
  expect_valid(kFiveRecords, r, 1);
}

TEST(Packing, BestFitSpatialHandTrace) {
  // Size, then longer range: r2 40; r0 32 and r3 32 (both span 0, by index); r1 24 (span 2), r4 24 (span 1):
  // the same order as greedy by size, so the same offsets.
  const PackingResult r = pack_best_fit_spatial(kFiveRecords, 1);
  EXPECT_THAT(r.offsets, ElementsAre(0, 40, 0, 0, 64));
  EXPECT_EQ(r.arena_bytes, 88u);
  expect_valid(kFiveRecords, r, 1);
}

TEST(Packing, BestFitTemporalHandTrace) {
  // Longer range first: r1 (span 2); r2 40, r4 24 (span 1); r0 32, r3 32 (span 0).
  // r1 -> 0 [0,24). r2 [4,5] meets r1 -> 24 [24,64). r4 [2,3] meets r1 only (step 3) -> 24 [24,48).
  // r0 [2,2] meets r4 [24,48): gap [0,24) is too small for 32 -> 48. r3 [3,3] meets r1, r4 -> 48.
  // Arena 80 = the lower bound.
  const PackingResult r = pack_best_fit_temporal(kFiveRecords, 1);
  EXPECT_THAT(r.offsets, ElementsAre(48, 0, 24, 48, 24));
  EXPECT_EQ(r.arena_bytes, 80u);
  expect_valid(kFiveRecords, r, 1);
}

TEST(Packing, GreedyByBreadthHandTrace) {
  // Steps by breadth: s3 80, s4 64, s5 64, s2 56, s0 0, s1 0 (ranks 0..5). A record's key is the first
  // visited step in its range: r3 0, r1 0, r4 0, r2 1 (s4), r0 3 (s2). Order: r3 32, r1 24, r4 24, r2, r0.
  // r3 -> 0 [0,32). r1 meets r3 -> 32 [32,56). r4 meets r3, r1 -> 56 [56,80).
  // r2 [4,5] meets r1 [32,56): gap [0,32) < 40 -> 56 [56,96). r0 [2,2] meets r4 [56,80): gap [0,56) -> 0.
  const PackingResult r = pack_greedy_by_breadth(kFiveRecords, 1);
  EXPECT_THAT(r.offsets, ElementsAre(0, 32, 56, 0, 56));
  EXPECT_EQ(r.arena_bytes, 96u);
  expect_valid(kFiveRecords, r, 1);
}

TEST(Packing, ChooseBestKeepsTheSmallestArena) {
  const BestPacking best = choose_best(kFiveRecords, 1);
  EXPECT_EQ(best.algorithm, PackingAlgorithm::BestFitTemporal);
  EXPECT_EQ(best.result.arena_bytes, 80u);
  // 80 is the lower bound (kFiveRecords' step s3), so greedy_by_breadth (96 when run alone) is not run.
  EXPECT_THAT(best.arena_by_algorithm, ElementsAre(88, 88, 80));
  EXPECT_THAT(best.result.offsets, ElementsAre(48, 0, 24, 48, 24));
}

TEST(Packing, ChooseBestBreaksTiesByAlgorithmOrder) {
  // Two records that never meet: every algorithm puts both at 0, arena 16; the first algorithm wins. 16 is the
  // lower bound (step 0 holds 16 bytes), so the first algorithm is the only one run.
  const std::vector<UsageRecord> records = {{/*bytes=*/16, /*first=*/0, /*last=*/0}, {/*bytes=*/8, /*first=*/1, /*last=*/1}};
  const BestPacking best = choose_best(records, 1);
  EXPECT_EQ(best.algorithm, PackingAlgorithm::GreedyBySize);
  EXPECT_THAT(best.arena_by_algorithm, ElementsAre(16));
  EXPECT_THAT(best.result.offsets, ElementsAre(0, 0));
}

TEST(Packing, AlignmentRoundsSizesAndOffsets) {
  // With 256 B alignment the sizes become 256, 512, 256. Greedy by size: r1 (512) -> 0; r0 [0,1] meets r1
  // -> 512; r2 [0,2] meets r1 [0,512) and r0 [512,768) -> 768. Arena 1024.
  const std::vector<UsageRecord> records = {
      {/*bytes=*/100, /*first=*/0, /*last=*/1}, {/*bytes=*/300, /*first=*/1, /*last=*/2}, {/*bytes=*/10, /*first=*/0, /*last=*/2}};
  const PackingResult r = pack_greedy_by_size(records, 256);
  EXPECT_THAT(r.offsets, ElementsAre(512, 0, 768));
  EXPECT_EQ(r.arena_bytes, 1024u);
  expect_valid(records, r, 256);
  // Aligned live bytes: s0 256+256 = 512, s1 256+512+256 = 1024, s2 512+256 = 768.
  EXPECT_EQ(aligned_lower_bound(records, 256), 1024u);
}

TEST(Packing, ZeroByteRecordsTakeNoSpace) {
  const std::vector<UsageRecord> records = {{/*bytes=*/0, /*first=*/0, /*last=*/3}, {/*bytes=*/64, /*first=*/0, /*last=*/3}};
  for (int a = 0; a < kNumPackingAlgorithms; ++a) {
    const PackingResult r = pack(static_cast<PackingAlgorithm>(a), records, 64);
    EXPECT_THAT(r.offsets, ElementsAre(0, 0)) << packing_algorithm_name(static_cast<PackingAlgorithm>(a));
    EXPECT_EQ(r.arena_bytes, 64u);
  }
}

TEST(Packing, EmptyInputGivesAnEmptyArena) {
  for (int a = 0; a < kNumPackingAlgorithms; ++a) {
    const PackingResult r = pack(static_cast<PackingAlgorithm>(a), {}, 256);
    EXPECT_TRUE(r.offsets.empty());
    EXPECT_EQ(r.arena_bytes, 0u);
  }
}

TEST(Packing, StacksRecordsThatShareSteps) {
  // Size order r0 64, r1 32, r2 16, r3 8, r4 8. r0 -> 0 [0,64). r1 [1,1] meets r0 -> 64. r2 [2,2] meets r0
  // (not r1) -> 64. r3 [1,2] meets r0 [0,64), r1 [64,96), r2 [64,80) -> 96 [96,104). r4 [3,3] meets
  // nothing -> 0. Arena 104 (the lower bound: step 1 holds 64 + 32 + 8).
  const std::vector<UsageRecord> records = {
      {/*bytes=*/64, /*first=*/0, /*last=*/2}, {/*bytes=*/32, /*first=*/1, /*last=*/1},
      {/*bytes=*/16, /*first=*/2, /*last=*/2}, {/*bytes=*/8, /*first=*/1, /*last=*/2},
      {/*bytes=*/8, /*first=*/3, /*last=*/3}};
  const PackingResult r = pack_greedy_by_size(records, 1);
  EXPECT_THAT(r.offsets, ElementsAre(0, 64, 64, 96, 0));
  EXPECT_EQ(r.arena_bytes, 104u);
  expect_valid(records, r, 1);
}

TEST(Packing, SmallestFittingGapWinsOverALowerLargerOne) {
  // Size order A 40, B 30, C 20, D 12, H 8, R 7.
  // A [0,1] -> 0 [0,40). B [0,0] -> 40 [40,70). C [0,1] -> 70 [70,90). D [0,0] -> 90 [90,102).
  // H [0,1] meets all four -> 102 [102,110).
  // R [1,1] meets A [0,40), C [70,90), H [102,110): gaps [40,70) (30 B) and [90,102) (12 B) both fit;
  // best fit takes the smaller, at 90 (first fit would take 40). Arena 110.
  const std::vector<UsageRecord> records = {
      {/*bytes=*/40, /*first=*/0, /*last=*/1},  // A
      {/*bytes=*/30, /*first=*/0, /*last=*/0},  // B
      {/*bytes=*/20, /*first=*/0, /*last=*/1},  // C
      {/*bytes=*/12, /*first=*/0, /*last=*/0},  // D
      {/*bytes=*/8, /*first=*/0, /*last=*/1},   // H
      {/*bytes=*/7, /*first=*/1, /*last=*/1}};  // R
  const PackingResult r = pack_greedy_by_size(records, 1);
  EXPECT_THAT(r.offsets, ElementsAre(0, 40, 70, 90, 102, 90));
  EXPECT_EQ(r.arena_bytes, 110u);
  expect_valid(records, r, 1);
}

// The placement rule as packing_place.h states it, by brute force: every placed record that shares a step,
// sorted by offset, the smallest gap that fits (lowest on a tie), else above them all. Both implementations
// (the scan of records, the segment tree of merged runs) must give every record its offset, in every order.
std::vector<uint64_t> place_by_brute_force(const std::vector<UsageRecord>& records, const std::vector<uint64_t>& sizes,
                                           const std::vector<int32_t>& order) {
  std::vector<uint64_t> offsets(records.size(), 0);
  std::vector<int32_t> placed;
  for (int32_t id : order) {
    if (sizes[id] == 0) continue;
    std::vector<std::pair<uint64_t, uint64_t>> beside;
    for (int32_t p : placed)
      if (records[p].first <= records[id].last && records[id].first <= records[p].last)
        beside.emplace_back(offsets[p], offsets[p] + sizes[p]);
    std::sort(beside.begin(), beside.end());
    uint64_t top = 0, best = 0, best_gap = UINT64_MAX;
    for (const auto& [start, end] : beside) {
      if (start > top && start - top >= sizes[id] && start - top < best_gap) {
        best_gap = start - top;
        best = top;
      }
      top = std::max(top, end);
    }
    offsets[id] = best_gap != UINT64_MAX ? best : top;
    placed.push_back(id);
  }
  return offsets;
}

TEST(Packing, EveryOrderPlacesAsTheRuleStatesIt) {
  std::mt19937_64 rng(20261203);
  for (int round = 0; round < 300; ++round) {
    const int32_t steps = 1 + static_cast<int32_t>(rng() % 64);
    const size_t n = 1 + rng() % 200;
    std::vector<UsageRecord> records;
    for (size_t i = 0; i < n; ++i) {
      const int32_t first = static_cast<int32_t>(rng() % steps);
      // A third live to the end (a training step's saved tensors), the rest short; some take no bytes.
      const int32_t last = rng() % 3 == 0 ? steps - 1 : std::min<int32_t>(steps - 1, first + static_cast<int32_t>(rng() % 4));
      const uint64_t bytes = rng() % 10 == 0 ? 0 : 1 + rng() % (rng() % 2 ? 64 : 4096);
      records.push_back({bytes, first, last});
    }
    for (const uint64_t alignment : {uint64_t{1}, uint64_t{32}}) {
      const std::vector<uint64_t> sizes = detail::aligned_sizes(records, alignment);
      const int32_t used = detail::validate_records(records);
      for (const auto& order : {detail::greedy_by_size_order(records, sizes), detail::best_fit_spatial_order(records, sizes),
                                detail::best_fit_temporal_order(records, sizes),
                                detail::greedy_by_breadth_order(records, sizes)}) {
        const std::vector<uint64_t> expected = place_by_brute_force(records, sizes, order);
        const detail::OverlapIndex index(records, used);
        ASSERT_EQ(detail::place_by_scan(records, sizes, order, index).offsets, expected) << "scan, round " << round;
        ASSERT_EQ(detail::place_by_runs(records, sizes, order, used).offsets, expected) << "runs, round " << round;
      }
    }
  }
}

// choose_best stops at the first arena equal to the aligned lower bound. Its answer must be the one a run of all
// four gives: the first algorithm with the smallest arena, and that algorithm's offsets. Record sets from few
// sizes and long ranges reach the bound often (the early stop is taken), random ones seldom (all four run).
TEST(Packing, ChooseBestStopsEarlyWithTheAnswerOfAllFour) {
  std::mt19937_64 rng(20261204);
  int stopped_early = 0;
  for (int round = 0; round < 400; ++round) {
    const int32_t steps = 1 + static_cast<int32_t>(rng() % 40);
    const size_t n = 1 + rng() % 120;
    const bool few_sizes = round % 2 == 0;
    std::vector<UsageRecord> records;
    for (size_t i = 0; i < n; ++i) {
      const int32_t first = static_cast<int32_t>(rng() % steps);
      const int32_t last = rng() % 3 == 0 ? steps - 1 : std::min<int32_t>(steps - 1, first + static_cast<int32_t>(rng() % 4));
      const uint64_t bytes = few_sizes ? 64 << (rng() % 3) : rng() % 10 == 0 ? 0 : 1 + rng() % 4096;
      records.push_back({bytes, first, last});
    }
    for (const uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      const std::vector<PackingResult> all = pack_all(records, alignment);
      size_t winner = 0;
      for (size_t a = 1; a < all.size(); ++a)
        if (all[a].arena_bytes < all[winner].arena_bytes) winner = a;
      const BestPacking best = choose_best(records, alignment);
      ASSERT_EQ(static_cast<size_t>(best.algorithm), winner) << "round " << round;
      ASSERT_EQ(best.result.offsets, all[winner].offsets) << "round " << round;
      ASSERT_EQ(best.result.arena_bytes, all[winner].arena_bytes) << "round " << round;
      ASSERT_GE(best.arena_by_algorithm.size(), winner + 1);
      for (size_t a = 0; a < best.arena_by_algorithm.size(); ++a) ASSERT_EQ(best.arena_by_algorithm[a], all[a].arena_bytes);
      if (best.arena_by_algorithm.size() < all.size()) {
        ++stopped_early;
        ASSERT_EQ(best.result.arena_bytes, aligned_lower_bound(records, alignment)) << "round " << round;
      }
    }
  }
  EXPECT_GT(stopped_early, 100);  // the early stop is exercised, not only the full run
}

// From 10,000 records choose_best places the orders on threads; its answer, arena_by_algorithm included, must be
// the sequential one: every algorithm's arena up to the first that reaches the bound, and the winner's offsets.
TEST(Packing, ChooseBestOnThreadsAnswersAsTheSequentialRun) {
  std::mt19937_64 rng(20261205);
  for (int round = 0; round < 4; ++round) {
    const int32_t steps = 2000;
    const bool few_sizes = round % 2 == 0;  // reaches the bound at some algorithm (an early stop), or never
    std::vector<UsageRecord> records;
    for (size_t i = 0; i < 12000; ++i) {
      const int32_t first = static_cast<int32_t>(rng() % steps);
      const int32_t last = std::min<int32_t>(steps - 1, first + static_cast<int32_t>(rng() % (few_sizes ? 3 : 40)));
      records.push_back({few_sizes ? uint64_t{256} : 1 + rng() % 100000, first, last});
    }
    const std::vector<PackingResult> all = pack_all(records);
    const uint64_t bound = aligned_lower_bound(records);
    size_t winner = 0, ran = all.size();
    for (size_t a = 0; a < all.size(); ++a) {
      if (all[a].arena_bytes < all[winner].arena_bytes) winner = a;
      if (all[winner].arena_bytes == bound) {
        ran = a + 1;
        break;
      }
    }
    const BestPacking best = choose_best(records);
    EXPECT_EQ(static_cast<size_t>(best.algorithm), winner) << "round " << round;
    EXPECT_EQ(best.result.offsets, all[winner].offsets) << "round " << round;
    ASSERT_EQ(best.arena_by_algorithm.size(), ran) << "round " << round;
    for (size_t a = 0; a < ran; ++a) EXPECT_EQ(best.arena_by_algorithm[a], all[a].arena_bytes) << "round " << round;
    if (few_sizes) EXPECT_LT(ran, all.size()) << "round " << round;  // the early stop is exercised
  }
}

TEST(Packing, UsageRecordsSkipResidentBuffers) {
  Program p;
  p.buffers = {{"w", 10, Category::Weight, true}, {"a", 20}, {"b", 30}};
  const std::vector<LiveRange> ranges = {{0, 1}, {0, 1}, {1, 1}};
  const ProgramRecords pr = usage_records(p, ranges);
  EXPECT_THAT(pr.buffer_ids, ElementsAre(1, 2));
  ASSERT_EQ(pr.records.size(), 2u);
  EXPECT_EQ(pr.records[1].bytes, 30u);
  EXPECT_EQ(pr.records[1].first, 1);
}

TEST(Packing, InvalidInputsThrow) {
  EXPECT_THROW(pack_greedy_by_size({{/*bytes=*/8, /*first=*/2, /*last=*/1}}, 1), InternalError);
  EXPECT_THROW(pack_greedy_by_size({{/*bytes=*/8, /*first=*/0, /*last=*/0}}, 0), InputError);
  EXPECT_THROW(pack_greedy_by_size({{/*bytes=*/UINT64_MAX, /*first=*/0, /*last=*/0}}, 256), ShapeOverflow);
}

}  // namespace
}  // namespace memplan
