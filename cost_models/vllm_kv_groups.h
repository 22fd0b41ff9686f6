// vLLM's KV cache of a hybrid model, whose attention layers are of several kinds (Gemma 2: sliding and full layers
// alternating; Gemma 3: five sliding to one full), as its hybrid KV cache manager sizes it (vllm/v1/core/
// kv_cache_utils.py at 001cabc1; vllm/v1/kv_cache_interface.py alike). The one rule: cost_models/vllm_engine.h's
// vllm_kv_capacity, a model of one kind (full attention, or every layer over one window), is it for one group.
//
// Grouping (get_kv_cache_groups: the specs differ, so _get_kv_cache_groups_uniform_page_size, every layer's page
// the same): the layers are split by spec (here: by window, 0 for full attention); with n_min and n_max the fewest
// and most layers of one kind, group_size = n_min, or n_max when the release pads a near-even split (VllmRule's
// kv_group_pad_quarters: n_max < 1.25 n_min from 0.12, 1.5 n_min from 0.17.2, padding 12 + 13 to 13 + 13); each
// kind makes cdiv(n, group_size) groups, the last padded. Blocks (get_kv_cache_config_from_groups): group_size
// tensors each shared by one layer of every group, so
//   num_blocks = available // page_size // group_size                           (get_num_blocks)
// with page_size = block_size x one layer's bytes per token. Logged (_report_kv_cache_config):
//   GPU KV cache size = num_blocks // groups x block_size tokens
//   Maximum concurrency = num_blocks / sum over groups of the group's blocks per request
// (get_max_concurrency_for_kv_cache_config: cdiv(group_size x sum of max_memory_usage_bytes, page_size x
// group_size)), a full group's cdiv(max_model_len, block_size) and a sliding one's
// cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1 (max_memory_usage_bytes). vLLM
// starts when its start check's bytes for one request of max_model_len fit the available memory (VllmKvStartCheck:
// every layer's blocks unpadded to 0.13, group_size x page x the first group's from 0.14, x every group's from
// 0.18.1), else it names the longest length whose bytes fit (estimate_max_model_len, from 0.14
// _estimate_max_model_len_from_groups: a binary search over 1..max_model_len). The first-group check of 0.14 to
// 0.18.0 lets a model whose first layer slides start though one full-length request does not fit: the answer
// then starts with a maximum concurrency below 1.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_models/vllm_engine.h"

namespace memplan {

struct VllmKvGroup {
  int64_t window = 0;  // the group's sliding window; 0: full attention
  int64_t layers = 0;  // the model's layers in it (group_size less the padding)
};
struct VllmKvGrouping {
  int64_t group_size = 0;
  std::vector<VllmKvGroup> groups;  // by kind in the order of each kind's first layer, then within a kind
  int64_t padding_layers = 0;       // slots no layer fills (vLLM's "Add N padding layers" warning)
};
// `windows`: every attention layer's window in layer order (0: full attention); `pad_quarters` the rule's
// kv_group_pad_quarters. Every layer one kind: one group of them all (_get_kv_cache_groups_uniform_spec).
VllmKvGrouping vllm_kv_groups(const std::vector<int64_t>& windows, int pad_quarters);

// The blocks one request of `max_model_len` tokens holds at most over the groups.
int64_t vllm_grouped_blocks_per_request(const VllmKvGrouping& g, int64_t block_size, int64_t max_model_len,
                                        int64_t max_num_batched_tokens);

// The cache `available` bytes hold with `layer_bytes_per_token` bytes of one layer a token (every layer the same:
// vLLM's uniform page size), as vLLM logs it and whether it starts by `check` (VllmKvCapacity's fields;
// blocks_per_request the sum above).
VllmKvCapacity vllm_grouped_kv_capacity(int64_t available, const VllmKvGrouping& g, int64_t block_size,
                                        uint64_t layer_bytes_per_token, int64_t max_model_len,
                                        int64_t max_num_batched_tokens, VllmKvStartCheck check);

}  // namespace memplan
