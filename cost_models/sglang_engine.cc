#include "cost_models/sglang_engine.h"

#include <algorithm>
#include <cmath>

namespace memplan {

SglangGpuDefaults sglang_gpu_defaults(double gpu_mem_mib, int tp) {
  // server_args.py _handle_gpu_memory_settings: the CUDA buckets (the NPU ones are not memplan's).
  const double gib = 1024;
  if (gpu_mem_mib < 20 * gib) return {2048, 8};                    // T4, 4080
  if (gpu_mem_mib < 35 * gib) return {2048, tp < 4 ? 24 : 80};     // A10, 4090, 5090
  if (gpu_mem_mib < 60 * gib) return {4096, tp < 4 ? 32 : 160};    // A100 40GB, L40
  if (gpu_mem_mib < 160 * gib) return {8192, tp < 4 ? 256 : 512};  // H100, A100 80GB, H20, H200
  return {16384, 512};                                             // B200, MI300
}

SglangMemFraction sglang_default_mem_fraction(double gpu_mem_mib, int64_t chunked_prefill_size,
                                              int64_t cuda_graph_max_bs, int tp) {
  SglangMemFraction f;
  // 512 MiB of constant metadata, 1.5 MiB a prefill token, 2 MiB a CUDA-graph batch size, 1 GiB per 8 ranks.
  f.reserved_mib = 512 + static_cast<double>(std::max<int64_t>(chunked_prefill_size, 2048)) * 1.5 +
                   static_cast<double>(cuda_graph_max_bs) * 2 + static_cast<double>(tp) / 8 * 1024;
  if (gpu_mem_mib > 60 * 1024) f.reserved_mib = std::max(f.reserved_mib, 10.0 * 1024);
  // Python's round(x, 3) (the ties it would round to even do not arise from these sums).
  f.mem_fraction_static = std::round((gpu_mem_mib - f.reserved_mib) / gpu_mem_mib * 1000) / 1000;
  return f;
}

SglangTokenPool sglang_token_pool(uint64_t free_before_weights, uint64_t weights, double mem_fraction_static,
                                  uint64_t cell_size, int64_t max_total_tokens, int64_t page_size, int64_t context_len) {
  SglangTokenPool p;
  const double gib = static_cast<double>(uint64_t{1} << 30);
  // get_available_gpu_memory returns free bytes / 2^30 as a Python float; the same doubles here.
  p.total_gib = static_cast<double>(free_before_weights) / gib;
  const uint64_t after = free_before_weights > weights ? free_before_weights - weights : 0;
  p.available_gib = static_cast<double>(after) / gib;
  p.rest_gib = p.available_gib - p.total_gib * (1 - mem_fraction_static);
  // int(rest * (1 << 30)) // cell_size: int() truncates toward zero, // floors (a negative rest stays negative).
  const int64_t rest_bytes = static_cast<int64_t>(std::trunc(p.rest_gib * gib));
  const int64_t cell = static_cast<int64_t>(cell_size);
  p.profiled_tokens = rest_bytes >= 0 ? rest_bytes / cell : -((-rest_bytes + cell - 1) / cell);
  if (p.profiled_tokens > 0 && context_len > 0)
    p.req_to_token_pool_size = std::min<int64_t>(
        std::max<int64_t>(static_cast<int64_t>(static_cast<double>(p.profiled_tokens) / static_cast<double>(context_len) * 512),
                          2048),
        4096);
  int64_t tokens = p.profiled_tokens;
  if (max_total_tokens > 0) tokens = std::min(tokens, max_total_tokens);
  tokens = tokens >= 0 ? tokens / page_size * page_size : -((-tokens + page_size - 1) / page_size) * page_size;
  p.max_total_num_tokens = tokens;
  p.max_running_requests = tokens > 0 ? std::min(tokens / 2, p.req_to_token_pool_size) : 0;
  p.starts = tokens > 0;
  if (!p.starts)
    p.refusal = "Not enough memory. Please try to increase --mem-fraction-static (the weights take more than "
                "mem_fraction_static of the free memory leaves the pool)";
  return p;
}

}  // namespace memplan
