// A decoder's KV cache, found in the model by structure: graph inputs (past keys and values) that have a graph
// output of the same per-token shape one axis longer by the new tokens (present = Concat(past, new) on that
// axis, as Hugging Face's DynamicCache.update writes it with torch.cat, or a fused attention op's present
// output). Names are not read, so optimum's past_key_values.{i}.key / present.{i}.key, ORT GenAI's and any other
// naming are found alike.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cost_models/cost_model.h"
#include "onnx_import/import.h"

namespace memplan {

struct KvCache {
  std::string cached_dim;  // the symbolic dimension that counts cached tokens (past_sequence_length)
  std::string new_dim;     // the one that counts the step's new tokens (sequence_length)
  std::vector<std::pair<std::string, std::string>> pairs;  // (past input, present output), in input order
  // Bytes of one more cached token of one sequence, over every past input, in the estimate's storage dtype
  // (--dtype: cost_models/graph_facts.h storage_dtype). 2 x layers x kv_heads x head_dim x bytes per element.
  uint64_t bytes_per_token = 0;
  // Every tensor of the cache (past inputs and present outputs), what EstimateOptions::held_outside takes.
  std::vector<std::string> tensors() const;
};

// Finds the cache of `model` (at `path`, for messages). `user` are the user's bindings (--dim); every other
// symbolic dimension of the inputs is probed at small values, the leading ones as the batch (1).
// `cached_dim`: --kv-dim, the dimension to take when several are cached ("": find it). Throws InputError when
// the model has no past/present pair, when several dimensions qualify and none is named, when --kv-dim names
// no dimension of the inputs or one without a cache, and when no dimension of new tokens is found.
KvCache find_kv_cache(const ReadModel& model, const std::string& path, const Bindings& user,
                      const std::string& cached_dim, DType float_dtype);

// The bindings of one step: user's, the batch, `cached` tokens in the cache and `fresh` new tokens.
Bindings kv_step_bindings(const Bindings& user, const KvCache& kv, int64_t batch, int64_t cached, int64_t fresh);

}  // namespace memplan
