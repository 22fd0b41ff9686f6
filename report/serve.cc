#include "report/serve.h"

#include <optional>

#include <fmt/format.h>

#include <algorithm>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "report/option_choices.h"
#include "report/sizes.h"

namespace memplan {
namespace {

constexpr int64_t kMaxSequences = int64_t{1} << 20;   // the largest number of sequences searched (fit's --max)
constexpr int64_t kMaxContextTokens = int64_t{1} << 30;  // the longest single sequence searched

}  // namespace

ServeAnswer serve_budget(ServeProbe& probe, const ServeSettings& settings, const FitBudget& budget) {
  ServeAnswer a;
  a.model = probe.path();
  a.budget_source = budget.source;
  a.budget_bytes = apply_headroom(budget.bytes, settings.headroom_percent);
  a.headroom_percent = settings.headroom_percent;
  a.context = settings.context;
  a.block_size = settings.block_size;
  a.max_batched_tokens = settings.max_batched_tokens;
  a.kv = probe.kv();
  a.weights_bytes = probe.weights_bytes();
  const PagedKvCache cache{settings.block_size, a.kv.bytes_per_token};
  a.block_bytes = cache.block_bytes();
  a.blocks_per_sequence = cache.blocks_for(settings.context);
  a.prefill = probe.prefill();
  const uint64_t prefill_need = a.prefill.required_bytes;

  // S sequences at the context.
  auto sequences_total = [&](int64_t s) {
    return serving_required_bytes(cache, s, settings.context, prefill_need,
                                  probe.decode(s, settings.context - 1).required_bytes);
  };
  const FitResult seqs = fit_search(sequences_total, a.budget_bytes, 1, kMaxSequences);
  if (seqs.any_fits) {
    a.max_concurrent_sequences = seqs.value;
    a.decode = probe.decode(seqs.value, settings.context - 1);
    a.total_bytes = seqs.bytes_at_value;
    const uint64_t step = std::max(prefill_need, a.decode->required_bytes);
    a.blocks = static_cast<int64_t>((a.budget_bytes - step) / a.block_bytes);
    if (seqs.next_evaluated) {
      a.decode_next = probe.decode(seqs.value + 1, settings.context - 1);
      a.total_bytes_next = seqs.bytes_at_next;
    }
  }

  // One sequence, k blocks long.
  auto single_total = [&](int64_t k) {
    const int64_t tokens = k * settings.block_size;
    return serving_required_bytes(cache, 1, tokens, prefill_need, probe.decode(1, tokens - 1).required_bytes);
  };
  // A model that states its position limit (a config.json) caps the longest sequence there, as vLLM caps
  // max_model_len at max_position_embeddings (vllm/config.py, _get_and_verify_max_len).
  a.max_position_cap = probe.max_positions();
  const int64_t longest = a.max_position_cap > 0 ? std::min(a.max_position_cap, kMaxContextTokens) : kMaxContextTokens;
  const FitResult single = fit_search(single_total, a.budget_bytes, 1, std::max<int64_t>(1, longest / settings.block_size));
  if (single.any_fits) {
    a.max_context_single_sequence = single.value * settings.block_size;
    a.single_decode = probe.decode(1, a.max_context_single_sequence - 1);
    a.single_total_bytes = single.bytes_at_value;
    if (single.next_evaluated) {
      a.single_decode_next = probe.decode(1, a.max_context_single_sequence + settings.block_size - 1);
      a.single_total_bytes_next = single.bytes_at_next;
    }
  }
  return a;
}

ServeOutcome serve_model(const ServeArgs& f) {
  const ServeSettings& s = f.settings;
  // The values, --context, the budget's rules (--gpu or --memory, --arch) and the estimate's options were checked
  // by validate_options (report/option_checks.h), which the front ends run first.
  const std::string& gpu = f.estimate.gpu;
  if (f.estimate.model.batch >= 0)
    throw InputError("serve finds the number of sequences itself: drop --batch");
  if (f.estimate.mode != "inference") throw InputError("serve estimates inference steps: drop --mode " + f.estimate.mode);
  EstimateOptions options = to_estimate_options(f.estimate);
  const GpuCatalog catalog = gpu_catalog_from(f.estimate.catalog);
  const std::optional<uint64_t> reserve_given =
      f.estimate.reserve.empty() ? std::nullopt : std::optional<uint64_t>(parse_size(f.estimate.reserve, "--reserve"));
  const uint64_t reserve = reserve_given.value_or(catalog.context_reserve_bytes);
  const VllmNonTorch vllm_non_torch(reserve_given, catalog.context_reserve_bytes);  // report/serve_vllm.h
  std::optional<FitBudget> budget;
  if (!f.memory.empty()) budget = FitBudget{parse_size(f.memory, "--memory"), "--memory " + f.memory};
  else if (!gpu.empty()) budget = gpu_budget(catalog.find(gpu), reserve);

  ServeSettings settings = s;
  const bool vllm = uses_vllm_analysis(s.engine);  // vLLM's analysis: vllm, sglang, trtllm, all
  if (kServeEngineChoices.is(s.engine, ServeEngine::Ortgenai)) options.execution.runtime = Runtime::OnnxRuntime;
  options.execution.replicate_kv_heads = vllm;
  if (!vllm && settings.max_batched_tokens == 0) settings.max_batched_tokens = settings.context;
  ServeProbe probe(f.estimate.model.path, to_bindings(f.estimate.model), settings, options);
  if (const int64_t cap = probe.max_positions(); cap > 0 && settings.context > cap)
    // vLLM refuses a max_model_len above max_position_embeddings (vllm/config.py, _get_and_verify_max_len).
    throw InputError("--context " + std::to_string(settings.context) + " is over the model's maximum position, " +
                     std::to_string(cap) + " (max_position_embeddings of " + probe.path() + ")");
  for (const std::string& d : f.estimate.model.dims) {
    for (const std::string& own : {probe.kv().cached_dim, probe.kv().new_dim})
      if (d.rfind(own + "=", 0) == 0)
        throw InputError("serve binds " + own + " itself (--context, --max-batched-tokens): drop --dim " + d);
    // A bound batch would shape every step at that batch, whatever the number of sequences searched.
    for (const std::string& own : probe.kv().batch_dims)
      if (d.rfind(own + "=", 0) == 0)
        throw InputError("serve chooses the batch itself (the number of sequences served at once; " + own +
                         " is the leading dimension of the KV cache's past inputs): drop --dim " + d);
  }
  ServeOutcome out;
  if (vllm) {
    // vLLM's budget is a fraction of the GPU's whole memory (the CUDA context lives in the rest); --reserve is
    // the memory its profile finds outside PyTorch's allocator (cost_models/vllm_engine.h), by default what the
    // version's rule charges of it that memplan models (VllmNonTorch).
    const int tp = f.estimate.tp;
    // The compute capability (major x 10 + minor) vLLM's quantization methods check: --arch smXY with --memory.
    const int arch = f.estimate.arch.size() > 2 ? std::stoi(f.estimate.arch.substr(2)) : 90;
    if (!kServeEngineChoices.is(s.engine, ServeEngine::Vllm)) {  // sglang, trtllm, all (report/serve_engines.h)
      if (!budget) throw InputError("serve --engine " + s.engine + " needs --gpu NAME or --memory SIZE: its defaults "
                                    "depend on the GPU's memory (the catalog table is --engine vllm's)");
      const GpuSpec* g = f.memory.empty() ? &catalog.find(gpu) : nullptr;
      const std::string source = g ? g->name + " (" + format_bytes(g->memory_bytes) + ")" : budget->source;
      const uint64_t total = g ? g->memory_bytes : budget->bytes;
      const int capability = g ? g->cc_major * 10 + g->cc_minor : arch;
      const bool cuda = !g || g->vendor == "nvidia";  // --memory: the --arch smXY GPU
      if (kServeEngineChoices.is(s.engine, ServeEngine::All)) {
        out.engines =
            serve_engines_table(probe, settings, tp, total, g ? g->name : "", source, vllm_non_torch, capability, cuda);
        add_ortgenai_row(*out.engines, [&] {  // on its own probe: the graph's types, ONNX Runtime
          EstimateOptions ort = to_estimate_options(f.estimate);
          ort.execution.runtime = Runtime::OnnxRuntime;
          ServeSettings own = settings;
          own.engine = "ortgenai";
          own.max_batched_tokens = own.context;  // the weights' step, as eager's (a prompt of the context)
          ServeProbe graph(f.estimate.model.path, to_bindings(f.estimate.model), own, ort);
          return serve_ortgenai(graph, own, *budget, g ? g->name : "");
        });
      } else {
        out.engine = serve_engine(probe, settings, kServeEngineChoices.parse(s.engine, "--engine"), tp, total,
                                  g ? g->name : "", source, reserve, capability, cuda);
      }
      return out;
    }
    // deepseek_v2's and deepseek_v3's MLA backends and block sizes are CUDA's (cuda.py); ROCm's (AITER MLA) are not
    // modelled.
    auto mla_on = [&](const GpuSpec& g) {
      if (probe.mla().kv_lora_rank > 0 && g.vendor != "nvidia")
        throw VllmGpuRefused("vLLM's MLA backends on " + g.vendor + " GPUs (" + g.name + "): ROCm's AITER and Triton "
                             "MLA and their block sizes are not modelled for " + probe.path() +
                                 " (multi-head latent attention)",
                             false);
    };
    if (!f.memory.empty()) {
      out.vllm = serve_vllm(probe, settings, tp, budget->bytes, "", budget->source, vllm_non_torch, arch);
    } else if (!gpu.empty()) {
      const GpuSpec& g = catalog.find(gpu);
      mla_on(g);
      out.vllm = serve_vllm(probe, settings, tp, g.memory_bytes, g.name, g.name + " (" + format_bytes(g.memory_bytes) + ")",
                            vllm_non_torch, g.cc_major * 10 + g.cc_minor);
    } else {
      VllmTable t;
      t.model = probe.path();
      t.non_torch_given = reserve_given.has_value();
      std::optional<std::string> refused;  // the first GPU's refusal, said when no GPU is answered
      int answered = 0;
      for (const GpuSpec& g : catalog.gpus) {
        probe.use_gpu_architecture(g);
        VllmAnswer a;
        try {
          mla_on(g);
          a = serve_vllm(probe, settings, tp, g.memory_bytes, g.name, g.name, vllm_non_torch, g.cc_major * 10 + g.cc_minor);
        } catch (const VllmGpuRefused& e) {  // this GPU's row only (a quantization method's capability)
          if (!refused) refused = e.what();
          VllmTableRow row;
          row.gpu = g.name;
          row.memory_bytes = g.memory_bytes;
          row.requested_bytes = vllm_available_memory(g.memory_bytes, vllm_gpu_memory_utilization(settings), 0, 0, 0).requested;
          row.not_answered = e.what();
          row.vllm_refuses = e.vllm_refuses;
          t.rows.push_back(std::move(row));
          continue;
        }
        ++answered;
        t.max_model_len = a.settings.engine.max_model_len;
        t.block_size = a.mla.on ? a.mla.requested_block_size : a.settings.engine.block_size;
        t.mla = a.mla.on;
        t.gpu_memory_utilization = a.settings.engine.gpu_memory_utilization;
        t.non_torch_bytes = a.memory.non_torch - a.custom_all_reduce_bytes;
        t.non_torch_absolute = a.settings.rule.absolute_budget;
        t.custom_all_reduce_bytes = a.custom_all_reduce_bytes;
        t.custom_all_reduce_rank_data = a.settings.rule.rank_data_after_baseline;
        t.engine_version = a.settings.version_text;
        t.engine_version_given = a.settings.version_given;
        t.sliding_window = a.sliding_window;
        t.kv_layers = a.kv_layers;
        t.sliding_layer_count = a.sliding_layer_count;
        t.rows.push_back({g.name, g.memory_bytes, a.memory.requested, a.memory.available, a.capacity.tokens,
                          a.capacity.max_concurrency, a.capacity.starts, "", false,
                          a.settings.engine.max_num_batched_tokens, a.capacity.blocks_per_request, a.dtype,
                          a.kv_bytes_per_token, a.mla.backend, a.mla.on ? a.mla.block_size : 0});
      }
      if (answered == 0 && refused) throw InputError(*refused);
      vllm_table_common_type(t);
      out.vllm_table = std::move(t);
    }
    return out;
  }
  if (kServeEngineChoices.is(s.engine, ServeEngine::Ortgenai)) {  // report/serve_engines.h
    if (!budget) throw InputError("serve --engine ortgenai needs --gpu NAME or --memory SIZE");
    out.engine = serve_ortgenai(probe, settings, *budget, f.memory.empty() ? catalog.find(gpu).name : "");
    return out;
  }
  if (budget) {
    out.answer = serve_budget(probe, settings, *budget);
    return out;
  }
  ServeTable t;
  t.model = probe.path();
  t.context = settings.context;
  t.block_size = settings.block_size;
  t.kv_bytes_per_token = probe.kv().bytes_per_token;
  t.weights_bytes = probe.weights_bytes();
  t.reserve_bytes = reserve;
  for (const GpuSpec& g : catalog.gpus) {
    probe.use_gpu_architecture(g);
    const ServeAnswer a = serve_budget(probe, settings, gpu_budget(g, reserve));
    t.rows.push_back({g.name, g.memory_bytes, a.budget_bytes, a.max_concurrent_sequences, a.max_context_single_sequence});
  }
  out.table = std::move(t);
  return out;
}

// ---- formats ----

namespace {

nlohmann::ordered_json step_json(const std::optional<ServeStep>& s) {
  if (!s) return nullptr;
  return {{"batch", s->batch},
          {"cached_tokens", s->cached_tokens},
          {"new_tokens", s->new_tokens},
          {"required_bytes", s->required_bytes},
          {"activation_peak_bytes", s->activation_peak_bytes}};
}

}  // namespace

nlohmann::ordered_json serve_to_json(const ServeAnswer& a) {
  nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
  for (const auto& [in, out] : a.kv.pairs) pairs.push_back({{"past", in}, {"present", out}});
  nlohmann::ordered_json j{{"schema", kServeSchema},
                           {"model", a.model},
                           {"budget_bytes", a.budget_bytes},
                           {"budget_source", a.budget_source},
                           {"headroom_percent", a.headroom_percent},
                           {"context", a.context},
                           {"block_size", a.block_size},
                           {"max_batched_tokens", a.max_batched_tokens},
                           {"kv_cache", {{"cached_dim", a.kv.cached_dim},
                                         {"new_tokens_dim", a.kv.new_dim},
                                         {"pairs", pairs},
                                         {"bytes_per_token", a.kv.bytes_per_token},
                                         {"block_bytes", a.block_bytes},
                                         {"blocks_per_sequence", a.blocks_per_sequence}}},
                           {"kv_cache_bytes_per_token", a.kv.bytes_per_token},
                           {"weights_bytes", a.weights_bytes},
                           {"prefill", step_json(a.prefill)}};
  j["max_concurrent_sequences"] = a.max_concurrent_sequences;
  j["sequences"] = {{"decode", step_json(a.decode)},
                    {"blocks", a.blocks},
                    {"total_bytes", a.total_bytes},
                    {"decode_next", step_json(a.decode_next)},
                    {"total_bytes_next", a.decode_next ? nlohmann::ordered_json(a.total_bytes_next) : nullptr}};
  j["max_context_single_sequence"] = a.max_context_single_sequence;
  j["single_sequence"] = {
      {"decode", step_json(a.single_decode)},
      {"total_bytes", a.single_total_bytes},
      {"decode_next", step_json(a.single_decode_next)},
      {"total_bytes_next", a.single_decode_next ? nlohmann::ordered_json(a.single_total_bytes_next) : nullptr}};
  // An ONNX file does not state its maximum position; a config.json does, and it caps the longest sequence.
  j["max_position_cap"] = a.max_position_cap > 0 ? nlohmann::ordered_json(a.max_position_cap) : nullptr;
  return j;
}

std::string serve_to_text(const ServeAnswer& a) {
  std::string t = fmt::format("{}\n  budget {} ({} B): {}\n", a.model, format_bytes(a.budget_bytes),
                              format_count(a.budget_bytes), a.budget_source);
  t += fmt::format("  KV cache: {} pairs along {} (new tokens: {}), {} B per token and sequence, blocks of {} tokens = {} B\n",
                   a.kv.pairs.size(), a.kv.cached_dim, a.kv.new_dim, format_count(a.kv.bytes_per_token), a.block_size,
                   format_count(a.block_bytes));
  t += fmt::format("  weights                                   {:>12}  ({} B)\n", format_bytes(a.weights_bytes),
                   format_count(a.weights_bytes));
  t += fmt::format("  prefill of {} tokens: activation peak     {:>12}  (step needs {} B)\n", a.max_batched_tokens,
                   format_bytes(a.prefill.activation_peak_bytes), format_count(a.prefill.required_bytes));
  if (!a.fits()) {
    if (a.weights_bytes > a.budget_bytes)
      return t + fmt::format("nothing fits: the weights alone need {}, more than the budget of {}\n",
                             format_bytes(a.weights_bytes), format_bytes(a.budget_bytes));
    return t + fmt::format("nothing fits: one sequence of {} tokens (one block) and its step need more than the budget of {}\n",
                           a.block_size, format_bytes(a.budget_bytes));
  }
  if (a.decode)
    t += fmt::format("  decode of {} x 1 token: activation peak   {:>12}  (step needs {} B)\n", a.decode->batch,
                     format_bytes(a.decode->activation_peak_bytes), format_count(a.decode->required_bytes));
  t += fmt::format("\nsequences of {} tokens served at once: {}\n", a.context, a.max_concurrent_sequences);
  if (a.decode) {
    t += fmt::format("  {} sequences x {} blocks + the largest step = {} B ({} blocks fit)\n", a.max_concurrent_sequences,
                     a.blocks_per_sequence, format_count(a.total_bytes), a.blocks);
    if (a.decode_next) {
      t += fmt::format("  {} sequences would need {} B\n", a.max_concurrent_sequences + 1, format_count(a.total_bytes_next));
      if (a.blocks >= (a.max_concurrent_sequences + 1) * a.blocks_per_sequence)
        t += "  (the blocks would hold one more sequence, but its decode step would leave them too little room)\n";
    }
  } else {
    t += fmt::format("  not one sequence of {} tokens fits\n", a.context);
  }
  t += fmt::format("longest single sequence: {} tokens\n", a.max_context_single_sequence);
  if (a.single_decode_next)
    t += fmt::format("  {} tokens need {} B; {} tokens (one more block) would need {} B\n", a.max_context_single_sequence,
                     format_count(a.single_total_bytes), a.max_context_single_sequence + a.block_size,
                     format_count(a.single_total_bytes_next));
  t += a.max_position_cap > 0
           ? fmt::format("  (capped at the model's maximum position, {} tokens)\n", a.max_position_cap)
           : "  (not capped by the model's maximum position, which memplan does not read)\n";
  return t;
}

std::string serve_to_markdown(const ServeAnswer& a) { return "```\n" + serve_to_text(a) + "```\n"; }

nlohmann::ordered_json serve_table_to_json(const ServeTable& t) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ServeTableRow& r : t.rows)
    rows.push_back({{"gpu", r.gpu},
                    {"memory_bytes", r.memory_bytes},
                    {"budget_bytes", r.budget_bytes},
                    {"max_concurrent_sequences", r.max_concurrent_sequences},
                    {"max_context_single_sequence", r.max_context_single_sequence}});
  return {{"schema", kServeSchema},
          {"model", t.model},
          {"context", t.context},
          {"block_size", t.block_size},
          {"kv_cache_bytes_per_token", t.kv_bytes_per_token},
          {"weights_bytes", t.weights_bytes},
          {"reserve_bytes", t.reserve_bytes},
          {"gpus", rows}};
}

std::string serve_table_to_text(const ServeTable& t) {
  std::string text = fmt::format("sequences of {} tokens served at once (KV {} B per token, blocks of {})\n"
                                 "  {:<12}{:>12}{:>12}{:>12}{:>16}\n",
                                 t.context, format_count(t.kv_bytes_per_token), t.block_size, "GPU", "memory", "budget",
                                 "sequences", "longest single");
  for (const ServeTableRow& r : t.rows)
    text += fmt::format("  {:<12}{:>12}{:>12}{:>12}{:>16}\n", r.gpu, format_bytes(r.memory_bytes),
                        format_bytes(r.budget_bytes), r.max_concurrent_sequences, r.max_context_single_sequence);
  text += fmt::format("  (budget = memory - {} reserve for the CUDA context; GiB = 2^30 bytes)\n",
                      format_bytes(t.reserve_bytes));
  return text;
}

std::string serve_table_to_markdown(const ServeTable& t) {
  std::string md = fmt::format("| GPU | memory | budget | sequences of {} tokens | longest single sequence |\n"
                               "|---|---:|---:|---:|---:|\n",
                               t.context);
  for (const ServeTableRow& r : t.rows)
    md += fmt::format("| {} | {} | {} | {} | {} |\n", r.gpu, format_bytes(r.memory_bytes), format_bytes(r.budget_bytes),
                      r.max_concurrent_sequences, r.max_context_single_sequence);
  return md;
}

}  // namespace memplan
