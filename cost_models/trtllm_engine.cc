#include "cost_models/trtllm_engine.h"

#include <cmath>

#include "onnx_import/checked.h"

namespace memplan {
namespace {

// Python's float // float (Objects/floatobject.c float_floor_div, via fmod), which floor(a / b) can miss by one.
double python_floor_div(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return 0;
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

}  // namespace

TrtllmKvCache trtllm_kv_cache(uint64_t total, uint64_t weights, uint64_t activation_peak, uint64_t non_torch,
                              double free_gpu_memory_fraction, uint64_t kv_per_token, int64_t tokens_per_block) {
  TrtllmKvCache c;
  c.peak_memory = checked_add(checked_add(weights, activation_peak, "peak bytes"), non_torch, "peak bytes");
  // (total_gpu_memory - peak_memory + tmp kv) x fraction: the temporary cache is in the peak and added back, so it
  // cancels; Python computes it in floats (ints times a float), as here.
  c.available_bytes =
      (static_cast<double>(total) - static_cast<double>(c.peak_memory)) * free_gpu_memory_fraction;
  // int(available_kv_mem // kv_size_per_token), then max(max_tokens, 0).
  const double tokens = python_floor_div(c.available_bytes, static_cast<double>(kv_per_token));
  c.max_tokens = tokens > 0 ? static_cast<int64_t>(tokens) : 0;
  c.blocks = c.max_tokens / tokens_per_block;
  c.tokens = c.blocks * tokens_per_block;
  c.starts = c.blocks > 0;
  return c;
}

}  // namespace memplan
