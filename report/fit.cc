#include "report/fit.h"

#include <map>
#include <optional>

#include "onnx_import/errors.h"

namespace memplan {

FitResult fit_search(const std::function<uint64_t(int64_t)>& bytes, uint64_t budget, int64_t min_value,
                     int64_t max_value) {
  FitResult r;
  std::map<int64_t, std::optional<uint64_t>> memo;  // nullopt: overflowed
  auto at = [&](int64_t v) -> std::optional<uint64_t> {
    auto it = memo.find(v);
    if (it != memo.end()) return it->second;
    std::optional<uint64_t> b;
    try {
      b = bytes(v);
    } catch (const ShapeOverflow&) {
      b = std::nullopt;
    }
    ++r.evaluations;
    return memo[v] = b;
  };
  auto fits = [&](int64_t v) {
    const auto b = at(v);
    return b && *b <= budget;
  };

  if (!fits(min_value)) {
    r.bytes_at_value = at(min_value).value_or(UINT64_MAX);
    return r;
  }
  // Exponential search for a value that does not fit; lo always fits.
  int64_t lo = min_value, hi = -1;
  for (int64_t step = 1; hi < 0;) {
    const int64_t probe = lo > max_value - step ? max_value : lo + step;
    if (probe == lo) break;  // lo == max_value: everything up to the limit fits
    if (fits(probe)) {
      lo = probe;
      step = step > (int64_t{1} << 40) ? step : step * 2;
    } else {
      hi = probe;
    }
  }
  // Binary search keeps fits(lo) and !fits(hi) until they are adjacent.
  while (hi >= 0 && hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  r.any_fits = true;
  r.value = lo;
  r.bytes_at_value = *at(lo);
  if (lo < max_value) {
    const auto next = at(lo + 1);
    r.next_evaluated = next.has_value();
    r.bytes_at_next = next.value_or(UINT64_MAX);
  }
  return r;
}

}  // namespace memplan
