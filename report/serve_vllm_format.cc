// serve --engine vllm's answer and table as text, JSON ("memplan.serve.vllm/1", docs/json.md) and Markdown.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "onnx_import/checked.h"
#include "report/option_choices.h"
#include "report/serve_vllm.h"
#include "report/sizes.h"

namespace memplan {
namespace {

// Said where --engine-version was not given: the release the answer follows may not be the one that will run
// (later releases size differently: README, "Serving").
constexpr const char* kDefaultVersionNote = "memplan's default release; --engine-version names yours";

// The non-torch term's default under a baseline rule (report/serve_vllm.h VllmNonTorch), as the text says it; `rest`
// when a modelled part was said before it.
std::string vllm_non_torch_not_modelled(bool rest = false) {
  return std::string(rest ? "the rest " : "") +
         "not modelled: the CUDA context is in vLLM's start-up snapshot; what appears outside PyTorch after it "
         "(kernels loaded on first use, NCCL's buffers) vLLM logs as non-torch memory: --reserve SIZE adds it";
}

// Where vLLM's CUDA graphs take their memory (Worker.compile_or_warm_up_model, gpu_worker.py at 35d5cda: capture_model
// runs after initialize_from_config has allocated the cache, unless enforce_eager; notes section 6).
// JSON's profile_run.sampler (docs/json.md).
const char* vllm_sampler_path_name(VllmSamplerPath p) {
  switch (p) {
    case VllmSamplerPath::V0Sort: return "v0-sort";
    case VllmSamplerPath::Sort: return "sort";
    case VllmSamplerPath::Triton: return "triton";
    case VllmSamplerPath::FlashInfer: return "flashinfer";
    case VllmSamplerPath::Gumbel: return "gumbel";
  }
  return "sort";
}

std::string vllm_cuda_graphs(const VllmAnswer& a) {
  if (a.settings.enforce_eager) return "none (--enforce-eager): nothing captured, the KV cache the same";
  if (a.settings.cuda_graph_estimate > 0)
    return fmt::format("estimated before the cache is sized and taken off it: {} (--cuda-graph-memory, vLLM's "
                       "profile_cudagraph_memory as its log states it)", format_bytes(a.settings.cuda_graph_estimate));
  // Model Runner V2's profile_cudagraph_memory returns 0 (cost_models/vllm_engine.h VllmModelRunner).
  if (a.settings.runner == VllmModelRunner::V2)
    return fmt::format("captured after the cache is sized, outside this budget (Model Runner V2 subtracts no "
                       "estimate): in the {} that gpu_memory_utilization leaves",
                       format_bytes(a.memory.total - a.memory.requested));
  // V0 (vllm/worker/worker.py at 6ae5229, Worker._warm_up_model): capture_model after initialize_cache.
  return fmt::format("captured after the cache is sized, outside this budget: in the {} that gpu_memory_utilization "
                     "leaves{}",
                     format_bytes(a.memory.total - a.memory.requested),
                     a.settings.rule.v0_engine ? "" : " (with the post-capture sampler warm-up)");
}

// A table row's concurrency: the answer, "no start" (vLLM refuses: no memory, or the GPU), "not modelled".
std::string vllm_concurrency_cell(const VllmTableRow& r) {
  if (r.starts) return fmt::format("{:.2f}x", r.max_concurrency);
  return r.not_answered.empty() || r.vllm_refuses ? "no start" : "not modelled";
}

bool hybrid(const VllmAnswer& a) { return a.grouping.group_size > 0; }

// --data-parallel-size: every DP rank is an engine with its own cache of this rank's budget (gpu_worker.py's rule is
// per GPU); D x rank 0's tokens, rank 0 holding the most experts (a rank with fewer holds more tokens).
int64_t vllm_all_dp_ranks_tokens(const VllmAnswer& a) {
  return static_cast<int64_t>(checked_mul(static_cast<uint64_t>(a.capacity.tokens), static_cast<uint64_t>(a.settings.dp),
                                          "KV tokens"));
}

// A windowed model's KV cache by kind of layer (optional keys of kv_cache: a model that states no window has none):
// the windowed layers and, in a hybrid model, the full ones, each kind's bytes per token and the vLLM groups it
// makes (cost_models/vllm_kv_groups.h); the blocks one request holds at most; a hybrid model's group size and
// padding layers.
void add_layer_groups(const VllmAnswer& a, nlohmann::ordered_json& kv) {
  if (a.sliding_window <= 0) return;
  auto groups_of = [&](int64_t window) {
    int64_t n = 0;
    for (const VllmKvGroup& g : a.grouping.groups) n += g.window == window;
    return hybrid(a) ? n : int64_t{1};
  };
  const uint64_t per_layer = hybrid(a) ? a.layer_bytes_per_token : a.kv_bytes_per_token / uint64_t(a.kv_layers);
  nlohmann::ordered_json groups = nlohmann::ordered_json::array(
      {{{"attention", "sliding_window"}, {"sliding_window", a.sliding_window}, {"layers", a.sliding_layer_count},
        {"bytes_per_token", per_layer * uint64_t(a.sliding_layer_count)}, {"vllm_groups", groups_of(a.sliding_window)}}});
  if (hybrid(a))
    groups.push_back({{"attention", "full"}, {"sliding_window", nullptr},
                      {"layers", a.kv_layers - a.sliding_layer_count},
                      {"bytes_per_token", per_layer * uint64_t(a.kv_layers - a.sliding_layer_count)},
                      {"vllm_groups", groups_of(0)}});
  kv["layer_groups"] = groups;
  kv["blocks_per_request"] = a.capacity.blocks_per_request;
  if (hybrid(a)) {
    kv["group_size"] = a.grouping.group_size;
    kv["padding_layers"] = a.grouping.padding_layers;
    kv["start_check_bytes"] = a.capacity.start_check_bytes;
  }
}

// What a release's start check counts (cost_models/vllm_engine.h VllmKvStartCheck).
const char* start_check_text(VllmKvStartCheck check) {
  switch (check) {
    case VllmKvStartCheck::EveryLayer: return "every layer's blocks, no padding slot: 0.11 to 0.13";
    case VllmKvStartCheck::FirstGroup: return "group_size x the first group's blocks: 0.14 to 0.18.0";
    case VllmKvStartCheck::EveryGroup: return "group_size x every group's blocks: 0.18.1 on";
  }
  return "";
}

// A windowed model's table: the bound on a request's blocks, which depends on each GPU's max_num_batched_tokens
// (vLLM's default differs by GPU), each value said once.
std::string window_note(const VllmTable& t) {
  std::map<int64_t, int64_t> bounds;  // max_num_batched_tokens -> blocks per request
  for (const VllmTableRow& r : t.rows)
    if (r.blocks_per_request > 0) bounds[r.max_num_batched_tokens] = r.blocks_per_request;
  std::string each;
  for (auto it = bounds.rbegin(); it != bounds.rend(); ++it)
    each += fmt::format("{}{} at max_num_batched_tokens {}", each.empty() ? "" : ", ", it->second,
                        format_count(it->first));
  if (t.sliding_layer_count < t.kv_layers)
    return fmt::format("({} of {} layers slide over a window of {} tokens, in vLLM's hybrid groups: a request holds "
                       "at most the sum of its groups' blocks: {})",
                       t.sliding_layer_count, t.kv_layers, format_count(t.sliding_window), each);
  return fmt::format("(every layer slides over a window of {} tokens: a request holds at most cdiv(min({} - 1 + "
                     "max_num_batched_tokens, {}), {}) + 1 blocks: {})",
                     format_count(t.sliding_window), t.sliding_window, t.max_model_len, t.block_size, each);
}

// An answered row served in another type than the table's (vLLM's --dtype auto follows the GPU).
bool differs(const VllmTable& t, const VllmTableRow& r) {
  return r.not_answered.empty() && (r.dtype != t.dtype || r.kv_bytes_per_token != t.kv_bytes_per_token);
}

std::string type_note(const VllmTableRow& r) {
  return fmt::format("{}: served in {} (--dtype auto's type there), KV {} B per token", r.gpu, r.dtype,
                     format_count(r.kv_bytes_per_token));
}

}  // namespace

void vllm_table_common_type(VllmTable& t) {
  std::vector<std::pair<std::pair<std::string, uint64_t>, int>> seen;  // (type, bytes) -> rows, in catalog order
  for (const VllmTableRow& r : t.rows) {
    if (!r.not_answered.empty()) continue;
    const std::pair<std::string, uint64_t> key{r.dtype, r.kv_bytes_per_token};
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == key; });
    if (it == seen.end()) seen.push_back({key, 1});
    else ++it->second;
  }
  if (seen.empty()) return;
  const auto most = std::max_element(seen.begin(), seen.end(),  // the first of the commonest
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  t.dtype = most->first.first;
  t.kv_bytes_per_token = most->first.second;
}

nlohmann::ordered_json vllm_to_json(const VllmAnswer& a) {
  const VllmEngineSettings& e = a.settings.engine;
  nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
  for (const auto& [in, out] : a.kv.pairs) pairs.push_back({{"past", in}, {"present", out}});
  nlohmann::ordered_json j = {
      {"schema", kServeVllmSchema},
      {"model", a.model},
      {"engine", "vllm"},
      {"engine_rules", vllm_rules_name(a.settings.version, a.settings.runner)},
      {"gpu", a.gpu.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.gpu)},
      {"budget_source", a.budget_source},
      {"settings",
       {{"gpu_memory_utilization", e.gpu_memory_utilization},
        {"max_model_len", e.max_model_len},
        {"max_model_len_source", a.settings.max_model_len_source},
        {"max_num_batched_tokens", e.max_num_batched_tokens},
        {"max_num_batched_tokens_default", a.settings.default_batched_tokens},
        {"max_num_seqs", e.max_num_seqs},
        {"max_num_seqs_default", a.settings.default_num_seqs},
        {"block_size", e.block_size},
        {"dtype", a.dtype},
        {"kv_cache_dtype", a.kv_cache_dtype},
        {"quantization", a.quantization.method.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.quantization.method)},
        {"enable_lora", a.enable_lora},
        {"max_loras", a.enable_lora ? nlohmann::ordered_json(a.max_loras) : nullptr},
        {"max_lora_rank", a.enable_lora ? nlohmann::ordered_json(a.max_lora_rank) : nullptr},
        {"tensor_parallel_size", a.settings.tp},
        {"data_parallel_size", a.settings.dp},
        {"enable_expert_parallel", a.moe.expert_parallel},
        {"engine_version", a.settings.version_text},
        {"engine_version_default", !a.settings.version_given},
        {"usage_context", kUsageContextChoices.name_of(a.settings.usage_context)},
        {"performance_mode", kPerformanceModeChoices.name_of(a.settings.performance_mode)},
        {"enforce_eager", a.settings.enforce_eager},
        {"model_runner", a.settings.runner == VllmModelRunner::V2 ? "v2" : "v1"},
        {"flashinfer", !a.settings.flashinfer ? "auto" : *a.settings.flashinfer ? "yes" : "no"},
        {"cuda_graphs", vllm_cuda_graphs(a)}}},
      {"kv_cache",
       {{"cached_dim", a.kv.cached_dim},
        {"new_tokens_dim", a.kv.new_dim},
        {"pairs", pairs},
        {"kv_heads", a.kv.kv_heads > 0 ? nlohmann::ordered_json(a.kv.kv_heads) : nullptr},
        {"kv_heads_per_rank", a.kv_heads_per_rank > 0 ? nlohmann::ordered_json(a.kv_heads_per_rank) : nullptr},
        {"bytes_per_token", a.kv_bytes_per_token},
        {"block_bytes", a.block_bytes}}},
      {"profile_run",
       {{"tokens", e.max_num_batched_tokens},
        {"requests", a.settings.profile_requests},
        {"forward_peak_allocated_bytes", a.forward_peak_allocated},
        {"hidden_states_bytes", a.hidden_states_bytes},
        {"cublas_workspace_bytes", a.kept_workspace_bytes},
        {"logits_width", a.padded_vocab > 0 ? nlohmann::ordered_json(a.padded_vocab) : nullptr},
        {"sampler", vllm_sampler_path_name(a.sampler)},
        {"sampler_buffer_rows",
         a.sampler == VllmSamplerPath::Triton ? nlohmann::ordered_json(a.sampler_buffer_rows) : nullptr},
        {"sampler_multiprocessors", a.sampler == VllmSamplerPath::Triton && a.sampler_multiprocessors > 0
                                        ? nlohmann::ordered_json(a.sampler_multiprocessors)
                                        : nullptr},
        {"sampler_peak_bytes", a.sampler_peak_bytes},
        {"peak_set_by", a.sampler_sets_peak ? "sampler" : "forward"}}},
      {"replaced",
       {{"lm_head", a.lm_head.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.lm_head)},
        {"attention_kernels", a.attention_kernels},
        {"repeat_kv", a.repeat_kv}}},
      {"memory",
       {{"total_bytes", a.memory.total},
        {"requested_bytes", a.memory.requested},
        {"weights_bytes", a.memory.weights},
        {"lora_stacks_bytes", a.lora_stacks_bytes},
        {"rotary_cache_bytes", a.rotary_cache_bytes},
        {"vocab_padding_bytes", a.vocab_padding_bytes},
        {"quantized_linear_bytes", a.quantization.method.empty() ? nlohmann::ordered_json(nullptr)
                                                                  : nlohmann::ordered_json(a.quantized.quantized_bytes)},
        {"activation_peak_bytes", a.memory.activation_peak},
        {"non_torch_bytes", a.memory.non_torch},
        {"custom_all_reduce_bytes", a.custom_all_reduce_bytes},
        {"cuda_graph_estimate_bytes", a.memory.cuda_graphs},
        {"available_kv_cache_bytes", a.memory.available}}},
      {"num_gpu_blocks", a.capacity.num_blocks},
      {"gpu_kv_cache_tokens", a.capacity.tokens},
      {"gpu_kv_cache_tokens_all_dp_ranks", vllm_all_dp_ranks_tokens(a)},
      {"max_concurrency", a.capacity.max_concurrency},
      {"max_concurrent_sequences", a.max_concurrent_sequences},
      {"starts", a.capacity.starts},
      {"refusal", a.capacity.starts ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.capacity.refusal)},
      {"estimated_max_model_len",
       a.capacity.starts ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.capacity.estimated_max_model_len)}};
  add_layer_groups(a, j["kv_cache"]);
  if (a.moe.blocks > 0) j["replaced"]["fused_moe"] = vllm_moe_to_json(a.moe);  // a mixture of experts only
  if (a.mla.on) j["replaced"]["mla"] = vllm_mla_to_json(a.mla);  // deepseek_v3 only
  if (a.fp8_block.on)  // block-wise fp8, or per-tensor fp8 experts
    j["replaced"][a.fp8_block.block_n > 0 ? "fp8_block" : "fp8_per_tensor"] = vllm_fp8_block_to_json(a.fp8_block);
  if (a.quantization.method == "nvfp4")  // ModelOpt NVFP4 (cost_models/vllm_nvfp4.h)
    j["replaced"]["nvfp4"] = {
        {"kernel", a.quantization.nvfp4_marlin() ? "marlin" : "fp4_gemm"},
        {"gemm_workspace_bytes", a.quantized.workspace_bytes},
        {"call_layer", a.nvfp4_call.node.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.nvfp4_call.node)},
        {"call_bytes", a.nvfp4_call.bytes},
        {"call_peak_allocated_bytes", a.nvfp4_call.peak},
        {"experts", a.moe.nvfp4 ? nlohmann::ordered_json{
                                      {"kernel", "marlin"},
                                      {"sparse_layers", a.moe.blocks},
                                      {"unquantized_routers", a.nvfp4_unquantized_routers},
                                      {"width", a.moe.nvfp4_layer.width},
                                      {"layer_bytes", a.moe.nvfp4_layer.total()},
                                      {"weight_bytes", a.moe.nvfp4_layer.weight_bytes},
                                      {"scale_bytes", a.moe.nvfp4_layer.scale_bytes},
                                      {"global_scale_bytes", a.moe.nvfp4_layer.global_scale_bytes},
                                      {"input_scale_bytes", a.moe.nvfp4_layer.input_scale_bytes},
                                      {"workspace_bytes", a.moe.nvfp4_layer.workspace_bytes}}
                                : nlohmann::ordered_json(nullptr)}};
  return j;
}

std::string vllm_to_text(const VllmAnswer& a) {
  const VllmEngineSettings& e = a.settings.engine;
  const VllmMemory& m = a.memory;
  const bool absolute = a.settings.rule.absolute_budget;
  std::string t = fmt::format("{} served by vLLM {} ({} rules{}{}), {}\n", a.model, a.settings.version_text,
                              a.settings.rule.v0_engine ? "V0" : "V1",
                              absolute ? ": the profile's whole peak and all non-torch memory" : "",
                              a.settings.version_given ? "" : fmt::format("; {}", kDefaultVersionNote), a.budget_source);
  t += fmt::format("  dtype {}, kv_cache_dtype {}\n", a.dtype, a.kv_cache_dtype);
  const VllmUsageContext context = a.settings.usage_context;
  const std::string default_step = fmt::format(
      " (vLLM's default{}{})",
      context == VllmUsageContext::Serve      ? ""
      : context == VllmUsageContext::LlmClass ? " for LLM(...)"
                                              : " for the engine's context",
      a.settings.performance_mode == VllmPerformanceMode::Throughput ? ", doubled by --performance-mode throughput" : "");
  t += fmt::format("  max_model_len {} ({}), max_num_batched_tokens {}{}, max_num_seqs {}{}, block_size {}{}\n",
                   format_count(e.max_model_len), a.settings.max_model_len_source,
                   format_count(e.max_num_batched_tokens), a.settings.default_batched_tokens ? default_step : "",
                   e.max_num_seqs, a.settings.default_num_seqs ? default_step : "", e.block_size,
                   a.settings.tp > 1 ? fmt::format(", tensor_parallel_size {}", a.settings.tp) : "");
  t += fmt::format("  requested memory   {:>12}  total {} x gpu_memory_utilization {}\n", format_bytes(m.requested),
                   format_bytes(m.total), e.gpu_memory_utilization);
  t += fmt::format("  - weights          {:>12}{}{}\n", format_bytes(m.weights),
                   a.rotary_cache_bytes > 0 ? fmt::format("  with the rotary cache, {}", format_bytes(a.rotary_cache_bytes))
                                            : "  (the rotary cache not counted: the model states no position limit)",
                   a.enable_lora ? fmt::format(", LoRA stacks of {} ({} slots of rank {})", format_bytes(a.lora_stacks_bytes),
                                               a.max_loras, a.max_lora_rank)
                                 : "");
  if (a.moe.mxfp4) {
    t += fmt::format("                                   with the experts of {} sparse layers in MXFP4 ({}): {} where "
                     "the model's type takes {}\n",
                     a.moe.blocks, a.quantization_source, format_bytes(a.quantized.quantized_bytes),
                     format_bytes(a.quantized.dense_bytes));
  } else if (!a.quantization.method.empty()) {
    const VllmQuantization& q = a.quantization;
    t += fmt::format("                                   with {} linear layers ({} vLLM modules) in {}{} ({}): {} "
                     "where the model's type takes {}{}\n",
                     a.quantized.layers, a.quantized.modules, q.method,
                     q.method == "fp8"     ? (q.static_activations ? ", static activation scales" : "")
                     : q.method == "nvfp4" ? (q.nvfp4_marlin() ? ", Marlin's repacked layout (weight-only below compute "
                                                               "capability 10.0)"
                                                             : ", the FP4 GEMM's padded layout")
                                           : fmt::format(" {}-bit, groups of {}{}", q.bits, q.group_size,
                                                         q.desc_act ? ", act-order" : ""),
                     a.quantization_source, format_bytes(a.quantized.quantized_bytes), format_bytes(a.quantized.dense_bytes),
                     a.quantized.dequantized_bytes > 0
                         ? fmt::format("; the profile run dequantizes one layer at a time, {} at most",
                                       format_bytes(a.quantized.dequantized_bytes))
                         : "");
    t += vllm_fp8_block_to_text(a.fp8_block);
    if (a.moe.nvfp4) {
      const VllmNvfp4Experts& l = a.moe.nvfp4_layer;
      const uint64_t n = static_cast<uint64_t>(a.moe.blocks);
      t += fmt::format("                                   of which the experts of {} sparse layers, repacked for "
                       "Marlin{}: {} (weights {}, fp8 scales {}, global scales {}, {}workspaces {}) where the model's "
                       "type takes {}{}\n",
                       a.moe.blocks,
                       l.width != a.moe.intermediate_per_rank ? fmt::format(" with the width padded to {}", l.width)
                                                              : "",
                       format_bytes(a.moe.expert_weight_bytes), format_bytes(l.weight_bytes * n),
                       format_bytes(l.scale_bytes * n), format_bytes(l.global_scale_bytes * n),
                       l.input_scale_bytes > 0 ? fmt::format("input scales {}, ", format_bytes(l.input_scale_bytes * n))
                                               : "",
                       format_bytes(l.workspace_bytes * n),
                       format_bytes(a.moe.graph_expert_bytes),
                       a.nvfp4_unquantized_routers > 0
                           ? fmt::format("; {} routers stay in the model's type", a.nvfp4_unquantized_routers)
                           : "");
    }
    if (q.method == "nvfp4" && !a.nvfp4_call.node.empty())
      t += fmt::format("                                   each call {}: {} at most ({}){}\n",
                       q.nvfp4_marlin() ? "takes Marlin's float32 reduction buffer" : "quantizes its input to FP4",
                       format_bytes(a.nvfp4_call.bytes), a.nvfp4_call.node,
                       a.quantized.workspace_bytes > 0
                           ? fmt::format("; FlashInfer's GEMM workspace {}", format_bytes(a.quantized.workspace_bytes))
                           : "");
  }
  if (a.vocab_padding_bytes > 0)
    t += fmt::format("                                   with the vocabulary padded from {} to {} rows, {}\n",
                     format_count(a.vocab),
                     format_count(a.padded_vocab), format_bytes(a.vocab_padding_bytes));
  std::string sampler = a.settings.rule.v0_engine ? "the sampler" : "the sampler's warm-up";
  if (a.sampler == VllmSamplerPath::FlashInfer) sampler += " (FlashInfer's top_k_top_p_sampling_from_logits)";
  if (a.sampler == VllmSamplerPath::Triton)
    sampler += fmt::format(" (Triton top-k/top-p, its buffer {} x the vocabulary{})", a.sampler_buffer_rows,
                           a.sampler_multiprocessors > 0
                               ? ""
                               : ": the GPU's multiprocessors not known, the largest it can be");
  t += fmt::format("  - activation peak  {:>12}  profile run: {} tokens over {} dummy requests; {} sets the peak\n",
                   format_bytes(m.activation_peak), format_count(e.max_num_batched_tokens), a.settings.profile_requests,
                   a.sampler_sets_peak ? sampler : "the forward");
  // Where the figure comes from: --reserve, or the rule's default (report/serve_vllm.h VllmNonTorch), and what of it
  // the rule takes.
  const std::string& rule_version = a.settings.version_text;
  const bool v0 = a.settings.rule.v0_engine;
  const std::string rank_data = a.settings.rule.rank_data_after_baseline ? " and its 8 MiB rank_data tensor" : "";
  std::string why;
  if (absolute)
    why = fmt::format("{}: {} charges every byte outside PyTorch on the GPU, the CUDA context, NCCL and other "
                      "processes included", a.non_torch_given ? "--reserve" : "the catalog's CUDA context reserve",
                      rule_version);
  else if (a.non_torch_given && v0 && a.custom_all_reduce_bytes == 0)
    why = fmt::format("--reserve: the non-torch memory since init_device measured the baseline, which {} charges; the "
                      "CUDA context is before it", rule_version);
  else if (a.non_torch_given && a.custom_all_reduce_bytes > 0)
    why = v0 ? fmt::format("--reserve with NCCL's communicators, and the custom all-reduce's IPC buffers{}, {} B: {} "
                           "sets them up after init_device measured its baseline",
                           rank_data, format_count(a.custom_all_reduce_bytes), rule_version)
             : fmt::format("--reserve with NCCL's communicators, and the custom all-reduce's IPC buffers, {} B: {} "
                           "sets both up after its snapshot", format_count(a.custom_all_reduce_bytes), rule_version);
  else if (a.non_torch_given)
    why = "--reserve";
  else if (a.custom_all_reduce_bytes > 0)
    why = fmt::format("the custom all-reduce's IPC buffers{}, {} B, which {} sets up after its {}; ", rank_data,
                      format_count(a.custom_all_reduce_bytes), rule_version, v0 ? "baseline" : "snapshot") +
          vllm_non_torch_not_modelled(true);
  else
    why = vllm_non_torch_not_modelled();
  t += fmt::format("  - non-torch memory {:>12}  ({})\n", format_bytes(m.non_torch), why);
  if (m.cuda_graphs > 0)
    t += fmt::format("  - CUDA graphs      {:>12}  (--cuda-graph-memory: vLLM's estimate, subtracted from 0.20)\n",
                     format_bytes(m.cuda_graphs));
  t += fmt::format("  = available KV cache memory: {}\n",
                   m.available > 0 ? format_bytes(static_cast<uint64_t>(m.available)) : "none");
  t += "  CUDA graphs: " + vllm_cuda_graphs(a) + "\n";
  t += fmt::format("  KV cache: {} B per token{}, blocks of {} tokens = {} B\n", format_count(a.kv_bytes_per_token),
                   a.kv_heads_per_rank > 0 ? fmt::format(" ({} of {} KV heads per rank)", a.kv_heads_per_rank, a.kv.kv_heads) : "",
                   e.block_size, format_count(a.block_bytes));
  const int64_t full_blocks = (e.max_model_len + e.block_size - 1) / e.block_size;
  const int64_t window_blocks =
      (std::min(a.sliding_window - 1 + e.max_num_batched_tokens, e.max_model_len) + e.block_size - 1) / e.block_size + 1;
  if (a.sliding_window > 0 && !hybrid(a))
    t += fmt::format("  KV cache groups: sliding window {} on all {} layers, {} B per token (vLLM's SlidingWindowSpec); "
                     "full attention: none\n"
                     "  a request holds at most cdiv(min({} - 1 + {}, {}), {}) + 1 = {} blocks, not cdiv({}, {}) = {}\n",
                     format_count(a.sliding_window), a.kv_layers, format_count(a.kv_bytes_per_token),
                     a.sliding_window, e.max_num_batched_tokens, e.max_model_len, e.block_size,
                     a.capacity.blocks_per_request, e.max_model_len, e.block_size, full_blocks);
  if (hybrid(a)) {
    const int64_t full_layers = a.kv_layers - a.sliding_layer_count;
    int64_t sliding_groups = 0;
    for (const VllmKvGroup& g : a.grouping.groups) sliding_groups += g.window > 0;
    const int64_t full_groups = int64_t(a.grouping.groups.size()) - sliding_groups;
    t += fmt::format("  KV cache groups (vLLM's hybrid allocator): sliding window {} on {} layers, {} B per token; "
                     "full attention on {} layers, {} B per token\n"
                     "  {} groups of {} layers ({} sliding, {} full; {} padding layers), a block of the {} pools = {} B; "
                     "GPU KV cache size = blocks // {} x {}\n"
                     "  a request holds at most {} x (cdiv(min({} - 1 + {}, {}), {}) + 1) + {} x cdiv({}, {}) = "
                     "{} x {} + {} x {} = {} blocks\n",
                     format_count(a.sliding_window), a.sliding_layer_count,
                     format_count(a.layer_bytes_per_token * uint64_t(a.sliding_layer_count)), full_layers,
                     format_count(a.layer_bytes_per_token * uint64_t(full_layers)), a.grouping.groups.size(),
                     a.grouping.group_size, sliding_groups, full_groups, a.grouping.padding_layers,
                     a.grouping.group_size, format_count(a.block_bytes), a.grouping.groups.size(), e.block_size,
                     sliding_groups, a.sliding_window, e.max_num_batched_tokens, e.max_model_len, e.block_size,
                     full_groups, e.max_model_len, e.block_size, sliding_groups, window_blocks, full_groups,
                     full_blocks, a.capacity.blocks_per_request);
    t += fmt::format("  vLLM's start check asks {} B for one request ({})\n", format_count(a.capacity.start_check_bytes),
                     start_check_text(a.settings.rule.kv_start_check));
  }
  std::string replaced = a.lm_head.empty() ? "no LM head found (logits counted as the graph has them)"
                                           : "the LM head (" + a.lm_head + ") computed at the sampled rows only";
  replaced += fmt::format("; attention as a kernel at {} places", a.attention_kernels);
  if (!a.repeat_kv.empty()) replaced += fmt::format("; repeat_kv's {} expansions read in place", a.repeat_kv.size());
  replaced += vllm_moe_to_text(a.moe);
  replaced += vllm_mla_to_text(a.mla);
  t += "  replaced by vLLM's kernels: " + replaced + "\n\n";
  // V0 answers in blocks (its executor logs the number of GPU blocks at initialize_cache), V1 in tokens.
  if (a.settings.rule.v0_engine) t += fmt::format("# GPU blocks: {}\n", a.capacity.num_blocks);
  t += fmt::format("GPU KV cache size: {} tokens\n", format_count(a.capacity.tokens));
  if (a.settings.dp > 1)
    t += fmt::format("  (one data-parallel rank's engine, {}; each of the {} ranks sizes its own cache: {} tokens "
                     "in all, at least)\n",
                     a.moe.expert_parallel ? "rank 0's experts, the most of any rank"
                                           : "a replica of the one-rank answer (a dense model: nothing is shared)",
                     a.settings.dp, format_count(vllm_all_dp_ranks_tokens(a)));
  t += fmt::format("Maximum concurrency for {} tokens per request: {:.2f}x\n", format_count(e.max_model_len),
                   a.capacity.max_concurrency);
  if (a.capacity.starts && a.capacity.blocks_per_request > a.capacity.num_blocks)
    t += fmt::format("vLLM starts, though one request of {} tokens takes {} blocks of the {}: its start check counts "
                     "{}\n",
                     format_count(e.max_model_len), format_count(a.capacity.blocks_per_request),
                     format_count(a.capacity.num_blocks), start_check_text(a.settings.rule.kv_start_check));
  if (!a.capacity.starts) {
    t += "vLLM would not start: " + a.capacity.refusal;
    if (a.capacity.estimated_max_model_len > 0)
      t += fmt::format(" (the longest that fits: --context {})", a.capacity.estimated_max_model_len);
    t += "\n";
  }
  return t;
}

nlohmann::ordered_json vllm_table_to_json(const VllmTable& t) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const VllmTableRow& r : t.rows)
    rows.push_back({{"gpu", r.gpu},
                    {"memory_bytes", r.memory_bytes},
                    {"requested_bytes", r.requested_bytes},
                    {"available_kv_cache_bytes", r.available_bytes},
                    {"gpu_kv_cache_tokens", r.kv_tokens},
                    {"max_concurrency", r.max_concurrency},
                    {"starts", r.starts}});
  for (size_t i = 0; i < t.rows.size(); ++i) {  // a GPU not answered says why (optional key)
    if (!t.rows[i].not_answered.empty()) rows[i]["not_answered"] = t.rows[i].not_answered;
    if (t.sliding_window > 0 && t.rows[i].blocks_per_request > 0)  // a windowed model's bound (optional key)
      rows[i]["blocks_per_request"] = t.rows[i].blocks_per_request;
    if (!t.rows[i].mla_backend.empty()) {  // deepseek_v3: this GPU's MLA backend and block (optional keys)
      rows[i]["mla_backend"] = t.rows[i].mla_backend;
      rows[i]["block_size"] = t.rows[i].block_size;
    }
    if (differs(t, t.rows[i])) {  // --dtype auto's type on this GPU is not the table's (optional keys)
      rows[i]["dtype"] = t.rows[i].dtype;
      rows[i]["kv_cache_bytes_per_token"] = t.rows[i].kv_bytes_per_token;
    }
  }
  nlohmann::ordered_json j = {{"schema", kServeVllmSchema},
                              {"model", t.model},
                              {"engine", "vllm"},
                              {"engine_version", t.engine_version},
                              {"engine_version_default", !t.engine_version_given},
                              {"max_model_len", t.max_model_len},
                              {"block_size", t.block_size},
                              {"gpu_memory_utilization", t.gpu_memory_utilization},
                              {"dtype", t.dtype},
                              {"kv_cache_bytes_per_token", t.kv_bytes_per_token},
                              {"non_torch_bytes", t.non_torch_bytes},
                              {"gpus", rows}};
  if (t.sliding_window > 0) j["sliding_window"] = t.sliding_window;  // optional: every layer's window
  if (t.custom_all_reduce_bytes > 0) j["custom_all_reduce_bytes"] = t.custom_all_reduce_bytes;  // optional: tp >= 2
  return j;
}

std::string vllm_table_to_text(const VllmTable& t) {
  std::string text = fmt::format(
      "vLLM {}'s KV cache{} at max_model_len {} (gpu_memory_utilization {}, {}, KV {} B per token, blocks of {})\n"
      "  {:<12}{:>12}{:>12}{:>14}{:>16}{:>14}\n",
      t.engine_version, t.engine_version_given ? "" : fmt::format(" ({})", kDefaultVersionNote),
      format_count(t.max_model_len), t.gpu_memory_utilization, t.dtype, format_count(t.kv_bytes_per_token),
      t.mla ? fmt::format("each GPU's MLA backend's at this release, from --block-size {} (the JSON's rows give "
                          "each backend and block)", t.block_size)
            : std::to_string(t.block_size),
      "GPU",
      "memory", "requested", "KV memory", "KV tokens", "concurrency");
  for (const VllmTableRow& r : t.rows)
    text += fmt::format("  {:<12}{:>12}{:>12}{:>14}{:>16}{:>14}\n", r.gpu, format_bytes(r.memory_bytes),
                        format_bytes(r.requested_bytes),
                        r.available_bytes > 0 ? format_bytes(static_cast<uint64_t>(r.available_bytes)) : "none",
                        format_count(r.kv_tokens), vllm_concurrency_cell(r));
  for (const VllmTableRow& r : t.rows)
    if (!r.not_answered.empty()) text += "  " + r.gpu + ": " + r.not_answered + "\n";
  for (const VllmTableRow& r : t.rows)
    if (differs(t, r)) text += "  " + type_note(r) + "\n";
  if (t.sliding_window > 0) text += "  " + window_note(t) + "\n";
  const std::string all_reduce =
      t.custom_all_reduce_bytes == 0
          ? ""
          : fmt::format("the custom all-reduce's IPC buffers{}, {} B, which {} sets up after its snapshot",
                        t.custom_all_reduce_rank_data ? " and its rank_data tensor" : "",
                        format_count(t.custom_all_reduce_bytes), t.engine_version);
  const std::string source =
      t.non_torch_given      ? "--reserve" + (all_reduce.empty() ? "" : ", and " + all_reduce)
      : t.non_torch_absolute ? "the catalog's CUDA context reserve, which this rule charges"
                             : (all_reduce.empty() ? "" : all_reduce + "; ") + vllm_non_torch_not_modelled(!all_reduce.empty());
  text += fmt::format("  (non-torch memory {} each: {}; GiB = 2^30 bytes)\n", format_bytes(t.non_torch_bytes), source);
  return text;
}

std::string vllm_table_to_markdown(const VllmTable& t) {
  std::string md = fmt::format(
      "| GPU | memory | requested | KV memory | GPU KV cache tokens | concurrency at {} tokens |\n"
      "|---|---:|---:|---:|---:|---:|\n",
      format_count(t.max_model_len));
  for (const VllmTableRow& r : t.rows)
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", r.gpu, format_bytes(r.memory_bytes),
                      format_bytes(r.requested_bytes),
                      r.available_bytes > 0 ? format_bytes(static_cast<uint64_t>(r.available_bytes)) : "none",
                      format_count(r.kv_tokens), vllm_concurrency_cell(r));
  std::string notes;
  for (const VllmTableRow& r : t.rows)
    if (differs(t, r)) notes += type_note(r) + "\n";
  if (!notes.empty()) md += "\n" + notes;
  if (t.sliding_window > 0) md += "\n" + window_note(t) + "\n";
  md += fmt::format("\nvLLM {}'s rule{}.\n", t.engine_version,
                    t.engine_version_given ? "" : fmt::format(" ({})", kDefaultVersionNote));
  return md;
}

}  // namespace memplan
