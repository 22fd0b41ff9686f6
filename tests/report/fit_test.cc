#include "report/fit.h"

#include <gtest/gtest.h>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

// A linear model: 1 GiB of weights plus 100 MiB per sample.
uint64_t linear(int64_t batch) { return (1ull << 30) + static_cast<uint64_t>(batch) * (100ull << 20); }

TEST(FitSearch, FindsTheExactBoundary) {
  // Budget 10 GiB: (10240 - 1024) / 100 = 92.16 -> 92 samples fit, 93 do not.
  const FitResult r = fit_search(linear, 10ull << 30);
  ASSERT_TRUE(r.any_fits);
  EXPECT_EQ(r.value, 92);
  EXPECT_LE(r.bytes_at_value, 10ull << 30);
  EXPECT_GT(r.bytes_at_next, 10ull << 30);
  EXPECT_TRUE(r.next_evaluated);
  EXPECT_LT(r.evaluations, 20);  // logarithmic, not a linear scan
}

TEST(FitSearch, BudgetExactlyEqualFits) {
  // 1 GiB + 4 * 100 MiB is exactly the budget: batch 4 fits.
  const FitResult r = fit_search(linear, (1ull << 30) + 400ull * (1 << 20));
  EXPECT_EQ(r.value, 4);
}

TEST(FitSearch, NothingFits) {
  const FitResult r = fit_search(linear, 1ull << 29);
  EXPECT_FALSE(r.any_fits);
  EXPECT_EQ(r.bytes_at_value, linear(1));
}

TEST(FitSearch, OverflowCountsAsNotFitting) {
  auto overflowing = [](int64_t v) -> uint64_t {
    if (v > 1000) throw ShapeOverflow("too big");
    return static_cast<uint64_t>(v);
  };
  const FitResult r = fit_search(overflowing, UINT64_MAX);
  EXPECT_EQ(r.value, 1000);
  EXPECT_FALSE(r.next_evaluated);
}

TEST(FitSearch, StopsAtTheLimit) {
  const FitResult r = fit_search([](int64_t) { return uint64_t{0}; }, 1, 1, 4096);
  EXPECT_EQ(r.value, 4096);
  EXPECT_FALSE(r.next_evaluated);
}

}  // namespace
}  // namespace memplan
