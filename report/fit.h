// fit: the largest value of a dimension (the batch, or a symbolic dim such as seq) whose step runs within a
// budget (its required_bytes: for PyTorch, the simulated caching allocator at that capacity, flushing its cache
// and retrying before it fails; see report/estimate.h), for one budget or for every GPU of a catalog; its JSON ("memplan.fit/1", docs/json.md), table and
// markdown. The model file is read and parsed once per FitProbe, whatever the number of values probed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "onnx_import/import.h"
#include "onnx_import/model_session.h"
#include "report/estimate.h"
#include "report/estimate_config.h"
#include "report/gpu_catalog.h"

namespace memplan {

inline constexpr const char* kFitSchema = "memplan.fit/1";

struct FitResult {
  bool any_fits = false;     // false: even the smallest value is over budget
  int64_t value = 0;         // the largest fitting value (when any_fits)
  uint64_t bytes_at_value = 0;
  bool next_evaluated = false;  // false when value is the search limit (or the next value overflows)
  uint64_t bytes_at_next = 0;   // bytes(value + 1)
  int evaluations = 0;          // calls of bytes() this search made (values found in a shared memo excluded)
};

// Every value evaluated so far and its bytes; nullopt: bytes() threw ShapeOverflow (counts as not fitting).
using FitMemo = std::map<int64_t, std::optional<uint64_t>>;

// Finds v in [min_value, max_value] with bytes(v) <= budget < bytes(v + 1) (or v = max_value when that fits).
// `bytes` may throw ShapeOverflow for values too large to represent: they count as not fitting.
//
// Exactness. The search holds lo, an evaluated value with bytes(lo) <= budget, and hi, an evaluated value
// above lo that does not fit (or none yet); every probe lies strictly between them (or in (lo, max_value]
// while there is no hi) and replaces one of them, and the search ends only when hi == lo + 1 or lo ==
// max_value. So the answer satisfies the condition on two values that were both actually evaluated, whatever
// order they were probed in: monotonicity is never assumed to conclude, only to choose where to probe.
//
// Using monotonicity to probe. When bytes() is monotone (a larger batch never needs less), the fitting values
// form a prefix and the boundary is unique, so every bracket finds the same answer a search from scratch would.
// The search therefore
//  - starts from the best bracket `memo` already holds: lo = the largest evaluated value that fits, hi = the
//    smallest evaluated value above it that does not (with a memo shared across budgets, a larger budget
//    starts where a smaller one ended, and a smaller one inside the bracket a larger one left);
//  - probes where the line through two evaluated values predicts the boundary (memory is close to affine in
//    the batch), first the value just past the prediction, then the prediction itself: two probes when the
//    line is right;
//  - falls back to bisection whenever an interpolated probe did not halve the bracket, and grows the step at
//    least geometrically while no value is known not to fit: O(log v) probes in the worst case.
// When bytes() is not monotone the answer is still exact, but may be another boundary than a search with a
// different memo would find.
FitResult fit_search(const std::function<uint64_t(int64_t)>& bytes, uint64_t budget, int64_t min_value = 1,
                     int64_t max_value = int64_t{1} << 40, FitMemo* memo = nullptr);

// What to search and how; the defaults are the CLI's.
struct FitSettings {
  std::string search = "batch";        // "batch" binds Bindings::batch; any other name binds that symbolic dim
  double headroom_percent = 0;         // keep this percent of the budget free
  int64_t max_value = int64_t{1} << 20;  // the largest value considered
  int64_t global_batch = 0;            // > 0: also split this global batch into micro-batches (search = batch)
};

// estimate(v) of one model at many values of the searched dimension. The file is read and parsed on the first
// probe and never again (a ModelSession); each probe shapes the parsed model at its value and computes only the totals
// (estimate_totals); the required bytes are remembered in memo(), so that several searches share them: the
// required bytes do not depend on the budget, so one probe serves every GPU of a catalog.
class FitProbe {
 public:
  FitProbe(std::string path, Bindings bindings, std::string search, EstimateOptions options);
  ~FitProbe();

  // estimate_graph(import_model(path, bindings at value), options).required_bytes, byte for byte.
  uint64_t required_bytes(int64_t value);
  // The full estimate at a value; with a budget, also the step run on it (Estimate::at_budget).
  Estimate estimate(int64_t value, std::optional<uint64_t> device_budget = std::nullopt);
  // The first iteration and steady ones after it at a value, on a budget (iterations_on_budget, report/estimate.h).
  std::optional<IterationsAtCapacity> iterations(int64_t value, uint64_t budget_bytes);
  // The remembered totals of the current architecture: a GPU of another compute capability has another cuBLAS
  // workspace, so each architecture keeps its own memo.
  FitMemo& memo() { return memos_[options_.execution.cuda_arch_major]; }
  // Estimates from now on are for this GPU's architecture (apply_gpu_architecture), with that architecture's memo.
  void use_gpu_architecture(const GpuSpec& gpu) { apply_gpu_architecture(gpu, options_); }
  const EstimateOptions& options() const { return options_; }
  const std::string& path() const { return session_.path(); }
  const std::string& search() const { return search_; }
  int files_read() const { return session_.files_read(); }  // 0 before the first probe, then 1

 private:
  std::shared_ptr<const Graph> shape(int64_t value);

  ModelSession session_;
  Bindings bindings_;
  std::string search_;
  EstimateOptions options_;
  std::map<int, FitMemo> memos_;  // by cuda_arch_major
};

// A global batch as micro-batches of at most `max_micro_batch` per GPU and gradient-accumulation steps.
struct GlobalBatchSplit {
  int64_t global_batch = 0, micro_batch = 0, grad_accum = 0;
  int gpus = 1;
};
GlobalBatchSplit split_global_batch(int64_t global_batch, int64_t max_micro_batch, int gpus);

// A training run reaches the steady step through the first iteration, whose cache can leave the steady step
// without room (planner/iterations.h); fit decides on the steady step, then lowers its answer to the largest value
// whose run (the first iteration, then steady ones until the cache repeats) also fits. Training on PyTorch's
// caching allocator only (iterations_on_budget).
struct RunCheck {
  int64_t steady_value = 0;    // the search's answer on the steady step alone (> the answer when lowered)
  int steady_iterations = 0;   // steady iterations the run replayed at the answer
  bool settled = false;        // its cache repeated: every later iteration runs too
};
// Lowers `r` (a fit_search answer on `budget`) until the run fits; nullopt where no run is modelled.
std::optional<RunCheck> check_run(FitProbe& probe, FitResult& r, uint64_t budget, int64_t min_value = 1);

// fit for one budget (given before headroom).
struct FitAnswer {
  std::string model, search, budget_source;
  uint64_t budget_bytes = 0;  // after headroom
  double headroom_percent = 0;
  int64_t max_value = 0;
  FitResult result;
  std::optional<Estimate> at_value;  // the full estimate at result.value, when any_fits
  std::optional<RunCheck> run;       // the first iteration's check (training on PyTorch's allocator)
  std::optional<GlobalBatchSplit> global_batch;
};
FitAnswer fit_budget(FitProbe& probe, const FitSettings& settings, const FitBudget& budget);

// fit for every GPU of a catalog, each at its own architecture (the probe is left at the last GPU's); the searches
// of GPUs of one architecture share one memo (see fit_search).
struct FitTableRow {
  std::string gpu;
  uint64_t memory_bytes = 0, budget_bytes = 0;
  FitResult result;
  std::optional<RunCheck> run;
};
struct FitTable {
  std::string model, search, mode;
  OutsideAllocator outside;       // what every GPU's budget leaves out (report/device_memory.h)
  std::vector<FitTableRow> rows;  // in catalog order
};
FitTable fit_catalog(FitProbe& probe, const FitSettings& settings, const GpuCatalog& catalog,
                     const OutsideAllocator& outside);

// fit as its flags name it, for every front end (the CLI's flags, the Python module's keywords).
struct FitArgs {
  EstimateArgs estimate;  // the model, its bindings (without the searched dimension) and the estimate options
  FitSettings settings;
  // One budget: estimate.gpu (a catalog GPU, of estimate.catalog) or memory (a size, "24GiB"); neither: every GPU
  // of the catalog.
  std::string memory;
};
// Either one budget's answer (gpu or memory given) or the catalog table.
struct FitOutcome {
  std::optional<FitAnswer> answer;
  std::optional<FitTable> table;
  bool limit_broken() const { return answer && !answer->result.any_fits; }  // the CLI exits 1
};
// The arguments must have passed validate_options(..., kFit) (report/option_checks.h: each value, the budget's
// rules, the estimate's options), as the CLI and Python run it first. Checks what needs the search, the catalog,
// the reserve or the model, then searches. Throws InputError.
FitOutcome fit_model(const FitArgs& args);

// The budget less the required bytes at the answer (0 when nothing fits): what is left free at the step's peak.
uint64_t fit_margin(const FitAnswer& a);

nlohmann::ordered_json fit_to_json(const FitAnswer& a);
std::string fit_to_text(const FitAnswer& a);
std::string fit_to_markdown(const FitAnswer& a);
nlohmann::ordered_json fit_table_to_json(const FitTable& t);
std::string fit_table_to_text(const FitTable& t);
std::string fit_table_to_markdown(const FitTable& t);

}  // namespace memplan
