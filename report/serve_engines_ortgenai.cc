// ONNX Runtime GenAI's answer (report/serve_engines.h serve_ortgenai, add_ortgenai_row), split from
// report/serve_engines.cc by job: it runs the exported graph, not the vLLM analysis the other engines' rules use.
#include <fmt/format.h>

#include <algorithm>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "report/serve_engines.h"

namespace memplan {

EngineAnswer serve_ortgenai(ServeProbe& probe, const ServeSettings& s, const FitBudget& budget,
                            const std::string& gpu_name) {
  const std::string& path = probe.path();
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    throw InputError("serve --engine ortgenai: " + path + " is a config.json; ONNX Runtime GenAI runs an exported "
                     "ONNX decoder (give the .onnx file)");
  EngineAnswer a;
  a.engine = "ortgenai";
  a.rules = "ONNX Runtime GenAI 0.16 (a0c04eb): src/models/kv_cache.cpp DefaultKeyValueCache, past_present_share_buffer";
  a.model = probe.path();
  a.gpu = gpu_name;
  a.budget_source = budget.source;
  a.context = s.context > 0 ? s.context : probe.max_positions();
  a.context_source = s.context > 0 ? "--context" : "the model's max_position_embeddings";
  if (a.context <= 0)
    throw InputError("serve --engine ortgenai needs --context N (search.max_length): " + probe.path() +
                     " does not state its context length");
  const KvCache& kv = probe.kv();
  const DType d = probe.options().inference.float_dtype;  // Float32: the graph's own types, as ONNX Runtime runs it
  a.dtype = d == DType::Float32 ? "as stored" : std::string(dtype_name(d));
  a.kv_cache_dtype = s.kv_cache_dtype;
  a.kv_bytes_per_token = kv.bytes_per_token;
  a.kv_layers = static_cast<int64_t>(kv.pairs.size() / 2);
  a.weights_bytes = probe.weights_bytes();
  a.non_torch_bytes = 0;
  a.total_bytes = budget.bytes;
  OrtGenaiAnswer o;
  o.budget_bytes = budget.bytes;
  o.max_length = a.context;
  o.kv_heads = kv.kv_heads;
  o.head_dim = kv.head_dim;
  const uint64_t per_sequence =
      checked_mul(static_cast<uint64_t>(a.context), kv.bytes_per_token, "KV buffer bytes");
  auto total = [&](int64_t batch) {
    return checked_add(checked_mul(static_cast<uint64_t>(batch), per_sequence, "KV buffer bytes"),
                       probe.prompt(batch, a.context).required_bytes, "ortgenai bytes");
  };
  const FitResult r = fit_search(total, budget.bytes, 1, int64_t{1} << 20);
  if (r.any_fits) {
    o.max_batch_size = r.value;
    o.kv_buffer_bytes = static_cast<uint64_t>(r.value) * per_sequence;
    const ServeStep step = probe.prompt(r.value, a.context);
    o.step_required_bytes = step.required_bytes;
    a.activation_peak_bytes = step.activation_peak_bytes;
    o.total_bytes = r.bytes_at_value;
    o.next_evaluated = r.next_evaluated;
    o.total_bytes_next = r.bytes_at_next;
  }
  a.starts = r.any_fits;
  a.kv_tokens = o.max_batch_size * a.context;
  a.kv_cache_bytes = o.kv_buffer_bytes;
  a.max_concurrency = static_cast<double>(o.max_batch_size);
  a.max_concurrent_sequences = o.max_batch_size;
  const int64_t shown = std::max<int64_t>(o.max_batch_size, 1);
  a.prints.push_back(fmt::format("the key-value cache buffers: 2 x {} layers of [batch_size ({}), num_key_value_heads "
                                 "({}), max_length ({}), head_size ({})]",
                                 a.kv_layers, shown, o.kv_heads, o.max_length, o.head_dim));
  if (!a.starts)
    a.refusal = a.weights_bytes + per_sequence > budget.bytes
                    ? "Could not allocate the key-value cache buffer: the weights and one sequence's buffers at "
                      "max_length need more than the budget (\"Try reducing the max_length requested or reducing "
                      "the batch size.\")"
                    : "the prompt step of one sequence of max_length tokens needs more than the buffers leave";
  a.ortgenai = o;
  return a;
}

void add_ortgenai_row(EngineTable& t, const std::function<EngineAnswer()>& answer) {
  if (t.tp > 1) {
    t.rows.push_back({"ortgenai", "", 0, 0, 0, 0, false, "", "--tp: ONNX Runtime GenAI serves on one GPU"});
    return;
  }
  EngineAnswer a;
  try {
    a = answer();
  } catch (const InputError& error) {
    t.rows.push_back({"ortgenai", "", 0, 0, 0, 0, false, "", error.what()});
    return;
  }
  // One sequence a block of max_length tokens; the concurrency is the batch that fits, in the graph's own types.
  t.rows.push_back({a.engine, a.rules, a.kv_cache_bytes, a.kv_tokens, a.context, a.max_concurrency, a.starts,
                    fmt::format("search.batch_size {} at max_length {} ({} weights)", a.max_concurrent_sequences,
                                a.context, a.dtype),
                    ""});
}

}  // namespace memplan
