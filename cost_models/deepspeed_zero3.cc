#include "cost_models/deepspeed_zero3.h"

#include <algorithm>

#include "cost_models/deepspeed_zero3_schedule.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

uint64_t zero3_partition_numel(uint64_t numel, int gpus) {
  precondition(gpus >= 1, "ZeRO-3 over no GPU");
  const uint64_t n = static_cast<uint64_t>(gpus);
  return numel / n + (numel % n != 0);
}

std::vector<bool> zero3_persistent(const std::vector<uint64_t>& numel, uint64_t threshold, uint64_t model_threshold) {
  std::vector<bool> out(numel.size(), false);
  uint64_t total = 0;
  for (size_t i = 0; i < numel.size(); ++i) {
    // `if param.ds_numel + total_persistent_parameters > model_threshold: continue`
    if (numel[i] > model_threshold || total > model_threshold - numel[i]) continue;
    if (numel[i] <= threshold) {
      out[i] = true;
      total += numel[i];
    }
  }
  return out;
}

std::vector<int32_t> zero3_sub_group_of(const std::vector<uint64_t>& partition_numel, uint64_t sub_group_size) {
  uint64_t all = 0;
  for (uint64_t e : partition_numel) all = checked_add(all, e, "ZeRO-3 parameter group");
  std::vector<int32_t> out(partition_numel.size(), 0);
  if (sub_group_size >= all) return out;
  uint64_t local = 0;
  int32_t group = 0;
  for (size_t i = 0; i < partition_numel.size(); ++i) {
    out[i] = group;
    local += partition_numel[i];
    if (local >= sub_group_size) {
      ++group;
      local = 0;
    }
  }
  return out;
}

std::vector<uint64_t> zero3_sub_groups(const std::vector<uint64_t>& partition_numel, uint64_t sub_group_size) {
  const std::vector<int32_t> of = zero3_sub_group_of(partition_numel, sub_group_size);
  std::vector<uint64_t> out;
  for (size_t i = 0; i < of.size(); ++i) {
    if (static_cast<size_t>(of[i]) == out.size()) out.push_back(0);
    out[of[i]] += partition_numel[i];
  }
  return out;
}

Zero3Gather zero3_gather(const std::vector<uint64_t>& numel, int gpus) {
  Zero3Gather g;
  const uint64_t n = static_cast<uint64_t>(gpus);
  if (numel.size() == 1) {
    g.gathered.push_back(checked_mul(zero3_partition_numel(numel[0], gpus), n, "ZeRO-3 gather"));
    return g;
  }
  uint64_t partition = 0;
  for (uint64_t e : numel) {
    partition = checked_add(partition, zero3_partition_numel(e, gpus), "ZeRO-3 gather");
    g.gathered.push_back(e);
  }
  g.transient = checked_mul(partition, n, "ZeRO-3 gather");
  return g;
}

uint64_t zero3_reduce_scatter_elements(const std::vector<uint64_t>& numel, int gpus) {
  const uint64_t n = static_cast<uint64_t>(gpus);
  if (numel.size() == 1 && numel[0] % n == 0) return 0;  // `tensors[0].view(-1)`
  uint64_t partition = 0;
  for (uint64_t e : numel) partition = checked_add(partition, zero3_partition_numel(e, gpus), "ZeRO-3 reduce-scatter");
  return checked_mul(partition, n, "ZeRO-3 reduce-scatter");
}

uint64_t zero3_host_bytes(const std::vector<uint64_t>& sub_groups, uint64_t grad_partition_bytes, int optimizer_states) {
  uint64_t elements = 0;
  for (uint64_t e : sub_groups) elements = checked_add(elements, e, "DeepSpeed host bytes");
  const uint64_t fp32 = checked_mul(elements, 4, "DeepSpeed host bytes");
  return checked_add(checked_mul(fp32, 2 + static_cast<uint64_t>(optimizer_states), "DeepSpeed host bytes"),
                     grad_partition_bytes, "DeepSpeed host bytes");
}

Zero3OffloadTransients zero3_offload_transients(uint64_t partition, uint64_t grad_element_bytes) {
  constexpr uint64_t kNormChunk = 250000000;  // _constant_buffered_norm2(input, buffer_size=250000000)
  Zero3OffloadTransients t;
  t.gpu_copy = checked_mul(partition, grad_element_bytes, "DeepSpeed bytes");
  t.norm_double = checked_mul(std::min(partition, kNormChunk), 8, "DeepSpeed bytes");
  t.fp32_cast = grad_element_bytes == 4 ? 0 : checked_mul(partition, 4, "DeepSpeed bytes");
  return t;
}

std::vector<std::vector<int32_t>> zero3_releases(const std::vector<std::vector<int32_t>>& trace,
                                                  const std::vector<uint64_t>& numel, const std::vector<bool>& persistent,
                                                  uint64_t max_reuse_distance) {
  // Each fetch followed by its release, no prefetch: the coordinator's rules (deepspeed_zero3_schedule.h) reduce to
  // the reuse-distance scan.
  std::vector<Zero3Call> calls;
  for (const std::vector<int32_t>& params : trace) {
    calls.push_back({false, params});
    calls.push_back({true, params});
  }
  const Zero3Schedule s = zero3_schedule(calls, numel, persistent, {0, 0, max_reuse_distance});
  std::vector<std::vector<int32_t>> out;
  for (size_t c = 1; c < calls.size(); c += 2) out.push_back(s.actions[c].released);
  return out;
}

}  // namespace memplan
