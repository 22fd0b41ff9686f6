// One estimate: a shaped graph through a cost model and the planner, assembled into the numbers a user reads.
// The totals are the planner's measure() of the program on the runtime's allocator (planner/measure.h, with
// cost_models' runtime_model(...).allocator): total_bytes = its reserved bytes + fixed (never the CUDA context), and
// required_bytes = its required bytes + fixed, what the step needs of a device: what fit and check's budget,
// --checkpoint auto and the busiest pipeline stage all compare.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cost_models/cost_model.h"
#include "cost_models/kv_cache.h"
#include "onnx_import/graph.h"
#include "planner/iterations.h"
#include "planner/program.h"
#include "report/cudnn_workspace.h"
#include "report/device_memory.h"

namespace memplan {

enum class Mode { Inference, Training };

// The runtime an estimate is for when none is chosen: ExecutionOptions' (cost_models/runtime.h), PyTorch eager,
// what most users run; the CLI takes its --runtime default from here (runtime_name(kDefaultRuntime)).
inline constexpr Runtime kDefaultRuntime = ExecutionOptions{}.runtime;

struct EstimateOptions {
  Mode mode = Mode::Inference;
  ExecutionOptions execution;  // how the model runs, in either mode: runtime, attention, --tp, ...
  InferenceOptions inference;  // --mode inference's own
  TrainingOptions training;    // --mode train's own
  bool memory_schedule = false;  // --schedule memory: a memory-aware topological order (inference)
  // When set, the step is also run at this device budget (memory outside the CUDA context): Estimate::at_budget.
  std::optional<uint64_t> device_budget;
  int top_tensors = 8;           // how many of the largest live tensors at the peak to list
  // torch.backends.cudnn.benchmark (--cudnn-benchmark, on by default: most training scripts set it). The cuDNN
  // workspace is counted at its lower end either way (report/cudnn_workspace.h: PyTorch never fails a step on
  // it); with benchmark, the report also says what the benchmark may take and how the first iteration differs.
  bool cudnn_benchmark = true;
  // Memory outside the allocator (report/device_memory.h): the CUDA context's share (the catalog's context reserve
  // or --reserve, set by to_estimate_options) and NCCL's channel count (--nccl-channels).
  uint64_t context_bytes = 0;
  std::string context_source = "catalog";
  int nccl_channels = kDefaultNcclChannels;
};

// What is in memory at the peak, by what it is. Sums to total_bytes.
struct Breakdown {
  uint64_t weights = 0;
  uint64_t activations = 0;        // node outputs, inputs, saved-for-backward tensors
  uint64_t activation_grads = 0;
  uint64_t gradients = 0;          // parameter gradients
  uint64_t optimizer_states = 0;
  uint64_t workspace = 0;
  uint64_t allocator_rounding = 0; // allocated − exact bytes: block rounding and unsplit blocks (pytorch, ort)
  uint64_t allocator_overhead = 0; // reserved − allocated (pytorch, ort); arena − live bytes (ideal)
  uint64_t fixed = 0;              // runtime costs outside the allocator (not the CUDA context)
};

// The step on a device budget: whether it runs, and what the allocator does to run it there.
struct AtBudget {
  uint64_t budget_bytes = 0;
  bool runs = false;
  // Cache flushes on the way (pytorch: failed cudaMallocs retried after release_cached_blocks, counted as
  // memory_stats()["num_alloc_retries"]); each synchronises the device, so a step that needs them is slower.
  int64_t alloc_retries = 0;
  uint64_t reserved_bytes = 0;    // peak reserved there, + fixed
  std::string out_of_memory_at;   // the buffer that did not fit, when it does not run
};

struct LiveTensor {
  std::string name;
  std::string op;        // the op of the step that produced it ("" for inputs and resident buffers)
  Category category = Category::Activation;
  uint64_t bytes = 0;
};

// The training step's facts a report shows (inference: none), the cost model's handed to the estimate's program
// and from there to the estimate.
struct TrainingFacts {
  double recompute_percent = 0;
  std::vector<std::string> checkpoint_boundaries;
  uint64_t param_bytes = 0, grad_bytes = 0, optimizer_state_bytes = 0;
  int lora_adapted_layers = 0;        // --lora-rank: Linear layers given adapters
  int lora_adapted_parameters = 0;    // --lora-rank: stacked experts' parameters (PEFT's target_parameters)
  uint64_t lora_parameters = 0;       // --lora-rank: adapter parameters (elements)
  uint64_t frozen_stored_bytes = 0;   // --frozen-dtype: the re-stored frozen weights' bytes (0: none)
  uint64_t paged_state_bytes = 0;     // paged bitsandbytes optimizers: states in managed memory, not in the figures
  uint64_t deepspeed_host_bytes = 0;  // --deepspeed offload_optimizer cpu: host memory, not in the figures
  uint64_t deepspeed_param_host_bytes = 0;  // --deepspeed offload_param cpu/nvme: pinned host memory, not in the figures
  uint64_t deepspeed_nvme_bytes = 0;  // --deepspeed offload_param/offload_optimizer nvme: swap files, not in the figures
  uint64_t offloaded_host_bytes = 0;  // --offload-activations: pinned host memory, not in the figures
  uint64_t fsdp_offload_host_bytes = 0;  // --fsdp-cpu-offload: host memory, not in the figures
  std::vector<PipelineStageFacts> pipeline_stages;  // --pp: every stage (the estimate is the busiest's)
  int pipeline_busiest_stage = -1;
};

// The figures a run is watched by (docs/json.md): total_bytes (the headline: reserved + fixed), allocated_bytes
// (torch.cuda.max_memory_allocated), reserved_bytes (max_memory_reserved), device_bytes (what nvidia-smi shows).
// The ideal runtime has no allocator: it reports Total only.
enum class Metric { Total, Allocated, Reserved, Device };

struct Estimate : TrainingFacts {
  std::string model;
  Mode mode = Mode::Inference;
  Runtime runtime = kDefaultRuntime;
  uint64_t total_bytes = 0;
  uint64_t required_bytes = 0;     // the least device memory (outside the CUDA context) the step runs in
  std::optional<AtBudget> at_budget;  // with EstimateOptions::device_budget
  Breakdown breakdown;
  uint64_t allocated_bytes = 0;    // peak allocated (pytorch: max_memory_allocated; ort: MaxInUse)
  uint64_t reserved_bytes = 0;     // peak reserved (pytorch: max_memory_reserved; ort: TotalAllocated)
  // What the GPU shows used (nvidia-smi): total_bytes + outside.total(), the third metric beside allocated and
  // reserved (report/device_memory.h).
  uint64_t device_bytes = 0;
  OutsideAllocator outside;
  uint64_t lower_bound_bytes = 0;  // peak live bytes of the schedule, resident excluded
  uint64_t resident_bytes = 0;
  uint64_t arena_bytes = 0;        // best static arena for the schedule (alignment of the runtime)
  std::string packing_algorithm;
  // Both orders' lower bounds; schedule_used says which one the estimate is for.
  uint64_t model_order_peak_bytes = 0;
  uint64_t memory_order_peak_bytes = 0;  // 0 when not computed
  std::string schedule_used = "model";
  // Where the peak happens.
  int32_t peak_step = -1;          // -1: before the first step
  std::string peak_step_name;
  std::string peak_op;
  Phase peak_phase = Phase::Forward;
  int32_t num_steps = 0;
  std::vector<LiveTensor> top_live;
  // Training only (and TrainingFacts').
  std::optional<uint64_t> first_iteration_total_bytes;
  int tp = 1;                         // --tp: the figures are one GPU's of the tensor-parallel group (rank 0)
  bool sequence_parallel = false;     // --sequence-parallel
  // pytorch: the cuDNN convolution workspace's range (report/cudnn_workspace.h), when the program convolves.
  std::optional<CudnnWorkspaceRange> cudnn_workspace;
  // Memory over the schedule, for timelines: exact live bytes per category at each step (resident included),
  // and the runtime's allocated/reserved per step where it has them.
  std::vector<std::array<uint64_t, kNumCategories>> per_step_by_category;
  std::vector<uint64_t> allocated_per_step, reserved_per_step;
  std::vector<std::string> step_names;
  std::vector<std::string> notes;
  // A decoder with a KV cache (report/kv_cache.h), inference: its prefill and decode steps apart.
  std::optional<KvPhases> kv_phases;
};

Estimate estimate_graph(const Graph& graph, const EstimateOptions& options);

// The first iteration, then steady ones until the cache repeats, on a device budget (planner/iterations.h): the run
// a training job makes, where fit decides on the steady step alone. For training on PyTorch's caching allocator
// without expandable segments; nullopt elsewhere (inference has no first iteration; ideal, onnxruntime and
// expandable segments are other allocators).
// The estimate's figure for `metric`.
uint64_t metric_bytes(const Estimate& e, Metric metric);

std::optional<IterationsAtCapacity> iterations_on_budget(const Graph& graph, const EstimateOptions& options,
                                                         uint64_t budget_bytes);

// What the options' GPU holds outside the allocator (report/device_memory.h): the CUDA context as the options
// say it, and one NCCL communicator per parallel group it is in: the data-parallel group all-reduces (DDP) or
// reduce-scatters and all-gathers (ZeRO, FSDP) over --gpus in training; the tensor-parallel group over --tp.
OutsideAllocator outside_allocator(const EstimateOptions& options);

// estimate_graph(graph, options)'s total_bytes and required_bytes, byte for byte, without what only the
// report needs: the first training iteration, the packing of runtimes whose total does not depend on it
// (pytorch), the peak's location, the largest tensors and the per-step series. What `fit` computes at each
// value it probes.
struct EstimateTotals {
  uint64_t total_bytes = 0;
  uint64_t required_bytes = 0;
};
EstimateTotals estimate_totals(const Graph& graph, const EstimateOptions& options);

// The program an estimate measures: the cost model's program for the mode (training: the steady-state
// iteration), in the order --schedule asks for. estimate and plan both take their program from here.
struct EstimateProgram : TrainingFacts {
  Program program;
  uint64_t fixed_bytes = 0;        // the cost model's fixed runtime costs
  std::vector<std::string> notes;  // the cost model's notes, then the schedule's
  bool memory_order_computed = false;
  uint64_t model_order_peak_bytes = 0;   // set when memory_order_computed
  uint64_t memory_order_peak_bytes = 0;  // set when memory_order_computed
  std::string schedule_used = "model";
};
// Throws InputError for options that do not go together (--mode train with onnxruntime or --schedule memory).
EstimateProgram build_estimate_program(const Graph& graph, const EstimateOptions& options);

const char* runtime_name(Runtime r);
const char* mode_name(Mode m);

}  // namespace memplan
