#include "planner/invariants.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace memplan {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const std::vector<UsageRecord> kRecords = {
    {/*bytes=*/16, /*first=*/0, /*last=*/1},  // a
    {/*bytes=*/16, /*first=*/1, /*last=*/2},  // b
    {/*bytes=*/16, /*first=*/3, /*last=*/3},  // c
};
const std::vector<std::string> kNames = {"a", "b", "c"};

TEST(CheckPlan, AcceptsAValidPlan) {
  // a and b share step 1, so they sit apart; c shares no step with them and reuses offset 0.
  EXPECT_THAT(check_plan(kRecords, {0, 16, 0}, 32), IsEmpty());
}

TEST(CheckPlan, CatchesAnOverlapAndNamesBothBuffers) {
  // b at 8 overlaps a's bytes [8,16) at step 1.
  const auto v = check_plan(kRecords, {0, 8, 0}, 32, 1, &kNames);
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_EQ(v[0].kind, PlanViolation::Kind::Overlap);
  EXPECT_EQ(v[0].a, 0);
  EXPECT_EQ(v[0].b, 1);
  EXPECT_THAT(v[0].message, HasSubstr("'a'"));
  EXPECT_THAT(v[0].message, HasSubstr("'b'"));
  EXPECT_THAT(v[0].message, HasSubstr("[8, 16)"));
}

TEST(CheckPlan, SameOffsetIsAnOverlapWhenLiveTogether) {
  EXPECT_THAT(check_plan(kRecords, {0, 0, 0}, 32), SizeIs(1));
}

TEST(CheckPlan, TouchingRangesDoNotOverlap) {
  // a [0,16) and b [16,32): adjacent bytes are fine; a ending at step 1 and c starting at 3 also.
  EXPECT_THAT(check_plan(kRecords, {0, 16, 8}, 32), IsEmpty());
}

TEST(CheckPlan, RecordEndingAtAStepStillConflictsAtThatStep) {
  // a lives [0,1], b [1,2]: they meet at step 1 even though a ends there.
  EXPECT_THAT(check_plan({{/*bytes=*/8, /*first=*/0, /*last=*/1}, {/*bytes=*/8, /*first=*/1, /*last=*/2}}, {0, 4}, 16),
              SizeIs(1));
}

TEST(CheckPlan, CatchesABufferOutsideTheArena) {
  const auto v = check_plan(kRecords, {0, 16, 0}, 31);
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_EQ(v[0].kind, PlanViolation::Kind::OutsideArena);
  EXPECT_EQ(v[0].a, 1);
}

TEST(CheckPlan, CatchesMisalignment) {
  const auto v = check_plan(kRecords, {0, 16, 0}, 32, 32);
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_EQ(v[0].kind, PlanViolation::Kind::Misaligned);
}

TEST(CheckPlan, ReportsEveryRecordPlacedOnAnother) {
  // Three records live together, all at 0: b meets a, c meets a and b.
  const std::vector<UsageRecord> records(3, {/*bytes=*/8, /*first=*/0, /*last=*/0});
  EXPECT_THAT(check_plan(records, {0, 0, 0}, 8), SizeIs(3));
}

TEST(CheckPlan, ZeroByteRecordsNeverOverlap) {
  EXPECT_THAT(check_plan({{/*bytes=*/0, /*first=*/0, /*last=*/0}, {/*bytes=*/8, /*first=*/0, /*last=*/0}}, {4, 0}, 8),
              IsEmpty());
}

TEST(CheckPlan, MismatchedSizesAreReported) {
  const auto v = check_plan(kRecords, {0}, 32);
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_EQ(v[0].kind, PlanViolation::Kind::BadInput);
}

}  // namespace
}  // namespace memplan
