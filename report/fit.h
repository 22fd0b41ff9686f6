// The largest value of a dimension whose predicted peak fits a budget.
#pragma once

#include <cstdint>
#include <functional>

namespace memplan {

struct FitResult {
  bool any_fits = false;     // false: even the smallest value is over budget
  int64_t value = 0;         // the largest fitting value (when any_fits)
  uint64_t bytes_at_value = 0;
  bool next_evaluated = false;  // false when value is the search limit (or the next value overflows)
  uint64_t bytes_at_next = 0;   // estimate at value + 1
  int evaluations = 0;
};

// Finds v in [min_value, max_value] with bytes(v) <= budget < bytes(v + 1): exponential then binary search,
// so O(log v) estimates. The answer satisfies that condition exactly for the model even if bytes() is not
// monotonic; for the usual monotonic case it is the largest such v. `bytes` may throw ShapeOverflow for values
// too large to represent: they count as not fitting.
FitResult fit_search(const std::function<uint64_t(int64_t)>& bytes, uint64_t budget, int64_t min_value = 1,
                     int64_t max_value = int64_t{1} << 40);

}  // namespace memplan
