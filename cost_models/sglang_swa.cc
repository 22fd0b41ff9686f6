#include "cost_models/sglang_swa.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace memplan {

SglangSwaSplit sglang_swa_split(int64_t max_total_num_tokens, uint64_t full_per_token, int64_t full_layers,
                                uint64_t swa_per_token, int64_t swa_layers, double swa_full_tokens_ratio,
                                int64_t page_size) {
  if (swa_layers <= 0 || page_size <= 0 || full_layers < 0)
    throw std::logic_error("sglang_swa_split: a hybrid SWA model has at least one windowed layer");
  SglangSwaSplit s;
  auto align = [&](int64_t x) { return x >= 0 ? x / page_size * page_size : -((-x + page_size - 1) / page_size) * page_size; };
  if (full_layers == 0) {  // "Use sliding window memory pool (all SWA)"
    s.swa_layer_tokens = align(max_total_num_tokens);
  } else {
    const int64_t tokens = max_total_num_tokens > 0 ? max_total_num_tokens : 0;
    s.total_memory = static_cast<uint64_t>(tokens) * (full_per_token * static_cast<uint64_t>(full_layers) +
                                                      swa_per_token * static_cast<uint64_t>(swa_layers));
    s.denominator = static_cast<double>(full_per_token * static_cast<uint64_t>(full_layers)) +
                    swa_full_tokens_ratio * static_cast<double>(swa_per_token) * static_cast<double>(swa_layers);
    if (!(s.denominator > 0)) throw std::logic_error("sglang_swa_split: denominator not positive");
    // Python's int(): truncation toward zero of the float quotient and product.
    const int64_t full = static_cast<int64_t>(std::trunc(static_cast<double>(s.total_memory) / s.denominator));
    const int64_t swa = static_cast<int64_t>(std::trunc(static_cast<double>(full) * swa_full_tokens_ratio));
    s.full_layer_tokens = align(full);
    s.swa_layer_tokens = align(swa);
  }
  s.index_mapping_bytes = static_cast<uint64_t>(std::max<int64_t>(s.full_layer_tokens, 0) + page_size + 1) * 8;
  return s;
}

SglangSwaSplit sglang_hybrid_swa_pool(SglangTokenPool& pool, uint64_t per_layer_per_token, int64_t full_layers,
                                      int64_t swa_layers, double swa_full_tokens_ratio, int64_t page_size) {
  const SglangSwaSplit s = sglang_swa_split(pool.max_total_num_tokens, per_layer_per_token, full_layers,
                                            per_layer_per_token, swa_layers, swa_full_tokens_ratio, page_size);
  pool.max_total_num_tokens = full_layers > 0 ? s.full_layer_tokens : s.swa_layer_tokens;
  pool.max_running_requests =
      pool.max_total_num_tokens > 0 ? std::min(pool.max_total_num_tokens / 2, pool.req_to_token_pool_size) : 0;
  pool.starts = pool.max_total_num_tokens > 0;
  if (!pool.starts && pool.refusal.empty())
    pool.refusal = "Not enough memory. Please try to increase --mem-fraction-static (the hybrid split leaves no whole "
                   "page of full-layer tokens)";
  return s;
}

SglangSwaConcurrency sglang_swa_concurrency(const SglangSwaSplit& split, int64_t full_layers, int64_t context,
                                            int64_t sliding_window, int64_t page_size) {
  SglangSwaConcurrency c;
  if (context <= 0 || page_size <= 0) return c;
  const int64_t pages_per_request = (context + page_size - 1) / page_size;
  const int64_t full_pages = (full_layers > 0 ? split.full_layer_tokens : split.swa_layer_tokens) / page_size;
  c.requests = static_cast<double>(full_pages) / static_cast<double>(pages_per_request);
  c.whole_requests = full_pages / pages_per_request;
  if (context <= sliding_window && full_layers > 0) {
    const int64_t swa_pages = split.swa_layer_tokens / page_size;
    c.requests = std::min(c.requests, static_cast<double>(swa_pages) / static_cast<double>(pages_per_request));
    c.whole_requests = std::min(c.whole_requests, swa_pages / pages_per_request);
  }
  return c;
}

std::string sglang_swa_print(const SglangSwaSplit& split, int64_t full_layers) {
  return full_layers > 0 ? "Use sliding window memory pool. full_layer_tokens=" + std::to_string(split.full_layer_tokens) +
                               ", swa_layer_tokens=" + std::to_string(split.swa_layer_tokens)
                         : "Use sliding window memory pool (all SWA). swa_layer_tokens=" +
                               std::to_string(split.swa_layer_tokens);
}

uint64_t sglang_swa_pool_bytes(const SglangSwaSplit& split, uint64_t per_layer_per_token, int64_t full_layers,
                               int64_t swa_layers) {
  const auto n = [](int64_t x) { return static_cast<uint64_t>(std::max<int64_t>(x, 0)); };
  return per_layer_per_token * (n(split.full_layer_tokens) * n(full_layers) + n(split.swa_layer_tokens) * n(swa_layers));
}

}  // namespace memplan
