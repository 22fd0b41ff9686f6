// serve --engine sglang | trtllm | all as text, JSON ("memplan.serve.engine/1", "memplan.serve.engines/1",
// docs/json.md) and Markdown.
#include <fmt/format.h>

#include <algorithm>

#include "onnx_import/checked.h"
#include "report/serve_engines.h"
#include "report/sizes.h"

namespace memplan {
namespace {

nlohmann::ordered_json or_null(const std::string& s) { return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s); }

std::string bytes_and_count(uint64_t b) { return fmt::format("{:>12}  ({} B)", format_bytes(b), format_count(b)); }

std::string concurrency_cell(const EngineRow& r) {
  if (!r.not_modelled.empty()) return "not modelled";
  return r.starts ? fmt::format("{:.2f}x", r.max_concurrency) : "no start";
}

nlohmann::ordered_json quantization_json(const SglangAnswer::Quantization& q) {
  if (q.method.empty()) return nullptr;
  return {{"method", q.method},
          {"source", q.source},
          {"layout", q.layout},
          {"quantized_modules", q.modules},
          {"linear_bytes", q.linear_bytes},
          {"vllm_linear_bytes", q.vllm_linear_bytes},
          {"routers_unquantized", q.routers},
          {"router_bytes", q.router_bytes},
          {"expert_bytes", q.expert_bytes},
          {"kv_scale_bytes", q.kv_scale_bytes}};
}

}  // namespace

nlohmann::ordered_json engine_to_json(const EngineAnswer& a) {
  nlohmann::ordered_json j{{"schema", kServeEngineSchema},
                           {"engine", a.engine},
                           {"rules", a.rules},
                           {"model", a.model},
                           {"gpu", or_null(a.gpu)},
                           {"budget_source", a.budget_source},
                           {"settings", {{"context", a.context},
                                         {"context_source", a.context_source},
                                         {"tp", a.tp},
                                         {"dtype", a.dtype},
                                         {"kv_cache_dtype", a.kv_cache_dtype}}},
                           {"kv_cache", {{"bytes_per_token", a.kv_bytes_per_token}, {"layers", a.kv_layers}}},
                           {"memory", {{"total_bytes", a.total_bytes},
                                       {"weights_bytes", a.weights_bytes},
                                       {"activation_peak_bytes", a.activation_peak_bytes},
                                       {"non_torch_bytes", a.non_torch_bytes}}}};
  if (a.sglang) {
    const SglangAnswer& g = *a.sglang;
    j["sglang"] = {{"gpu_mem_mib", g.gpu_mem_mib},
                   {"chunked_prefill_size", g.chunked_prefill_size},
                   {"chunked_prefill_size_source", g.default_chunked_prefill_size ? "SGLang's default for the GPU"
                                                                                  : "--chunked-prefill-size"},
                   {"cuda_graph_max_bs", g.cuda_graph_max_bs},
                   {"mem_fraction_static", g.mem_fraction_static},
                   {"mem_fraction_static_source", g.reserved_mib > 0 ? "SGLang's default for the GPU"
                                                                     : "--mem-fraction-static"},
                   {"reserved_mib", g.reserved_mib > 0 ? nlohmann::ordered_json(g.reserved_mib) : nullptr},
                   {"page_size", g.page_size},
                   {"max_total_tokens", g.max_total_tokens > 0 ? nlohmann::ordered_json(g.max_total_tokens) : nullptr},
                   {"rotary_cache_bytes", g.rotary_cache_bytes},
                   {"mla_attention_backend", or_null(g.mla_backend)},
                   {"mla_absorbed_bytes", g.mla_absorbed_bytes},
                   {"quantization", quantization_json(g.quantization)},
                   {"total_gpu_memory_gib", g.pool.total_gib},
                   {"available_gpu_memory_gib", g.pool.available_gib},
                   {"rest_memory_gib", g.pool.rest_gib},
                   {"profiled_tokens", g.pool.profiled_tokens},
                   {"max_total_num_tokens", g.pool.max_total_num_tokens},
                   {"req_to_token_pool_size", g.pool.req_to_token_pool_size},
                   {"max_running_requests", g.pool.max_running_requests}};
    if (!g.mxfp4.backend.empty()) {  // optional: MXFP4 experts (cost_models/mxfp4_experts.h)
      const Mxfp4ExpertsLayer& l = g.mxfp4.layer;
      const auto all = [&](uint64_t bytes) { return checked_mul(bytes, uint64_t(g.mxfp4.layers), "expert bytes"); };
      j["sglang"]["mxfp4"] = {{"backend", g.mxfp4.backend},
                              {"sparse_layers", g.mxfp4.layers},
                              {"intermediate_size_padded", l.intermediate_padded},
                              {"hidden_size_padded", l.hidden_padded},
                              {"blocks_bytes", all(l.blocks_bytes)},
                              {"scales_bytes", all(l.scales_bytes)},
                              {"retained_scales_bytes", all(l.retained_scales_bytes)},
                              {"swizzle_padding_bytes", all(l.swizzle_padding_bytes)},
                              {"bias_bytes", all(l.bias_bytes)},
                              {"constants_bytes", all(l.constants_bytes)},
                              {"layer_bytes", l.total()},
                              {"expert_bytes", g.mxfp4.bytes},
                              {"vllm_expert_bytes", g.mxfp4.vllm_bytes}};
    }
    if (g.sliding_window > 0)  // optional: a windowed model (cost_models/sglang_swa.h)
      j["sglang"]["sliding_window"] = {
          {"window", g.sliding_window},
          {"swa_layers", g.swa_layers},
          {"full_layers", g.full_layers},
          {"hybrid_swa_pool", g.hybrid_swa},
          {"swa_full_tokens_ratio", g.hybrid_swa ? nlohmann::ordered_json(g.swa_full_tokens_ratio) : nullptr},
          {"full_layer_tokens", g.hybrid_swa ? nlohmann::ordered_json(g.swa.full_layer_tokens) : nullptr},
          {"swa_layer_tokens", g.hybrid_swa ? nlohmann::ordered_json(g.swa.swa_layer_tokens) : nullptr},
          {"index_mapping_bytes", g.hybrid_swa ? nlohmann::ordered_json(g.swa.index_mapping_bytes) : nullptr}};
  } else {
    j["sglang"] = nullptr;
  }
  if (a.trtllm) {
    const TrtllmAnswer& t = *a.trtllm;
    j["trtllm"] = {{"free_gpu_memory_fraction", t.free_gpu_memory_fraction},
                   {"free_gpu_memory_fraction_set", t.free_gpu_memory_fraction_set},
                   {"tokens_per_block", t.tokens_per_block},
                   {"max_num_tokens", t.max_num_tokens},
                   {"peak_memory_bytes", t.cache.peak_memory},
                   {"available_kv_cache_bytes", t.cache.available_bytes},
                   {"estimate_kv_bytes_per_token", t.cache.estimate_kv_per_token},
                   {"estimated_max_tokens", t.cache.max_tokens},
                   {"kv_heads_per_rank", t.kv_heads_per_rank},
                   {"free_after_profiling_bytes", t.cache.free_after},
                   {"cap_tokens", t.cache.cap_tokens >= 0 ? nlohmann::ordered_json(t.cache.cap_tokens) : nullptr},
                   {"blocks", t.cache.blocks},
                   {"pool_bytes", t.cache.pool_bytes},
                   {"quantization", t.quantization.method.empty()
                                        ? nlohmann::ordered_json(nullptr)
                                        : nlohmann::ordered_json{{"method", t.quantization.method},
                                                                 {"source", t.quantization.source},
                                                                 {"layout", t.quantization.layout},
                                                                 {"quantized_modules", t.quantization.modules},
                                                                 {"linear_bytes", t.quantization.linear_bytes},
                                                                 {"scalar_bytes", t.quantization.scalar_bytes},
                                                                 {"checkpoint_fp8_kv_cache",
                                                                  t.quantization.checkpoint_fp8_cache}}}};
  } else {
    j["trtllm"] = nullptr;
  }
  if (a.ortgenai) {
    const OrtGenaiAnswer& o = *a.ortgenai;
    j["ortgenai"] = {{"budget_bytes", o.budget_bytes},
                     {"max_length", o.max_length},
                     {"kv_heads", o.kv_heads},
                     {"head_dim", o.head_dim},
                     {"max_batch_size", o.max_batch_size},
                     {"kv_buffer_bytes", o.kv_buffer_bytes},
                     {"step_required_bytes", o.step_required_bytes},
                     {"total_bytes", o.total_bytes},
                     {"total_bytes_next", o.next_evaluated ? nlohmann::ordered_json(o.total_bytes_next) : nullptr}};
  } else {
    j["ortgenai"] = nullptr;
  }
  j["kv_cache_tokens"] = a.kv_tokens;
  j["kv_cache_bytes"] = a.kv_cache_bytes;
  j["max_concurrency"] = a.max_concurrency;
  j["max_concurrent_sequences"] = a.max_concurrent_sequences;
  j["starts"] = a.starts;
  j["refusal"] = or_null(a.refusal);
  j["prints"] = a.prints;
  return j;
}

std::string engine_to_text(const EngineAnswer& a) {
  const std::string who = a.engine == "sglang" ? "SGLang" : a.engine == "trtllm" ? "TensorRT-LLM" : "ONNX Runtime GenAI";
  std::string t = fmt::format("{} served by {} ({})\n  {}: {}\n", a.model, who,
                              a.rules, a.gpu.empty() ? "memory" : "GPU", a.budget_source);
  t += fmt::format("  context {} tokens ({}), tp {}, {} weights, KV cache {} ({} B a token over {} layers)\n", a.context,
                   a.context_source, a.tp, a.dtype, a.kv_cache_dtype, format_count(a.kv_bytes_per_token), a.kv_layers);
  t += "  total                      " + bytes_and_count(a.total_bytes) + "\n";
  if (!a.ortgenai)  // ONNX Runtime GenAI's budget is already the GPU less --reserve
    t += "  - outside PyTorch          " + bytes_and_count(a.non_torch_bytes) + "  (--reserve: CUDA context, NCCL)\n";
  t += "  - weights                  " + bytes_and_count(a.weights_bytes) + "\n";
  if (a.sglang) {
    const SglangAnswer& g = *a.sglang;
    if (g.rotary_cache_bytes > 0 || !g.mla_backend.empty())
      t += fmt::format("    (with SGLang's rotary cache {}{})\n", format_bytes(g.rotary_cache_bytes),
                       g.mla_backend.empty() ? ""
                                             : fmt::format(" and MLA's w_kc and w_vc copies of kv_b_proj{} {}",
                                                           g.quantization.method == "fp8" ? ", dequantized to bf16" : "",
                                                           format_bytes(g.mla_absorbed_bytes)));
    if (const SglangAnswer::Quantization& q = g.quantization; !q.method.empty())
      t += fmt::format("    ({} from {}: the linear modules hold {} as SGLang loads them ({} quantized: {}{}), {} in "
                       "vLLM's layout{})\n",
                       q.method, q.source, format_bytes(q.linear_bytes), q.modules, q.layout,
                       q.routers > 0 ? fmt::format("; {} router{} kept in the model's type, {}", q.routers,
                                                   q.routers > 1 ? "s" : "", format_bytes(q.router_bytes))
                                     : "",
                       format_bytes(q.vllm_linear_bytes),
                       (q.expert_bytes > 0 ? fmt::format("; fp8 experts {}, vLLM's layout", format_bytes(q.expert_bytes))
                                           : std::string()) +
                           (q.kv_scale_bytes > 0 ? fmt::format("; attention k_scale/v_scale {} B", q.kv_scale_bytes)
                                                 : std::string()));
    if (!g.mxfp4.backend.empty()) {
      const Mxfp4ExpertsLayer& l = g.mxfp4.layer;
      const uint64_t n = uint64_t(g.mxfp4.layers);
      t += fmt::format("    (the MXFP4 experts of {} sparse layers as SGLang's {} holds them, padded to width {} and "
                       "hidden {}: {}; {}{}; vLLM's layout {})\n",
                       g.mxfp4.layers, g.mxfp4.backend, l.intermediate_padded, l.hidden_padded,
                       format_bytes(g.mxfp4.bytes), mxfp4_layer_parts_text(l, n),
                       l.constants_bytes > 0 ? fmt::format(", gemm1 constants {} B", l.constants_bytes * n) : "",
                       format_bytes(g.mxfp4.vllm_bytes));
    }
    if (!g.mla_backend.empty())
      t += fmt::format("  multi-head latent attention by SGLang's {} backend: a latent pool of one head of "
                       "kv_lora_rank + qk_rope_head_dim a token and layer, whole on every rank; page size {}\n",
                       g.mla_backend, g.page_size);
    t += fmt::format("  mem_fraction_static {:.3f} ({})\n", g.mem_fraction_static,
                     g.reserved_mib > 0 ? fmt::format("SGLang's default: ({:.0f} - {:.0f} MiB reserved) / {:.0f} MiB",
                                                      g.gpu_mem_mib, g.reserved_mib, g.gpu_mem_mib)
                                        : std::string("--mem-fraction-static"));
    t += fmt::format("  rest = {:.4f} GiB free after the weights - {:.4f} GiB free before x (1 - {:.3f}) = {:.4f} GiB\n",
                     g.pool.available_gib, g.pool.total_gib, g.mem_fraction_static, g.pool.rest_gib);
    t += fmt::format("  tokens = int(rest x 2^30) // {} B = {}{}\n", format_count(a.kv_bytes_per_token),
                     g.pool.profiled_tokens,
                     g.max_total_tokens > 0 ? fmt::format(", at most --max-total-tokens {}", g.max_total_tokens) : "");
    if (g.sliding_window > 0 && g.hybrid_swa) {
      const uint64_t per_layer = a.kv_bytes_per_token / uint64_t(std::max<int64_t>(a.kv_layers, 1));
      t += fmt::format("  hybrid sliding-window pool (SWAKVPool): {} full layers, {} windowed over {} tokens; "
                       "full_layer_tokens = int({} x {} B / ({} + {} x {})) = {}, swa_layer_tokens = int(full x {}) "
                       "= {}, each in whole pages of {}\n",
                       g.full_layers, g.swa_layers, g.sliding_window, a.kv_bytes_per_token ? g.swa.total_memory / a.kv_bytes_per_token : 0,
                       format_count(a.kv_bytes_per_token), format_count(per_layer * uint64_t(g.full_layers)),
                       g.swa_full_tokens_ratio, format_count(per_layer * uint64_t(g.swa_layers)),
                       g.swa.full_layer_tokens, g.swa_full_tokens_ratio, g.swa.swa_layer_tokens, g.page_size);
    }
    else if (g.sliding_window > 0)
      t += fmt::format("  {} of {} layers slide over a window of {} tokens: SGLang gives this architecture one pool over "
                       "every layer (its hybrid pool is for gpt_oss among the models memplan reads{})\n",
                       g.swa_layers, a.kv_layers, g.sliding_window,
                       g.hybrid_swa ? "" : ", or is off: --disable-hybrid-swa-memory");
    t += fmt::format("  (no profile forward: the activations ({} tokens a chunk) and CUDA graphs (batches up to {}) run "
                     "in the rest)\n",
                     g.chunked_prefill_size, g.cuda_graph_max_bs);
  }
  if (a.trtllm && !a.trtllm->quantization.method.empty()) {
    const TrtllmAnswer::Quantization& q = a.trtllm->quantization;
    if (q.layout == "FP8QDQLinearMethod")
      t += fmt::format("  weights: {} per-tensor fp8 modules ({}), {} B of fp8 weights and scales in vLLM's layout, {} B "
                       "of FP8QDQLinearMethod's scalars (weight_scale, input_scale, inv_input_scale, kv_scales, "
                       "inv_kv_scales) in place of its two; the embedding, the LM head, the norms and the excluded "
                       "modules in the model's type{}\n",
                       q.modules, q.source, format_count(q.linear_bytes), format_count(q.scalar_bytes),
                       q.checkpoint_fp8_cache ? "; the KV cache in fp8 (the checkpoint's kv_cache_quant_algo FP8)" : "");
    else
      t += fmt::format("  weights: {} block-wise fp8 modules ({}), {} B of fp8 weights and 128 x 128 float32 scale grids "
                     "+ {} B of input_scale / inv_input_scale (FP8BlockScalesLinearMethod); the embedding, the LM head "
                     "and the norms in the model's type\n",
                     q.modules, q.source, format_count(q.linear_bytes), format_count(q.scalar_bytes));
  }
  if (a.trtllm) {
    const TrtllmAnswer& r = *a.trtllm;
    t += "  - profiling run's peak     " + bytes_and_count(a.activation_peak_bytes) +
         fmt::format("  ({} tokens, attention as a kernel)\n", r.max_num_tokens);
    t += fmt::format("  available = (total - {} peak) x {} = {} B; blocks of {} tokens: {}\n",
                     format_bytes(r.cache.peak_memory), r.free_gpu_memory_fraction,
                     format_count(static_cast<uint64_t>(std::max(r.cache.available_bytes, 0.0))), r.tokens_per_block,
                     r.cache.blocks);
    if (r.cache.estimate_kv_per_token != a.kv_bytes_per_token)
      t += fmt::format("  the estimate divides by {} B a token (head_dim x KV heads // tp a layer) where the pool holds "
                       "{} ({} whole KV head(s) a rank): {} B for {} free after profiling\n",
                       r.cache.estimate_kv_per_token, a.kv_bytes_per_token, r.kv_heads_per_rank,
                       format_count(r.cache.pool_bytes), format_count(r.cache.free_after));
  }
  if (a.ortgenai) {
    const OrtGenaiAnswer& o = *a.ortgenai;
    t += fmt::format("  budget {} ({} B); past/present shared, each sequence's buffers {} B at max_length {}\n",
                     format_bytes(o.budget_bytes), format_count(o.budget_bytes),
                     format_count(a.kv_bytes_per_token * uint64_t(o.max_length)), o.max_length);
    if (o.max_batch_size > 0) {
      t += fmt::format("  batch {}: buffers {} + prompt step {} (activation peak {}) = {} B\n", o.max_batch_size,
                       format_bytes(o.kv_buffer_bytes), format_bytes(o.step_required_bytes),
                       format_bytes(a.activation_peak_bytes), format_count(o.total_bytes));
      if (o.next_evaluated)
        t += fmt::format("  batch {} would need {} B\n", o.max_batch_size + 1, format_count(o.total_bytes_next));
    }
  }
  t += "\n";
  for (const std::string& line : a.prints) t += line + "\n";
  if (!a.starts) return t + fmt::format("{} would not start: {}\n", a.engine, a.refusal);
  if (a.ortgenai)
    return t + fmt::format("search.batch_size at max_length {}: at most {} sequences\n", a.context,
                           a.max_concurrent_sequences);
  t += fmt::format("KV cache: {} tokens ({}); requests of {} tokens at once: {:.2f}x\n", format_count(a.kv_tokens),
                   format_bytes(a.kv_cache_bytes), a.context, a.max_concurrency);
  return t;
}

nlohmann::ordered_json engines_table_to_json(const EngineTable& t) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const EngineRow& r : t.rows)
    rows.push_back({{"engine", r.engine},
                    {"rules", or_null(r.rules)},
                    {"kv_cache_bytes", r.kv_cache_bytes},
                    {"kv_cache_tokens", r.kv_tokens},
                    {"block_tokens", r.block_tokens},
                    {"max_concurrency", r.max_concurrency},
                    {"starts", r.starts},
                    {"prints", or_null(r.prints)},
                    {"not_modelled", or_null(r.not_modelled)}});
  return {{"schema", kServeEnginesSchema},
          {"model", t.model},
          {"gpu", or_null(t.gpu)},
          {"budget_source", t.budget_source},
          {"context", t.context},
          {"tp", t.tp},
          {"dtype", t.dtype},
          {"total_bytes", t.total_bytes},
          {"weights_bytes", t.weights_bytes},
          {"non_torch_bytes", t.non_torch_bytes},
          {"kv_cache_bytes_per_token", t.kv_bytes_per_token},
          {"engines", rows}};
}

std::string engines_table_to_text(const EngineTable& t) {
  std::string s = fmt::format("{} on {}: requests of {} tokens, tp {}, {} weights {}, KV {} B a token\n", t.model,
                              t.budget_source, t.context, t.tp, t.dtype, format_bytes(t.weights_bytes),
                              format_count(t.kv_bytes_per_token));
  s += fmt::format("  {:<8}{:>14}{:>14}{:>8}{:>14}  {}\n", "engine", "KV cache", "tokens", "block", "concurrency",
                   "it prints");
  for (const EngineRow& r : t.rows)
    s += fmt::format("  {:<8}{:>14}{:>14}{:>8}{:>14}  {}\n", r.engine, format_bytes(r.kv_cache_bytes),
                     format_count(uint64_t(std::max<int64_t>(r.kv_tokens, 0))), r.block_tokens, concurrency_cell(r),
                     r.not_modelled.empty() ? r.prints : r.not_modelled);
  s += "  (each engine's own rule over one analysis: vLLM profiles a forward and takes gpu_memory_utilization of the "
       "total; SGLang takes mem_fraction_static of the free memory and profiles nothing; TensorRT-LLM takes "
       "free_gpu_memory_fraction of what its profiling run leaves)\n";
  return s;
}

std::string engines_table_to_markdown(const EngineTable& t) {
  std::string md = fmt::format("| engine | KV cache | tokens | block | requests of {} tokens | it prints |\n"
                               "|---|---:|---:|---:|---:|---|\n",
                               t.context);
  for (const EngineRow& r : t.rows)
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", r.engine, format_bytes(r.kv_cache_bytes),
                      format_count(uint64_t(std::max<int64_t>(r.kv_tokens, 0))), r.block_tokens, concurrency_cell(r),
                      r.not_modelled.empty() ? "`" + r.prints + "`" : r.not_modelled);
  return md;
}

}  // namespace memplan
