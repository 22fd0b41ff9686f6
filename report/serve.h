// serve: how many sequences of a decoder with a KV cache a GPU serves at once, paged as vLLM pages it, and the
// longest single sequence; its JSON ("memplan.serve/1", docs/json.md), table and markdown.
//
// The memory model, vLLM's paged KV cache and its budget rule, is cost_models/paged_kv.h's; this file searches it.
//
// Steps, each estimated by memplan's own estimate with the KV cache's tensors held outside the allocator
// (InferenceOptions::held_outside: they live in the blocks):
//   prefill  batch 1, --max-batched-tokens T new tokens, nothing cached (vLLM profiles one batch of
//            max_num_batched_tokens tokens; with chunked prefill no prompt step is larger)
//   decode   S sequences, 1 new token each, context - 1 tokens cached (the step that writes a sequence's last
//            token)
// and step_required(S) = max(prefill.required, decode(S).required), weights included (their required bytes).
// A budget serves S sequences at context N when
//   S x ceil(N / B) x block_bytes + step_required(S) <= budget,
// and max_concurrent_sequences is the largest such S, with S + 1 evaluated and over (exact, like fit); one
// sequence of context C = k x B tokens fits when k x block_bytes + max(prefill, decode(1, C - 1)) <= budget, and
// max_context_single_sequence is the largest such C, with one more block evaluated and over.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cost_models/kv_cache.h"
#include "cost_models/paged_kv.h"
#include "report/estimate_config.h"
#include "report/fit.h"
#include "report/serve_engines.h"
#include "report/serve_probe.h"
#include "report/serve_vllm.h"

namespace memplan {

inline constexpr const char* kServeSchema = "memplan.serve/1";

// What `budget` serves at the settings' context.
struct ServeAnswer {
  std::string model, budget_source;
  uint64_t budget_bytes = 0;  // after headroom
  double headroom_percent = 0;
  int64_t context = 0, block_size = 0, max_batched_tokens = 0;
  KvCache kv;
  uint64_t weights_bytes = 0;
  uint64_t block_bytes = 0;
  int64_t blocks_per_sequence = 0;
  ServeStep prefill;
  // Sequences at the context: the answer and the evaluated next (sequences + 1).
  int64_t max_concurrent_sequences = 0;
  std::optional<ServeStep> decode;        // at max_concurrent_sequences (when >= 1)
  uint64_t total_bytes = 0;               // KV blocks of the sequences + step_required, at the answer
  int64_t blocks = 0;                     // floor((budget - step_required) / block_bytes) at the answer
  std::optional<ServeStep> decode_next;   // at max_concurrent_sequences + 1 (nullopt: the search limit)
  uint64_t total_bytes_next = 0;
  // One sequence: the longest context, in whole blocks.
  int64_t max_context_single_sequence = 0;
  std::optional<ServeStep> single_decode, single_decode_next;
  uint64_t single_total_bytes = 0, single_total_bytes_next = 0;
  int64_t max_position_cap = 0;  // the model's position limit capping the longest sequence; 0: not known
  bool fits() const { return max_concurrent_sequences > 0 || max_context_single_sequence > 0; }
};
ServeAnswer serve_budget(ServeProbe& probe, const ServeSettings& settings, const FitBudget& budget);

struct ServeTableRow {
  std::string gpu;
  uint64_t memory_bytes = 0, budget_bytes = 0;
  int64_t max_concurrent_sequences = 0, max_context_single_sequence = 0;
};
struct ServeTable {
  std::string model;
  int64_t context = 0, block_size = 0;
  uint64_t kv_bytes_per_token = 0, weights_bytes = 0, reserve_bytes = 0;
  std::vector<ServeTableRow> rows;
};

// serve as its flags name it, for the CLI and the Python module.
struct ServeArgs {
  EstimateArgs estimate;  // the model, --dim bindings of other dimensions, --runtime, --dtype, --gpu, --catalog, ...
  ServeSettings settings;
  std::string memory;     // --memory SIZE
};
struct ServeOutcome {
  // --engine eager: an answer on a budget, or the table over the catalog.
  std::optional<ServeAnswer> answer;
  std::optional<ServeTable> table;
  // --engine vllm: the same two (report/serve_vllm.h).
  std::optional<VllmAnswer> vllm;
  std::optional<VllmTable> vllm_table;
  // --engine sglang or trtllm (report/serve_engines.h), and --engine all: a row an engine.
  std::optional<EngineAnswer> engine;
  std::optional<EngineTable> engines;
  // The CLI exits 1: nothing fits, or the engine would not start.
  bool limit_broken() const {
    return (answer && !answer->fits()) || (vllm && !vllm->fits()) || (engine && !engine->starts);
  }
};
// The arguments must have passed validate_options(..., kServe) (report/option_checks.h), as the CLI and Python
// run it first. Throws InputError (exit 2) for bindings serve makes itself and models without a KV cache.
ServeOutcome serve_model(const ServeArgs& args);

nlohmann::ordered_json serve_to_json(const ServeAnswer& a);
std::string serve_to_text(const ServeAnswer& a);
std::string serve_to_markdown(const ServeAnswer& a);
nlohmann::ordered_json serve_table_to_json(const ServeTable& t);
std::string serve_table_to_text(const ServeTable& t);
std::string serve_table_to_markdown(const ServeTable& t);

}  // namespace memplan
