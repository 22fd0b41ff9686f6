#include "cost_models/vllm_kv_groups.h"

#include <algorithm>
#include <map>

#include "onnx_import/checked.h"

namespace memplan {

VllmKvGrouping vllm_kv_groups(const std::vector<int64_t>& windows, int pad_quarters) {
  VllmKvGrouping g;
  if (windows.empty()) return g;
  // same_type_layers: the kinds in the order of their first layer, each with its layers in order.
  std::vector<int64_t> kinds;
  std::map<int64_t, std::vector<int64_t>> layers;
  for (size_t l = 0; l < windows.size(); ++l) {
    if (!layers.count(windows[l])) kinds.push_back(windows[l]);
    layers[windows[l]].push_back(int64_t(l));
  }
  if (kinds.size() == 1) {  // one spec for all: one group of every layer
    g.group_size = int64_t(windows.size());
    g.groups.push_back({kinds[0], g.group_size});
    return g;
  }
  int64_t fewest = int64_t(windows.size()), most = 0;
  for (const auto& [window, ls] : layers) {
    fewest = std::min(fewest, int64_t(ls.size()));
    most = std::max(most, int64_t(ls.size()));
  }
  // max_num_layers < min_num_layers * 1.25 (or 1.5), in integers: 4 x most < 5 (or 6) x fewest.
  g.group_size = 4 * most < pad_quarters * fewest ? most : fewest;
  for (int64_t window : kinds) {
    const int64_t n = int64_t(layers[window].size());
    const int64_t count = (n + g.group_size - 1) / g.group_size;
    // layers[i::num_groups] for the i-th group: group i holds the layers i, i + count, ... of the kind.
    for (int64_t i = 0; i < count; ++i) g.groups.push_back({window, (n - i + count - 1) / count});
    g.padding_layers += count * g.group_size - n;
  }
  return g;
}

int64_t vllm_grouped_blocks_per_request(const VllmKvGrouping& g, int64_t block_size, int64_t max_model_len,
                                        int64_t max_num_batched_tokens) {
  const PagedKvCache cache{block_size, 1};
  int64_t blocks = 0;
  for (const VllmKvGroup& group : g.groups)
    blocks += vllm_blocks_per_request(cache, max_model_len, VllmSlidingWindow{group.window, max_num_batched_tokens});
  return blocks;
}

namespace {

// The pages vLLM's start check asks for one request of `len` tokens (VllmKvStartCheck).
uint64_t start_check_pages(const VllmKvGrouping& g, int64_t block_size, int64_t len, int64_t max_num_batched_tokens,
                           VllmKvStartCheck check) {
  const PagedKvCache cache{block_size, 1};
  auto blocks = [&](const VllmKvGroup& group) {
    return static_cast<uint64_t>(
        vllm_blocks_per_request(cache, len, VllmSlidingWindow{group.window, max_num_batched_tokens}));
  };
  uint64_t pages = 0;
  switch (check) {
    case VllmKvStartCheck::EveryLayer:  // max_memory_usage_bytes summed over the layers: no padding slot
      for (const VllmKvGroup& group : g.groups) pages += static_cast<uint64_t>(group.layers) * blocks(group);
      return pages;
    case VllmKvStartCheck::FirstGroup:
      return checked_mul(static_cast<uint64_t>(g.group_size), blocks(g.groups.front()), "KV start check pages");
    case VllmKvStartCheck::EveryGroup:
      for (const VllmKvGroup& group : g.groups) pages += blocks(group);
      return checked_mul(static_cast<uint64_t>(g.group_size), pages, "KV start check pages");
  }
  return pages;
}

}  // namespace

VllmKvCapacity vllm_grouped_kv_capacity(int64_t available, const VllmKvGrouping& g, int64_t block_size,
                                        uint64_t layer_bytes_per_token, int64_t max_model_len,
                                        int64_t max_num_batched_tokens, VllmKvStartCheck check) {
  VllmKvCapacity c;
  const uint64_t page = checked_mul(static_cast<uint64_t>(block_size), layer_bytes_per_token, "KV page bytes");
  const uint64_t pool_block = checked_mul(page, static_cast<uint64_t>(g.group_size), "KV block bytes");
  c.blocks_per_request = vllm_grouped_blocks_per_request(g, block_size, max_model_len, max_num_batched_tokens);
  auto needs = [&](int64_t len) {
    return checked_mul(page, start_check_pages(g, block_size, len, max_num_batched_tokens, check), "KV bytes");
  };
  c.start_check_bytes = needs(max_model_len);
  if (available <= 0) {
    c.refusal = "No available memory for the cache blocks";
    return c;
  }
  c.num_blocks = static_cast<int64_t>(static_cast<uint64_t>(available) / pool_block);
  c.tokens = c.num_blocks / static_cast<int64_t>(g.groups.size()) * block_size;
  c.max_concurrency = static_cast<double>(c.num_blocks) / static_cast<double>(c.blocks_per_request);
  if (c.start_check_bytes > static_cast<uint64_t>(available)) {
    // The longest length whose bytes fit: they grow with the length, so a binary search as vLLM's.
    int64_t lo = 1, hi = max_model_len, best = 0;
    while (lo <= hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (needs(mid) <= static_cast<uint64_t>(available)) {
        best = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    c.estimated_max_model_len = best;
    c.refusal = "one request of max_model_len tokens needs more KV cache than is available";
    return c;
  }
  c.starts = true;
  return c;
}

}  // namespace memplan
