#include "report/fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "onnx_import/errors.h"
#include "onnx_import/import.h"
#include "planner/alloc_pytorch.h"
#include "tests/cost_models/graph_builder.h"

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

TEST(FitSearch, AffineModelNeedsFourProbes) {
  // 1 and 2 give the line, which predicts 92 exactly: then 93 (over) and 92 (fits). The exponential and binary
  // search it replaces took 14 (1, 2, 4, 8, ..., 128, then 7 bisections and 93).
  const FitResult r = fit_search(linear, 10ull << 30);
  EXPECT_EQ(r.value, 92);
  EXPECT_EQ(r.evaluations, 4);
}

// A recording fake: every value fit_search asked for, so a test can check what was actually evaluated.
struct Recorder {
  std::function<uint64_t(int64_t)> f;
  std::set<int64_t> asked;
  std::function<uint64_t(int64_t)> bytes() {
    return [this](int64_t v) {
      asked.insert(v);
      return f(v);
    };
  }
};

// The exactness argument of fit_search (report/fit.h), checked: whatever the memo held and whether or not
// bytes() is monotone, the answer v has bytes(v) <= budget < bytes(v + 1), both asked of bytes() itself.
void expect_exact(const FitResult& r, const Recorder& rec, uint64_t budget, int64_t max_value, const std::string& what) {
  ASSERT_TRUE(r.any_fits) << what;
  EXPECT_TRUE(rec.asked.count(r.value)) << what << ": " << r.value << " was never evaluated";
  EXPECT_LE(rec.f(r.value), budget) << what;
  EXPECT_EQ(r.bytes_at_value, rec.f(r.value)) << what;
  if (r.value < max_value) {
    EXPECT_TRUE(rec.asked.count(r.value + 1)) << what << ": " << r.value + 1 << " was never evaluated";
    EXPECT_GT(rec.f(r.value + 1), budget) << what;
    EXPECT_EQ(r.bytes_at_next, rec.f(r.value + 1)) << what;
  }
}

// What a caching allocator does to an affine model: 1 GiB + 100 MiB and some bytes per sample, reserved in
// 20 MiB steps. Monotone, but not a line.
uint64_t rounded(int64_t batch) {
  const uint64_t raw = (1ull << 30) + static_cast<uint64_t>(batch) * ((100ull << 20) + 12345);
  const uint64_t step = 20ull << 20;
  return (raw + step - 1) / step * step;
}

// Budgets like the catalog's: 16, 24, 40, 48, 80, 94, 141, 192 GiB, 12 and 4 GiB, unsorted.
const std::vector<uint64_t> kBudgets = {16ull << 30, 24ull << 30, 40ull << 30, 48ull << 30, 80ull << 30,
                                        94ull << 30, 141ull << 30, 192ull << 30, 12ull << 30, 4ull << 30};

TEST(FitSearch, SharedMemoGivesEveryBudgetTheLargestFittingValue) {
  // Monotone: the fitting values are a prefix, so the answer is the largest v with bytes(v) <= budget, found here
  // by a plain scan, independent of the search.
  Recorder rec{rounded, {}};
  FitMemo memo;
  int shared_evaluations = 0, fresh_evaluations = 0;
  for (uint64_t budget : kBudgets) {
    int64_t expected = 0;
    while (rounded(expected + 1) <= budget) ++expected;
    const FitResult r = fit_search(rec.bytes(), budget, 1, int64_t{1} << 20, &memo);
    EXPECT_EQ(r.value, expected) << budget;
    expect_exact(r, rec, budget, int64_t{1} << 20, std::to_string(budget));
    shared_evaluations += r.evaluations;
    fresh_evaluations += fit_search(rounded, budget, 1, int64_t{1} << 20).evaluations;
  }
  // Each budget costs about its two boundary values once the line is known.
  EXPECT_LE(shared_evaluations, 3 * static_cast<int>(kBudgets.size()));
  EXPECT_LT(shared_evaluations, fresh_evaluations);
}

TEST(FitSearch, NonMonotoneAnswersAreStillExact) {
  // A dip: values 50..60 need 300 units less than the line. Some budgets have two boundaries; whichever the
  // search finds, both of its sides were evaluated.
  auto dip = [](int64_t v) -> uint64_t { return 10 * static_cast<uint64_t>(v) - (v >= 50 && v <= 60 ? 300 : 0); };
  for (bool shared : {false, true}) {
    Recorder rec{dip, {}};
    FitMemo memo;
    for (uint64_t budget = 10; budget <= 1000; budget += 7) {
      const FitResult r = fit_search(rec.bytes(), budget, 1, 4096, shared ? &memo : nullptr);
      expect_exact(r, rec, budget, 4096, (shared ? "shared " : "fresh ") + std::to_string(budget));
    }
  }
}

TEST(FitSearch, WorstCaseStaysLogarithmic) {
  // Random step functions (monotone and not), random budgets, one shared memo: always exact, and never more
  // probes than the bound the safeguards give: log2(max) + 1 while growing, 2 per halving of the bracket.
  std::mt19937_64 rng(20261201);
  const int64_t max_value = int64_t{1} << 20;
  const int bound = 3 * 21 + 4;
  for (int trial = 0; trial < 40; ++trial) {
    const bool monotone = trial % 2 == 0;
    std::vector<uint64_t> jumps(64);
    for (uint64_t& j : jumps) j = rng() % (1ull << 30);
    auto f = [&, monotone](int64_t v) -> uint64_t {
      // Piecewise: a jump every 2^14 values, plus a gentle slope; the non-monotone variant subtracts a saw tooth.
      uint64_t s = static_cast<uint64_t>(v) * 3 + 100000;
      for (int64_t k = 0; k < (v >> 14) && k < 64; ++k) s += jumps[k];
      if (!monotone) s -= static_cast<uint64_t>(v % 97) * 1000;
      return s;
    };
    Recorder rec{f, {}};
    FitMemo memo;
    for (int b = 0; b < 8; ++b) {
      const uint64_t budget = 100000 + rng() % (1ull << 35);
      const FitResult r = fit_search(rec.bytes(), budget, 1, max_value, &memo);
      if (!r.any_fits) continue;
      expect_exact(r, rec, budget, max_value, "trial " + std::to_string(trial));
      EXPECT_LE(r.evaluations, bound) << "trial " << trial << " budget " << budget;
    }
  }
}

TEST(FitSearch, ConvexModelStaysCloseToBinarySearch) {
  // Attention without SDPA: memory quadratic in the sequence length. A line through two points overshoots;
  // bisection takes over.
  auto quadratic = [](int64_t s) { return static_cast<uint64_t>(s) * static_cast<uint64_t>(s) * 4096 + (1ull << 30); };
  const FitResult r = fit_search(quadratic, 40ull << 30, 1, int64_t{1} << 20);
  const int64_t expected = static_cast<int64_t>(std::sqrt(static_cast<double>((40ull << 30) - (1ull << 30)) / 4096));
  EXPECT_EQ(r.value, expected);
  EXPECT_LE(r.evaluations, 2 * 17 + 4);  // 2 per halving of [1, 2^17]
}

// ---- budgets and batches, against hand arithmetic ----

TEST(FitBudgets, HeadroomAndReserve) {
  EXPECT_EQ(apply_headroom(1000, 10), 900u);
  EXPECT_EQ(apply_headroom(1000, 0), 1000u);
  GpuSpec a100;
  a100.name = "A100-80GB";
  a100.memory_bytes = 81920ull << 20;
  EXPECT_EQ(gpu_budget(a100, 1024ull << 20).bytes, 80896ull << 20);
  EXPECT_EQ(gpu_budget(a100, 1024ull << 20).source, "A100-80GB (80.0 GiB - 1.00 GiB context reserve)");
  EXPECT_EQ(gpu_budget(a100, 90000ull << 20).bytes, 0u);  // a reserve larger than the card leaves nothing
}

TEST(FitBudgets, GlobalBatchSplit) {
  // 512 over 2 GPUs with at most 37 per GPU: 74 per step -> 7 accumulation steps; 512 / 14 -> micro-batch 37.
  const GlobalBatchSplit a = split_global_batch(512, 37, 2);
  EXPECT_EQ(a.grad_accum, 7);
  EXPECT_EQ(a.micro_batch, 37);
  // 1000 on one GPU with at most 300: 4 steps of 250.
  const GlobalBatchSplit b = split_global_batch(1000, 300, 1);
  EXPECT_EQ(b.grad_accum, 4);
  EXPECT_EQ(b.micro_batch, 250);
}

// ---- probing a real model: the file once, the same totals as estimate ----

struct ZooCase {
  const char* model;
  std::map<std::string, int64_t> dims;
  Mode mode;
  Runtime runtime;
  void (*tweak)(EstimateOptions&);
};

void nothing(EstimateOptions&) {}

const ZooCase kZooCases[] = {
    {"resnet18.onnx", {}, Mode::Inference, Runtime::Ideal, nothing},
    {"resnet18.onnx", {}, Mode::Inference, Runtime::PyTorch, nothing},
    {"resnet18.onnx", {}, Mode::Inference, Runtime::OnnxRuntime, nothing},
    {"mobilenet_v2.onnx", {}, Mode::Inference, Runtime::PyTorch, [](EstimateOptions& o) { o.memory_schedule = true; }},
    {"mobilenet_v2.onnx", {}, Mode::Inference, Runtime::Ideal, [](EstimateOptions& o) { o.memory_schedule = true; }},
    {"gpt_tiny.onnx", {{"seq", 64}}, Mode::Inference, Runtime::OnnxRuntime, nothing},
    {"gpt_tiny.onnx", {{"seq", 64}}, Mode::Inference, Runtime::PyTorch,
     [](EstimateOptions& o) { o.inference.float_dtype = DType::Float16; }},
    {"resnet18_train.onnx", {}, Mode::Training, Runtime::PyTorch, nothing},
    {"resnet18_train.onnx", {}, Mode::Training, Runtime::Ideal,
     [](EstimateOptions& o) { o.training.optimizer = Optimizer::Sgd; }},
    {"gpt_tiny_train.onnx", {{"seq", 64}}, Mode::Training, Runtime::PyTorch,
     [](EstimateOptions& o) {
       o.training.precision = Precision::AmpBf16;
       o.training.checkpoint.mode = CheckpointMode::Sqrt;
     }},
    {"gpt_tiny_train.onnx", {{"seq", 64}}, Mode::Training, Runtime::PyTorch,
     [](EstimateOptions& o) {
       o.training.gpus = 4;
       o.training.shard = Sharding::Zero2;
       o.training.grad_accum = 4;
     }},
};

using testing::zoo_path;

EstimateOptions options_of(const ZooCase& c) {
  EstimateOptions o;
  o.mode = c.mode;
  o.execution.runtime = c.runtime;
  o.training.loss = c.mode == Mode::Training ? LossKind::CrossEntropy : LossKind::None;
  c.tweak(o);
  return o;
}

TEST(EstimateTotals, EqualTheFullEstimateByteForByte) {
  for (const ZooCase& c : kZooCases) {
    for (int64_t batch : {1, 3, 16}) {
      Bindings b;
      b.dims = c.dims;
      b.batch = batch;
      const Graph g = import_model(zoo_path(c.model), b);
      const EstimateOptions o = options_of(c);
      const EstimateTotals totals = estimate_totals(g, o);
      const Estimate full = estimate_graph(g, o);
      const std::string what = std::string(c.model) + " " + mode_name(c.mode) + " " + runtime_name(c.runtime) +
                               " batch " + std::to_string(batch);
      EXPECT_EQ(totals.total_bytes, full.total_bytes) << what;
      EXPECT_EQ(totals.required_bytes, full.required_bytes) << what;
      // The least budget lies between the allocated peak (+ fixed) and the unconstrained total.
      EXPECT_LE(totals.required_bytes, totals.total_bytes) << what;
      EXPECT_GE(totals.required_bytes, full.allocated_bytes + full.breakdown.fixed) << what;
    }
  }
}

TEST(RequiredBytes, SufficingIsMonotoneInTheCapacity) {
  // pytorch_min_capacity bisects over the capacity; this checks its premise on real programs: over every
  // 2 MiB capacity from the allocated peak to the unconstrained reserve, the simulated step fails below
  // one capacity and succeeds at and above it. Where the gap is wide, most of its capacities are checked.
  struct Case { const char* model; std::map<std::string, int64_t> dims; int64_t batch; Mode mode; };
  const Case cases[] = {{"resnet18_train.onnx", {}, 24, Mode::Training},
                        {"gpt_tiny_train.onnx", {{"seq", 256}}, 16, Mode::Training},
                        {"vit_b_16_train.onnx", {}, 4, Mode::Training},
                        {"resnet50.onnx", {}, 64, Mode::Inference}};
  int gaps = 0;
  for (const Case& c : cases) {
    Bindings b;
    b.dims = c.dims;
    b.batch = c.batch;
    EstimateOptions o;
    o.mode = c.mode;
    if (c.mode == Mode::Training) o.training.loss = LossKind::CrossEntropy;
    const Program program = build_estimate_program(import_model(zoo_path(c.model), b), o).program;
    const ReplayOrder order = replay_order(program);
    const AllocatorReplay free_run = simulate_pytorch(program);
    const uint64_t need = pytorch_min_capacity(program, order, free_run);
    const uint64_t unit = pytorch::kRoundLarge;
    ASSERT_EQ(need % unit, 0u) << c.model;
    ASSERT_GE(need, free_run.peak_allocated_bytes / unit * unit) << c.model;
    ASSERT_LE(need, free_run.peak_reserved_bytes) << c.model;
    if (need < free_run.peak_reserved_bytes) ++gaps;
    const uint64_t from = free_run.peak_allocated_bytes / unit, to = free_run.peak_reserved_bytes / unit;
    const uint64_t stride = std::max<uint64_t>(1, (to - from) / 200);
    for (uint64_t units = from; units <= to; units += stride)
      EXPECT_EQ(simulate_pytorch_at_capacity(program, order, units * unit).fits, units * unit >= need)
          << c.model << " at " << units * 2 << " MiB (needs " << need / unit * 2 << " MiB)";
  }
  EXPECT_GT(gaps, 0) << "no case runs below its unconstrained reserve: the test checks nothing";
}

TEST(AtBudget, TheStepRunsExactlyFromItsRequiredBytes) {
  // resnet18_train at batch 24 needs less than it reserves unconstrained (a full device flushes the cache);
  // run on a budget of exactly its required bytes it runs, flushing at least once; a byte less, it does not.
  Bindings b;
  b.batch = 24;
  const Graph g = import_model(zoo_path("resnet18_train.onnx"), b);
  EstimateOptions o;
  o.mode = Mode::Training;
  o.training.loss = LossKind::CrossEntropy;
  const Estimate free_run = estimate_graph(g, o);
  ASSERT_LT(free_run.required_bytes, free_run.total_bytes);
  EXPECT_FALSE(free_run.at_budget.has_value());
  o.device_budget = free_run.required_bytes;
  const Estimate tight = estimate_graph(g, o);
  ASSERT_TRUE(tight.at_budget.has_value());
  EXPECT_TRUE(tight.at_budget->runs);
  EXPECT_GE(tight.at_budget->alloc_retries, 1);
  EXPECT_LE(tight.at_budget->reserved_bytes, free_run.required_bytes);
  EXPECT_EQ(tight.total_bytes, free_run.total_bytes) << "the budget changes no other figure";
  o.device_budget = free_run.required_bytes - 1;
  const Estimate short_of_it = estimate_graph(g, o);
  EXPECT_FALSE(short_of_it.at_budget->runs);
  EXPECT_FALSE(short_of_it.at_budget->out_of_memory_at.empty());
  o.device_budget = free_run.total_bytes;
  const Estimate roomy = estimate_graph(g, o);
  EXPECT_TRUE(roomy.at_budget->runs);
  EXPECT_EQ(roomy.at_budget->alloc_retries, 0);
  EXPECT_EQ(roomy.at_budget->reserved_bytes, free_run.total_bytes);
}

TEST(FitProbe, ReadsTheFileOnceAndAgreesWithAFreshImport) {
  for (const ZooCase& c : {kZooCases[1], kZooCases[7], kZooCases[9]}) {
    Bindings base;
    base.dims = c.dims;
    FitProbe probe(zoo_path(c.model), base, "batch", options_of(c));
    EXPECT_EQ(probe.files_read(), 0);
    for (int64_t batch : {1, 2, 7}) {
      Bindings b = base;
      b.batch = batch;
      // The reference reads and imports the file again, as every probe did before.
      const uint64_t fresh = estimate_graph(import_model(zoo_path(c.model), b), options_of(c)).required_bytes;
      EXPECT_EQ(probe.required_bytes(batch), fresh) << c.model << " batch " << batch;
      EXPECT_EQ(probe.estimate(batch).required_bytes, fresh) << c.model << " batch " << batch;
    }
    EXPECT_EQ(probe.files_read(), 1) << c.model;
  }
}

TEST(FitProbe, SearchesAnotherDimension) {
  Bindings base;
  base.batch = 2;
  EstimateOptions o;
  FitProbe probe(zoo_path("gpt_tiny.onnx"), base, "seq", o);
  Bindings b = base;
  b.dims["seq"] = 96;
  EXPECT_EQ(probe.required_bytes(96), estimate_graph(import_model(zoo_path("gpt_tiny.onnx"), b), o).required_bytes);
}

TEST(FitProbe, EachArchitectureHasItsOwnMemo) {
  FitProbe probe(zoo_path("gpt_tiny.onnx"), Bindings{}, "batch", EstimateOptions{});  // sm90 by default
  probe.memo()[3] = 123;
  const GpuCatalog catalog = builtin_gpu_catalog();
  probe.use_gpu_architecture(catalog.find("T4"));
  EXPECT_EQ(probe.options().execution.cuda_arch_major, 7);
  EXPECT_TRUE(probe.memo().empty());
  probe.use_gpu_architecture(catalog.find("H200"));
  ASSERT_EQ(probe.memo().count(3), 1u);
  EXPECT_EQ(*probe.memo().at(3), 123u);
}

TEST(FitCatalog, TableAnswersAreExactForEveryGpu) {
  // Every row of the catalog table, checked with independent estimates at v and v + 1 made with that GPU's
  // architecture: the T4's probes have an 8 MiB + 128 KiB cuBLAS workspace, the H100's 32 MiB, so one memo shared
  // across architectures would give the T4 row the H100's totals.
  Bindings base;
  base.dims = {{"seq", 64}};
  EstimateOptions o;
  o.mode = Mode::Training;
  o.training.loss = LossKind::CrossEntropy;
  FitProbe probe(zoo_path("gpt_tiny_train.onnx"), base, "batch", o);
  FitSettings settings;
  settings.max_value = 4096;
  const GpuCatalog catalog = builtin_gpu_catalog();
  OutsideAllocator context_only;
  context_only.context_bytes = 1ull << 30;
  const FitTable t = fit_catalog(probe, settings, catalog, context_only);
  ASSERT_GE(t.rows.size(), 10u);
  for (const FitTableRow& row : t.rows) {
    ASSERT_TRUE(row.result.any_fits) << row.gpu;
    EstimateOptions at_gpu = o;
    apply_gpu_architecture(catalog.find(row.gpu), at_gpu);
    auto fresh = [&](int64_t batch) {
      Bindings b = base;
      b.batch = batch;
      return estimate_graph(import_model(zoo_path("gpt_tiny_train.onnx"), b), at_gpu).required_bytes;
    };
    EXPECT_EQ(fresh(row.result.value), row.result.bytes_at_value) << row.gpu;
    EXPECT_LE(fresh(row.result.value), row.budget_bytes) << row.gpu;
    if (row.result.value < settings.max_value) {
      EXPECT_GT(fresh(row.result.value + 1), row.budget_bytes) << row.gpu;
    }
  }
  EXPECT_EQ(probe.files_read(), 1);
}

}  // namespace
}  // namespace memplan

namespace memplan {
namespace {

TEST(FitRun, TheAnswersRunFitsAndTheNextOnesDoesNot) {
  // vit_b_16 training (fp32, AdamW) on an A100-80GB's budget: the steady step alone fits at a larger batch than
  // the run (the first iteration, then steady ones) does (bench/iterations: +2.33 % at batch 128). fit lowers its
  // answer to the run's boundary, and each side of it was run: the answer's run fits, the next one's does not.
  EstimateArgs e;
  e.model.path = zoo_path("vit_b_16_train.onnx");
  e.mode = "train";
  e.gpu = "A100-80GB";
  e.top = 0;
  const FitOutcome out = fit_model(FitArgs{e, FitSettings{}, ""});
  ASSERT_TRUE(out.answer && out.answer->run);
  const FitAnswer& a = *out.answer;
  EXPECT_LT(a.result.value, a.run->steady_value);  // lowered
  EXPECT_TRUE(a.run->settled);
  FitProbe probe(e.model.path, to_bindings(e.model), "batch", to_estimate_options(e));
  EXPECT_TRUE(probe.iterations(a.result.value, a.budget_bytes)->runs);
  EXPECT_FALSE(probe.iterations(a.result.value + 1, a.budget_bytes)->runs);
  // The steady step alone fits at the search's answer, and not one past it.
  EXPECT_LE(probe.required_bytes(a.run->steady_value), a.budget_bytes);
  EXPECT_GT(probe.required_bytes(a.run->steady_value + 1), a.budget_bytes);
  // Inference has no first iteration: no run is checked.
  e.mode = "inference";
  EXPECT_FALSE(fit_model(FitArgs{e, FitSettings{}, ""}).answer->run);
}

}  // namespace
}  // namespace memplan
