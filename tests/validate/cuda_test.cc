// The CUDA replay, on a GPU only: the same plans give the same verdicts as on the host, and the measured
// device usage covers what was planned. Skipped when the CUDA part is not built or no device is present.
#include <gtest/gtest.h>

#include "plan_builder.h"
#include "validate/cpu_device.h"
#include "validate/devices.h"
#include "validate/replay.h"

namespace memplan::validate {
namespace {

using testing::make_plan;
using testing::plans_dir;

class CudaReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_built()) GTEST_SKIP() << "built without CUDA (nvcc not found or MEMPLAN_CUDA=OFF)";
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none)";
    device_ = make_device("cuda");
  }
  std::unique_ptr<Device> device_;
};

TEST_F(CudaReplayTest, ValidPlanPassesInEveryMode) {
  const Plan plan = load_plan(plans_dir() + "/valid.json");
  for (Mode mode : {Mode::kArena, Mode::kMalloc, Mode::kPool})
    EXPECT_TRUE(replay(plan, mode, *device_).overlaps.empty()) << mode_name(mode);
}

TEST_F(CudaReplayTest, OverlapVerdictMatchesTheHostReplay) {
  const Plan plan = load_plan(plans_dir() + "/overlap.json");
  const ModeResult gpu = replay(plan, Mode::kArena, *device_);
  const ModeResult cpu = replay(plan, Mode::kArena, *make_cpu_device());
  ASSERT_EQ(gpu.overlaps.size(), 1u);
  ASSERT_EQ(cpu.overlaps.size(), 1u);
  EXPECT_EQ(gpu.overlaps[0].victim, "x");
  EXPECT_EQ(gpu.overlaps[0].culprit, "y");
  // One pattern function for both: the same bytes are damaged.
  EXPECT_EQ(gpu.overlaps[0].first_bad_offset, cpu.overlaps[0].first_bad_offset);
  EXPECT_EQ(gpu.overlaps[0].mismatched_bytes, cpu.overlaps[0].mismatched_bytes);
}

TEST_F(CudaReplayTest, LargeUnalignedBuffersUseTheWholeGrid) {
  // 64 MiB buffers at odd offsets: more words than one grid pass (8192 blocks x 256 threads) covers.
  constexpr uint64_t kMiB = 1 << 20;
  const Plan ok = make_plan(200 * kMiB, 3,
                            {{"a", 64 * kMiB + 3, 1, 0, 1}, {"b", 64 * kMiB + 5, 64 * kMiB + 7, 1, 2},
                             {"c", 64 * kMiB, 1, 2, 2}});
  EXPECT_TRUE(replay(ok, Mode::kArena, *device_).overlaps.empty());
  const Plan bad = make_plan(200 * kMiB, 2, {{"a", 64 * kMiB, 0, 0, 1}, {"b", 64 * kMiB, 64 * kMiB - 6, 1, 1}});
  const ModeResult r = replay(bad, Mode::kArena, *device_);
  ASSERT_EQ(r.overlaps.size(), 1u);
  EXPECT_EQ(r.overlaps[0].victim, "a");
  EXPECT_EQ(r.overlaps[0].culprit, "b");
  EXPECT_LE(r.overlaps[0].mismatched_bytes, 6u);
}

TEST_F(CudaReplayTest, MeasuredUsageCoversThePlan) {
  // 32 MiB arena: cudaMalloc maps whole 2 MiB pages, so the device's used memory grows by at least that much.
  constexpr uint64_t kMiB = 1 << 20;
  const Plan plan = make_plan(32 * kMiB, 2, {{"a", 16 * kMiB, 0, 0, 1}, {"b", 16 * kMiB, 16 * kMiB, 1, 1}});
  const ModeResult arena = replay(plan, Mode::kArena, *device_);
  EXPECT_GE(arena.measured_bytes, 32 * kMiB);
  const ModeResult pool = replay(plan, Mode::kPool, *device_);
  ASSERT_TRUE(pool.allocator.used_high.has_value());
  EXPECT_GE(*pool.allocator.used_high, 32 * kMiB);  // both 16 MiB buffers live at step 1
  ASSERT_TRUE(pool.allocator.reserved_high.has_value());
  EXPECT_GE(*pool.allocator.reserved_high, *pool.allocator.used_high);
}

}  // namespace
}  // namespace memplan::validate
