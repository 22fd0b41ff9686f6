// The GPU catalog (report/gpu_catalog.json, compiled in; --catalog FILE replaces it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/device_memory.h"

namespace memplan {

struct EstimateOptions;

struct GpuSpec {
  std::string name;
  uint64_t memory_bytes = 0;  // what cudaMemGetInfo reports as total (see memory_kind)
  std::string vendor;
  std::string memory_kind;    // "cuda": a published CUDA total; "nvidia-smi" / "rocm-smi": the tool's total (upper bound)
  std::string memory_source;
  int cc_major = 0, cc_minor = 0;  // compute capability, as torch.cuda.get_device_capability reports it
  std::string compute_capability_source;
  int multiprocessors = 0;  // what cudaDeviceProp.multiProcessorCount reports (ROCm: compute units); 0: not given
  std::string multiprocessors_source;
};

struct GpuCatalog {
  uint64_t context_reserve_bytes = 0;  // memory outside any allocator (CUDA context, kernels)
  std::vector<GpuSpec> gpus;           // in file order

  // Case-insensitive; also accepts names without the dash ("h100-80gb", "RTX4090"). Throws InputError
  // listing the known names.
  const GpuSpec& find(const std::string& name) const;
};

GpuCatalog builtin_gpu_catalog();
GpuCatalog load_gpu_catalog(const std::string& path);  // same schema as report/gpu_catalog.json
// path empty: the built-in catalog; else load_gpu_catalog(path) (--catalog).
GpuCatalog gpu_catalog_from(const std::string& path);
GpuCatalog parse_gpu_catalog(const std::string& json_text, const std::string& origin);

// Budgets (fit, serve, and estimate's --gpu). A GPU's is its memory minus the reserve outside any allocator
// (the CUDA context).
struct FitBudget {
  uint64_t bytes = 0;
  std::string source;  // for people: "A100-80GB (80.0 GiB - 1.00 GiB context reserve)"
};
FitBudget gpu_budget(const GpuSpec& gpu, uint64_t reserve_bytes);
// Its memory less all it holds outside the allocator (report/device_memory.h): the context and NCCL's buffers.
FitBudget gpu_budget(const GpuSpec& gpu, const OutsideAllocator& outside);
uint64_t apply_headroom(uint64_t budget, double headroom_percent);

// The one place a GPU's architecture reaches the cost model: sets the compute capability the
// inference and training options use (PyTorch's cuBLAS workspace size depends on it).
void apply_gpu_architecture(const GpuSpec& gpu, EstimateOptions& options);

}  // namespace memplan
