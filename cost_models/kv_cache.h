// A decoder's KV cache, found in the model by structure: graph inputs (past keys and values) that have a graph
// output of the same per-token shape one axis longer by the new tokens (present = Concat(past, new) on that
// axis, as Hugging Face's DynamicCache.update writes it with torch.cat, or a fused attention op's present
// output). Names are not read, so optimum's past_key_values.{i}.key / present.{i}.key, ORT GenAI's and any other
// naming are found alike. An analysis of shaped graphs: the model is shaped at small probe values and the
// inputs that grow with one more cached token are compared with the outputs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "onnx_import/graph.h"
#include "onnx_import/import.h"
#include "onnx_import/model_session.h"

namespace memplan {

struct KvCache {
  std::string cached_dim;  // the symbolic dimension that counts cached tokens (past_sequence_length)
  std::string new_dim;     // the one that counts the step's new tokens (sequence_length)
  std::vector<std::pair<std::string, std::string>> pairs;  // (past input, present output), in input order
  // Bytes of one more cached token of one sequence, over every past input, in the estimate's storage dtype
  // (--dtype: cost_models/graph_facts.h storage_dtype). 2 x layers x kv_heads x head_dim x bytes per element.
  uint64_t bytes_per_token = 0;
  // KV heads of every past input ([batch, kv_heads, tokens, head_dim], the tokens at axis 2), when all agree; 0:
  // another layout, or layers that differ.
  int64_t kv_heads = 0;
  int64_t head_dim = 0;  // axis 3 of those past inputs, when all agree; 0 otherwise
  // Input dimensions that follow from the cached and new tokens at every step, when the user does not bind them:
  // a dim_param that is a sum of other dimensions ("past_sequence_length + sequence_length", optimum's attention
  // mask), which the importer binds from its terms (summed_dim_terms, onnx_import/import.h), and ORT GenAI's
  // total_sequence_length (= cached + new tokens), which the steps bind.
  std::vector<std::string> derived;
  // The symbolic dimensions declared at the leading axis of the past inputs: the batch, which every step binds
  // (kv_step_bindings) and serve chooses itself.
  std::vector<std::string> batch_dims;
  // Every tensor of the cache (past inputs and present outputs), what InferenceOptions::held_outside takes.
  std::vector<std::string> tensors() const;
};

// Finds the cache of the session's model. `user` are the user's bindings (--dim); every other
// symbolic dimension of the inputs is probed at small values, the leading ones as the batch (1).
// `cached_dim`: --kv-dim, the dimension to take when several are cached ("": find it). Throws InputError when
// the model has no past/present pair, when several dimensions qualify and none is named, when --kv-dim names
// no dimension of the inputs or one without a cache, and when no dimension of new tokens is found.
KvCache find_kv_cache(ModelSession& model, const Bindings& user, const std::string& cached_dim, DType float_dtype);

// `user` without its bindings of the inputs' token-like dimensions (at an axis other than 0) and of their batch
// (axis 0): what find_kv_cache probes to measure one sequence when the user bound a whole step (estimate).
Bindings kv_probe_bindings(ModelSession& model, const Bindings& user);

// A graph input and a graph output of one dtype and rank whose shapes differ only where the output is longer:
// what a cache looks like once shaped. Cheap, so that `estimate` probes only models that may have one.
bool may_have_kv_cache(const Graph& g);

// The bindings of one step: user's, the batch, `cached` tokens in the cache and `fresh` new tokens.
Bindings kv_step_bindings(const Bindings& user, const KvCache& kv, int64_t batch, int64_t cached, int64_t fresh);

// A decoder's two kinds of step, as `estimate` reports them for a model with a KV cache (report/kv_cache.h):
// the prefill of the bound new tokens with nothing cached, and the decode of one new token after the bound
// cached tokens, at the bound batch.
struct KvStep {
  int64_t batch = 0, cached_tokens = 0, new_tokens = 0;
  uint64_t required_bytes = 0;         // the estimate's required_bytes of the step, weights included
  uint64_t activation_peak_bytes = 0;  // required_bytes - the weights' bytes
  uint64_t kv_cache_bytes = 0;         // the cache after the step: batch x (cached + new) x bytes_per_token
};
struct KvPhases {
  std::string cached_dim, new_dim;
  uint64_t bytes_per_token = 0;
  KvStep prefill, decode;
};

}  // namespace memplan
