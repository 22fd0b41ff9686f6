// The GPU catalog (report/gpu_catalog.json, compiled in; --catalog FILE replaces it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memplan {

struct GpuSpec {
  std::string name;
  uint64_t memory_bytes = 0;  // what cudaMemGetInfo reports as total
  std::string vendor;
  std::string source;
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
GpuCatalog parse_gpu_catalog(const std::string& json_text, const std::string& origin);

}  // namespace memplan
