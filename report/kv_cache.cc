#include "report/kv_cache.h"

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

std::optional<KvPhases> estimate_kv_phases(ModelSession& model, const Bindings& user, const Graph& graph,
                                           const EstimateOptions& options, uint64_t weights_bytes) {
  if (options.mode != Mode::Inference || !may_have_kv_cache(graph)) return std::nullopt;
  try {
    // The user binds the cached and new tokens; to find which dimensions they are, every token-like dimension
    // is probed free. So is the batch (--dim batch_size=B): the probes measure one sequence's bytes per token,
    // which each step multiplies by its batch.
    const KvCache kv = find_kv_cache(model, kv_probe_bindings(model, user), "", options.inference.float_dtype);
    const auto cached = graph.bound_dims.find(kv.cached_dim);
    const auto fresh = graph.bound_dims.find(kv.new_dim);
    const auto past = graph.find_tensor(kv.pairs.front().first);
    if (cached == graph.bound_dims.end() || fresh == graph.bound_dims.end() || !past) return std::nullopt;
    const int64_t batch = graph.tensors[*past].shape.at(0);
    EstimateOptions o = options;
    o.inference.held_outside = kv.tensors();
    auto step = [&](int64_t c, int64_t n) {
      KvStep s;
      s.batch = batch;
      s.cached_tokens = c;
      s.new_tokens = n;
      s.required_bytes = estimate_totals(*model.shape(kv_step_bindings(user, kv, batch, c, n)), o).required_bytes;
      s.activation_peak_bytes = s.required_bytes > weights_bytes ? s.required_bytes - weights_bytes : 0;
      s.kv_cache_bytes = checked_mul(checked_mul(static_cast<uint64_t>(batch), static_cast<uint64_t>(c + n)),
                                     kv.bytes_per_token);
      return s;
    };
    KvPhases p;
    p.cached_dim = kv.cached_dim;
    p.new_dim = kv.new_dim;
    p.bytes_per_token = kv.bytes_per_token;
    p.prefill = step(0, fresh->second);
    p.decode = step(cached->second, 1);
    return p;
  } catch (const InputError&) {
    return std::nullopt;  // no unambiguous cache, or a step that does not shape: the estimate stands alone
  }
}

}  // namespace memplan
