// The first iteration, then steady ones, on one caching allocator (planner/iterations.h). Expected sizes by hand
// from the caching allocator's rules (c10/cuda/CUDACachingAllocator.cpp): requests of 10 MiB and more get a
// segment of their size rounded to 2 MiB, a cached block is split when more than 1 MiB would remain, the
// smallest cached block that fits is taken, and whole free segments are released only when a cudaMalloc fails.
#include <gtest/gtest.h>

#include "planner/iterations.h"
#include "planner/measure.h"
#include "tests/planner/program_builder.h"

namespace memplan {
namespace {

using testing::MiB;

// First iteration: s0 makes a (40 MiB), s1 reads it (a is freed), s2 is the optimizer's first step, which
// creates its state S (20 MiB, kept). Steady iterations: S is resident; s0 makes a, s1 reads a and S.
struct TwoPrograms {
  Program first, steady;
};
TwoPrograms state_made_after_the_activations() {
  testing::ProgramBuilder f;
  const int32_t fa = f.buffer("a", 40 * MiB);
  const int32_t fs = f.buffer("S", 20 * MiB, testing::kOutput);
  f.step("s0", {}, {fa});
  f.step("s1", {fa}, {});
  f.step("s2", {}, {fs});
  testing::ProgramBuilder s;
  const int32_t ss = s.buffer("S", 20 * MiB, testing::kResident);
  const int32_t sa = s.buffer("a", 40 * MiB);
  s.step("s0", {}, {sa});
  s.step("s1", {sa, ss}, {});
  return {f.program(), s.program()};
}

TEST(Iterations, TheFirstIterationsCacheCanNeedMoreThanTheSteadyStepAlone) {
  const TwoPrograms p = state_made_after_the_activations();
  // The steady step alone on a fresh allocator: S's 20 MiB segment, then a's 40 MiB one: 60 MiB.
  EXPECT_EQ(measure(p.steady, {AllocatorKind::PytorchCaching, false}).required_bytes, 60 * MiB);
  // The run: a's 40 MiB segment is cached when S (20 MiB) is made, so S splits it: [S 20 | free 20]. The steady
  // iteration's a (40 MiB) fits no cached block: a second 40 MiB segment, 80 MiB reserved, and no whole free
  // segment to release first. After it: [S | free 20] [free 40]; the second iteration takes the free 40 MiB and
  // leaves the same layout: settled after 2.
  const IterationsAtCapacity at80 = run_iterations_at_capacity(p.first, p.steady, 80 * MiB);
  EXPECT_TRUE(at80.runs);
  EXPECT_TRUE(at80.settled);
  EXPECT_EQ(at80.steady_iterations, 2);
  // One 2 MiB unit less: the first steady iteration cannot make its second segment.
  const IterationsAtCapacity at78 = run_iterations_at_capacity(p.first, p.steady, 78 * MiB);
  EXPECT_FALSE(at78.runs);
  EXPECT_EQ(at78.steady_iterations, 1);
  // The guard: with one steady iteration allowed, it runs but has not seen the cache repeat.
  const IterationsAtCapacity once = run_iterations_at_capacity(p.first, p.steady, 80 * MiB, 1);
  EXPECT_TRUE(once.runs);
  EXPECT_FALSE(once.settled);
}

TEST(Iterations, AResidentTheFirstIterationLacksIsMadeOnceAndKept) {
  // The steady program holds W (resident, 20 MiB) that no first iteration made: the first steady iteration
  // allocates it and keeps it. First iteration: x (12 MiB) made and freed: a cached 12 MiB segment. Steady: W gets
  // a new 20 MiB segment (the cached 12 MiB block is too small), x reuses the cached one: 32 MiB, and the second
  // iteration allocates nothing new (W kept, x in its block): settled after 2 on exactly 32 MiB.
  testing::ProgramBuilder f;
  const int32_t fx = f.buffer("x", 12 * MiB);
  f.step("f0", {}, {fx});
  f.step("f1", {fx}, {});
  testing::ProgramBuilder s;
  const int32_t sw = s.buffer("W", 20 * MiB, testing::kResident);
  const int32_t sx = s.buffer("x", 12 * MiB);
  s.step("s0", {}, {sx});
  s.step("s1", {sx, sw}, {});
  const IterationsAtCapacity r = run_iterations_at_capacity(f.program(), s.program(), 32 * MiB);
  EXPECT_TRUE(r.runs);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.steady_iterations, 2);
  EXPECT_FALSE(run_iterations_at_capacity(f.program(), s.program(), 30 * MiB).runs);
}

}  // namespace
}  // namespace memplan
