#include "report/fit.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "onnx_import/errors.h"
#include "report/sizes.h"

namespace memplan {
namespace {

// lo + floor((budget - at_lo) * dx / dy), the value where a line of slope dy / dx through (lo, at_lo) reaches the
// budget, clamped to [lo, max_value]. Long double: the product can pass 2^64.
int64_t along_line(int64_t lo, uint64_t at_lo, uint64_t budget, int64_t dx, uint64_t dy, int64_t max_value) {
  const long double step = std::floor(static_cast<long double>(budget - at_lo) * static_cast<long double>(dx) /
                                      static_cast<long double>(dy));
  if (step >= static_cast<long double>(max_value - lo)) return max_value;
  return lo + static_cast<int64_t>(step);
}

}  // namespace

FitResult fit_search(const std::function<uint64_t(int64_t)>& bytes, uint64_t budget, int64_t min_value,
                     int64_t max_value, FitMemo* shared) {
  FitResult r;
  FitMemo local;
  FitMemo& memo = shared ? *shared : local;
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
  auto fits = [&](const std::optional<uint64_t>& b) { return b && *b <= budget; };

  if (!fits(at(min_value))) {
    r.bytes_at_value = at(min_value).value_or(UINT64_MAX);
    return r;
  }
  // The best bracket the memo holds: lo the largest evaluated value that fits, hi (-1: none) the smallest
  // evaluated value above lo that does not. No evaluated value lies strictly between them, nor above lo
  // (up to max_value) while there is no hi: every probe below is a new evaluation.
  int64_t lo = min_value, hi = -1;
  for (auto it = memo.lower_bound(min_value); it != memo.end() && it->first <= max_value; ++it)
    if (fits(it->second)) lo = it->first;
  for (auto it = memo.upper_bound(lo); it != memo.end() && it->first <= max_value; ++it)
    if (!fits(it->second)) {
      hi = it->first;
      break;
    }

  int64_t grow = 1;     // while there is no hi: the least step up, doubled after each probe that fits
  bool bisect = false;  // the last interpolated probe did not halve the bracket
  while (hi < 0 ? lo < max_value : hi - lo > 1) {
    const uint64_t at_lo = *memo.at(lo);
    int64_t probe = 0;
    if (hi < 0) {
      // Extrapolate along the line from the smallest evaluated value below lo that needs less (the longest
      // baseline, so allocator rounding weighs least), but never step less than `grow`.
      std::optional<int64_t> guess;
      for (auto it = memo.lower_bound(min_value); it != memo.end() && it->first < lo; ++it)
        if (it->second && *it->second < at_lo) {
          guess = along_line(lo, at_lo, budget, lo - it->first, at_lo - *it->second, max_value);
          break;
        }
      probe = lo > max_value - grow ? max_value : lo + grow;
      if (guess) probe = std::max(probe, *guess < max_value ? *guess + 1 : max_value);
    } else {
      const std::optional<uint64_t> at_hi = memo.at(hi);
      probe = lo + (hi - lo) / 2;
      if (!bisect && at_hi) {
        const int64_t guess = along_line(lo, at_lo, budget, hi - lo, *at_hi - at_lo, max_value);
        // Just past the predicted boundary, or the boundary itself when that is hi.
        if (guess + 1 < hi) probe = guess + 1;
        else if (guess > lo && guess < hi) probe = guess;
      }
    }
    const int64_t width = hi < 0 ? -1 : hi - lo;
    const bool interpolated = hi >= 0 && !bisect;
    const bool ok = fits(at(probe));
    (ok ? lo : hi) = probe;
    if (ok && hi < 0) grow = grow > (int64_t{1} << 40) ? grow : grow * 2;
    bisect = interpolated && hi - lo > width / 2;
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

// ---- probing one model ----

FitProbe::FitProbe(std::string path, Bindings bindings, std::string search, EstimateOptions options)
    : session_(std::move(path), bindings.graph, bindings.moe_routing, false, bindings.experts, bindings.expert_parallel), bindings_(std::move(bindings)), search_(std::move(search)), options_(std::move(options)) {}

FitProbe::~FitProbe() = default;

std::shared_ptr<const Graph> FitProbe::shape(int64_t value) {
  Bindings b = bindings_;
  if (search_ == "batch") b.batch = value;
  else b.dims[search_] = value;
  return session_.shape(b);
}

uint64_t FitProbe::required_bytes(int64_t value) { return estimate_totals(*shape(value), options_).required_bytes; }

Estimate FitProbe::estimate(int64_t value, std::optional<uint64_t> device_budget) {
  EstimateOptions o = options_;
  o.device_budget = device_budget;
  return estimate_graph(*shape(value), o);
}

std::optional<IterationsAtCapacity> FitProbe::iterations(int64_t value, uint64_t budget_bytes) {
  return iterations_on_budget(*shape(value), options_, budget_bytes);
}

std::optional<RunCheck> check_run(FitProbe& probe, FitResult& r, uint64_t budget, int64_t min_value) {
  if (!r.any_fits) return std::nullopt;
  std::optional<IterationsAtCapacity> at = probe.iterations(r.value, budget);
  if (!at) return std::nullopt;
  RunCheck c;
  c.steady_value = r.value;
  // lo: the largest value known to run (none yet: min_value - 1); hi: the smallest known not to. Steps down
  // geometrically from the answer, then bisects, as fit_search does upwards: each answer rests on two values
  // actually run, lo and lo + 1.
  int64_t lo = min_value - 1, hi = r.value + 1;
  IterationsAtCapacity at_lo;
  if (at->runs) {
    lo = r.value;
    at_lo = *at;
  } else {
    hi = r.value;
    for (int64_t step = 1; hi - step >= min_value; step *= 2) {
      const IterationsAtCapacity t = *probe.iterations(hi - step, budget);
      if (t.runs) {
        lo = hi - step;
        at_lo = t;
        break;
      }
      hi -= step;
    }
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      const IterationsAtCapacity t = *probe.iterations(mid, budget);
      if (t.runs) {
        lo = mid;
        at_lo = t;
      } else {
        hi = mid;
      }
    }
  }
  if (lo < min_value) {  // not even the smallest value's run fits
    r.any_fits = false;
    r.bytes_at_value = probe.required_bytes(min_value);
    return c;
  }
  c.steady_iterations = at_lo.steady_iterations;
  c.settled = at_lo.settled;
  if (lo != r.value) {
    r.value = lo;
    r.bytes_at_value = probe.required_bytes(lo);
    r.next_evaluated = true;
    r.bytes_at_next = probe.required_bytes(lo + 1);
  }
  return c;
}

// ---- budgets and batches ----

GlobalBatchSplit split_global_batch(int64_t global_batch, int64_t max_micro_batch, int gpus) {
  GlobalBatchSplit s;
  s.global_batch = global_batch;
  s.gpus = gpus;
  const int64_t per_step = max_micro_batch * gpus;
  s.grad_accum = (global_batch + per_step - 1) / per_step;
  s.micro_batch = (global_batch + s.grad_accum * gpus - 1) / (s.grad_accum * gpus);
  return s;
}

// ---- the searches ----

FitAnswer fit_budget(FitProbe& probe, const FitSettings& settings, const FitBudget& budget) {
  FitAnswer a;
  a.model = probe.path();
  a.search = settings.search;
  a.budget_source = budget.source;
  a.budget_bytes = apply_headroom(budget.bytes, settings.headroom_percent);
  a.headroom_percent = settings.headroom_percent;
  a.max_value = settings.max_value;
  a.result = fit_search([&](int64_t v) { return probe.required_bytes(v); }, a.budget_bytes, 1, settings.max_value,
                        &probe.memo());
  a.run = check_run(probe, a.result, a.budget_bytes);
  if (a.result.any_fits) {
    a.at_value = probe.estimate(a.result.value, a.budget_bytes);
    if (settings.global_batch > 0 && settings.search == "batch")
      a.global_batch = split_global_batch(settings.global_batch, a.result.value, probe.options().training.gpus);
  }
  return a;
}

FitTable fit_catalog(FitProbe& probe, const FitSettings& settings, const GpuCatalog& catalog,
                     const OutsideAllocator& outside) {
  FitTable t;
  t.model = probe.path();
  t.search = settings.search;
  t.mode = mode_name(probe.options().mode);
  t.outside = outside;
  for (const GpuSpec& g : catalog.gpus) {
    FitTableRow row;
    row.gpu = g.name;
    row.memory_bytes = g.memory_bytes;
    probe.use_gpu_architecture(g);
    row.budget_bytes = apply_headroom(gpu_budget(g, outside).bytes, settings.headroom_percent);
    row.result = fit_search([&](int64_t v) { return probe.required_bytes(v); }, row.budget_bytes, 1, settings.max_value,
                            &probe.memo());
    row.run = check_run(probe, row.result, row.budget_bytes);
    t.rows.push_back(std::move(row));
  }
  return t;
}

FitOutcome fit_model(const FitArgs& f) {
  // The values, the budget's rules (--gpu or --memory, --arch) and the estimate's options were checked by
  // validate_options (report/option_checks.h), which the front ends run first.
  const std::string& gpu = f.estimate.gpu;
  const std::string& search = f.settings.search;
  if (search == "batch" && f.estimate.model.batch >= 0)
    throw InputError("fit searches the batch: drop --batch (or use --search DIM to search another dimension)");
  if (search != "batch")
    for (const std::string& d : f.estimate.model.dims)
      if (d.rfind(search + "=", 0) == 0) throw InputError("fit searches " + search + ": drop --dim " + d);
  const EstimateOptions options = to_estimate_options(f.estimate);
  const GpuCatalog catalog = gpu_catalog_from(f.estimate.catalog);
  const OutsideAllocator outside = outside_allocator(options);
  // The bindings (read at the first probe) come last.
  auto make_probe = [&] { return FitProbe(f.estimate.model.path, to_bindings(f.estimate.model), search, options); };
  FitOutcome out;
  if (gpu.empty() && f.memory.empty()) {
    FitProbe probe = make_probe();
    out.table = fit_catalog(probe, f.settings, catalog, outside);
    return out;
  }
  const FitBudget budget = gpu.empty() ? FitBudget{parse_size(f.memory, "--memory"), "--memory " + f.memory}
                                       : gpu_budget(catalog.find(gpu), outside);
  FitProbe probe = make_probe();
  out.answer = fit_budget(probe, f.settings, budget);
  return out;
}

}  // namespace memplan
