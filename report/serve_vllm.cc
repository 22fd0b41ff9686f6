#include "report/serve_vllm.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>

#include "cost_models/engine_kernels.h"
#include "cost_models/graph_facts.h"
#include "cost_models/mxfp4_experts.h"
#include "cost_models/vllm_nvfp4.h"
#include "cost_models/runtime_constants.h"
#include "cost_models/runtime_rules.h"
#include "cost_models/vllm_weights.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "report/estimate.h"
#include "report/option_choices.h"
#include "report/sizes.h"

namespace memplan {
namespace {

std::vector<std::string> present_outputs(const KvCache& kv) {
  std::vector<std::string> out;
  for (const auto& [past, present] : kv.pairs) out.push_back(present);
  return out;
}

}  // namespace

uint64_t vllm_shared_weights(const VllmAnswer& v) {
  return v.memory.weights - v.lora_stacks_bytes - v.rotary_cache_bytes - v.vocab_padding_bytes -
         v.mla.module_workspace_bytes;
}

double vllm_gpu_memory_utilization(const ServeSettings& s) {
  return s.gpu_memory_utilization >= 0 ? s.gpu_memory_utilization
                                       : vllm_rule(s.engine_version).default_gpu_memory_utilization;
}

namespace {

VllmResolved resolve(ServeProbe& probe, const ServeSettings& s, int tp, uint64_t total_memory,
                     const std::string& gpu_name) {
  VllmResolved r;
  r.tp = tp;
  r.dp = s.data_parallel_size;
  r.version = vllm_version(s.engine_version);
  r.rule = vllm_rule(s.engine_version);
  r.version_text = s.engine_version;
  r.version_given = s.engine_version_given;
  r.enforce_eager = s.enforce_eager;
  r.flashinfer = kFlashInferChoices.parse(s.flashinfer, "--flashinfer");
  if (r.flashinfer == true && r.rule.flashinfer_sampler_unread)
    throw InputError("--flashinfer yes with --engine-version " + s.engine_version + ": 0.8's V1 sampler ran "
                     "FlashInfer's kernels only below FlashInfer 0.2.3 (its TopKTopPSampler), and which FlashInfer "
                     "ran there is not read; give --flashinfer no (the PyTorch sort) or a later --engine-version");
  // 0.8's to 0.10's step defaults came from a device-name test the notes hold only from a fork's copy: not guessed.
  if (r.rule.needs_step_flags && (s.max_batched_tokens == 0 || s.max_num_seqs == 0))
    throw InputError("--engine-version " + s.engine_version + " needs --max-batched-tokens and --max-num-seqs (the "
                     "values the vLLM log states: its defaults for the GPU are not modelled)");
  r.engine.gpu_memory_utilization = vllm_gpu_memory_utilization(s);
  r.engine.block_size = s.block_size;
  // max_model_len: --context, else the model's own limit (vllm/config ModelConfig._get_and_verify_max_len).
  r.engine.max_model_len = s.context > 0 ? s.context : probe.max_positions();
  r.max_model_len_source = s.context > 0 ? "--context" : "the model's max_position_embeddings";
  r.usage_context = kUsageContextChoices.parse(s.usage_context, "--usage-context");
  if (r.rule.v0_engine && r.usage_context != VllmUsageContext::Serve && (s.max_batched_tokens == 0 || s.max_num_seqs == 0))
    throw InputError("--usage-context " + s.usage_context + " with --engine-version " + s.engine_version +
                     ": V0's default step is read for `vllm serve` only; give --usage-context serve, or "
                     "--max-batched-tokens and --max-num-seqs with it");
  // V0's defaults come from max_model_len, V1's from the GPU and how vLLM was started (cost_models/vllm_engine.h).
  const VllmStepDefaults d =
      r.rule.v0_engine ? vllm_v0_step(r.engine.max_model_len, s.max_batched_tokens, s.max_num_seqs, s.engine_version)
                       : vllm_step_defaults(total_memory, gpu_name, r.usage_context, r.rule.largest_step_tier);
  r.default_batched_tokens = s.max_batched_tokens == 0;
  r.default_num_seqs = s.max_num_seqs == 0;
  // EngineArgs: each value not given takes the table's, the tokens then at most max_num_seqs x max_model_len (from
  // 0.11.1, and for ENGINE_CONTEXT through SchedulerConfig.__post_init__ at 0.11.0), the requests at most the tokens.
  r.performance_mode = kPerformanceModeChoices.parse(s.performance_mode, "--performance-mode");
  if (r.performance_mode != VllmPerformanceMode::Balanced && !r.rule.performance_mode)
    throw InputError("--performance-mode " + s.performance_mode + " with --engine-version " + s.engine_version +
                     ": vLLM has the option from 0.17");
  const int64_t doubled = r.performance_mode == VllmPerformanceMode::Throughput ? 2 : 1;
  const int64_t seqs = r.default_num_seqs ? d.max_num_seqs * doubled : s.max_num_seqs;
  r.engine.max_num_batched_tokens = s.max_batched_tokens;
  if (r.default_batched_tokens) {
    r.engine.max_num_batched_tokens = d.max_num_batched_tokens * doubled;
    const int64_t len = r.engine.max_model_len;  // seqs x len where it fits in int64 (a larger one clamps nothing)
    if (!r.rule.v0_engine && (r.rule.clamps_default_step || r.usage_context == VllmUsageContext::Engine) && len > 0 &&
        seqs <= std::numeric_limits<int64_t>::max() / len)
      r.engine.max_num_batched_tokens = std::min(r.engine.max_num_batched_tokens, seqs * len);
  }
  r.engine.max_num_seqs = r.default_num_seqs ? std::min(seqs, r.engine.max_num_batched_tokens) : seqs;
  // vllm/config/scheduler.py SchedulerConfig._verify_args (v0.11.0 to the 0.25.1 tree alike).
  if (r.engine.max_num_batched_tokens < r.engine.max_num_seqs)
    throw InputError(fmt::format("max_num_batched_tokens ({}{}) is under max_num_seqs ({}, --max-num-seqs): vLLM "
                                 "refuses to start (SchedulerConfig._verify_args); give --max-batched-tokens of at "
                                 "least {} or fewer --max-num-seqs",
                                 r.engine.max_num_batched_tokens,
                                 r.default_batched_tokens ? ", vLLM's default" : ", --max-batched-tokens",
                                 r.engine.max_num_seqs, r.engine.max_num_seqs));
  r.profile_requests = vllm_profile_requests(r.engine);
  return r;
}

}  // namespace

VllmAnswer serve_vllm(ServeProbe& probe, const ServeSettings& s, int tp, uint64_t total_memory,
                      const std::string& gpu_name, std::string budget_source, const VllmNonTorch& non_torch,
                      int capability) {
  VllmAnswer a;
  a.non_torch_given = non_torch.given.has_value();
  a.model = probe.path();
  a.gpu = gpu_name;
  a.budget_source = std::move(budget_source);
  a.settings = resolve(probe, s, tp, total_memory, gpu_name);
  // deepseek_v3: vLLM's MLA backend for the GPU, and its block size (report/serve_vllm_mla.cc).
  a.mla = vllm_mla_settings(probe, s, tp, capability, a.settings);
  // sglang, trtllm and all run this analysis too: a refusal names the engine the user asked for.
  const std::string who = "serve --engine " + s.engine;
  // vLLM refuses bfloat16 below compute capability 8.0 as its worker starts (gpu_worker.py
  // _check_if_gpu_supports_dtype; current_platform.check_if_supports_dtype later): "Bfloat16 is only supported on GPUs
  // with compute capability of at least 8.0". --dtype auto serves float16 there (vllm_auto_dtype); a --dtype bf16 does
  // not start. The other engines' own checks are not read.
  const DType served = storage_dtype(DType::Float32, probe.options().inference.float_dtype);
  if (s.engine == "vllm" && served == DType::BFloat16 && capability > 0 && capability < 80)
    throw VllmGpuRefused(fmt::format("--dtype bf16 on compute capability {}.{}: vLLM's worker refuses bfloat16 below "
                                     "8.0 (\"Bfloat16 is only supported on GPUs with compute capability of at least "
                                     "8.0\"); give --dtype fp16, or --dtype auto, which serves float16 there",
                                     capability / 10, capability % 10),
                         true);
  const int dp = s.data_parallel_size;
  if (dp < 1) throw std::logic_error("serve --engine vllm: --data-parallel-size below 1");
  if (dp > 1 && s.engine != "vllm")
    throw InputError("--data-parallel-size " + std::to_string(dp) + " with --engine " + s.engine +
                     ": memplan models vLLM's data parallelism only (give --engine vllm)");
  // 0.8's FusedMoE did its own multicast over the DP group (layer.py naive_multicast), not the version read; V0's
  // data parallelism is not read.
  if (dp > 1 && !a.settings.rule.sizes_data_parallel)
    throw InputError("--data-parallel-size " + std::to_string(dp) + " with --engine-version " + s.engine_version +
                     ": that version's data parallelism is not modelled; give 0.11 or later");
  const VllmEngineSettings& e = a.settings.engine;
  if (e.max_model_len <= 0)
    throw InputError(who + " needs --context N (the longest request" +
                     (s.engine == "vllm" ? std::string(": vLLM's --max-model-len") : std::string()) + "): " + probe.path() +
                     " does not state its maximum position");
  a.kv_cache_dtype = s.kv_cache_dtype;
  a.kv = probe.kv();
  a.kv_layers = static_cast<int64_t>(a.kv.pairs.size() / 2);
  // A window on the attention layers (a config.json's: onnx_import/hf_config.h read_config_model): on every layer
  // (mistral, phi3), vLLM's one KV cache group of SlidingWindowSpec (cost_models/vllm_engine.h VllmSlidingWindow);
  // on some (gemma2, gemma3_text), its hybrid groups (cost_models/vllm_kv_groups.h).
  if (const int64_t window = probe.sliding_window(); window > 0) {
    const std::vector<bool>& layers = probe.sliding_layers();
    if (int64_t(layers.size()) != a.kv_layers)  // a config's layers are its cache's pairs
      throw std::logic_error("serve --engine vllm: " + probe.path() + " windows " + std::to_string(layers.size()) +
                             " layers of a cache of " + std::to_string(a.kv_layers));
    a.sliding_layer_count = std::count(layers.begin(), layers.end(), true);
    // 0.8's V1 sizing of a windowed cache is not placed in the notes (the hybrid allocator and its
    // SlidingWindowSpec.max_memory_usage_bytes are later code), nor V0's block manager's: not guessed.
    if (!a.settings.rule.sizes_sliding_window)
      throw InputError("--engine-version " + s.engine_version + ": how that version sized the cache of a model with a "
                       "sliding window (" + probe.path() + ": " + std::to_string(window) + " tokens) is not modelled; "
                       "give 0.11 or later");
    a.sliding_window = window;
  }

  // One rank's KV heads (replicated when tp exceeds them), checked as vLLM checks them.
  if (tp > 1 && !a.mla.on) {
    if (a.kv.kv_heads <= 0)
      throw InputError("--tp " + std::to_string(tp) + ": the KV heads of " + probe.path() +
                       " are not found (past inputs shaped [batch, kv_heads, tokens, head_dim])");
    a.kv_heads_per_rank = vllm_kv_heads_per_rank(a.kv.kv_heads, tp, probe.path());
  }

  // The profile run: one step of max_num_batched_tokens tokens (the dummy requests' tokens side by side, as the
  // engine flattens them), nothing cached, with what the engine's kernels replace held outside.
  const std::shared_ptr<const Graph> g = probe.shape_step(1, 0, e.max_num_batched_tokens);
  // One rank's cache: the share of the present outputs the step's tensor-parallel plan gives rank 0 (the plan that
  // shards the weights), which must be the heads' (an invariant, not an input error).
  const std::vector<std::string> presents = present_outputs(a.kv);
  // MLA: vLLM's latent page (cost_models/vllm_mla.h), one byte an element under --kv-cache-dtype fp8.
  const bool fp8_cache = kKvCacheDtypeChoices.parse(s.kv_cache_dtype, "--kv-cache-dtype");
  a.kv_bytes_per_token =
      a.mla.on ? vllm_mla_kv_bytes_per_token(a.mla.shape, fp8_cache ? 1 : dtype_bits(storage_dtype(
                                                                              DType::Float32, probe.options().inference.float_dtype)) / 8)
               : vllm_kv_bytes_per_rank(*g, presents, a.kv.bytes_per_token, tp);
  if (!a.mla.on && tp > 1 && a.kv_bytes_per_token * static_cast<uint64_t>(a.kv.kv_heads) !=
                    a.kv.bytes_per_token * static_cast<uint64_t>(a.kv_heads_per_rank))
    throw std::logic_error("serve --engine vllm: the tensor-parallel plan's KV share of " + probe.path() +
                           " is not its KV heads per rank");
  const PagedKvCache cache{e.block_size, a.kv_bytes_per_token};
  a.block_bytes = cache.block_bytes();
  EstimateOptions options = probe.options();
  options.execution.runtime = Runtime::PyTorch;
  options.execution.attention = AttentionImpl::EngineKernel;
  options.execution.replicate_kv_heads = true;
  // The head, repeat_kv, the sparse blocks and the attention blocks: found once a graph (the catalog's GPUs share
  // their profile steps).
  const EngineKernelSites& sites = probe.kernel_sites(g);
  const std::optional<LmHead>& head = sites.head;
  const RepeatKv& repeat = sites.repeat;
  if (head) {
    a.lm_head = head->node;
    options.inference.held_outside.insert(options.inference.held_outside.end(), head->logits.begin(), head->logits.end());
  }
  a.repeat_kv = repeat.expands;
  options.inference.held_outside.insert(options.inference.held_outside.end(), repeat.tensors.begin(), repeat.tensors.end());
  // A mixture of experts: the sparse blocks' experts run as vLLM's fused MoE kernel (report/serve_vllm_moe.cc).
  const std::vector<MoeBlock>& moe = sites.moe;
  for (const MoeBlock& b : moe)
    options.inference.held_outside.insert(options.inference.held_outside.end(), b.tensors.begin(), b.tensors.end());
  // Which runner profiles (cost_models/vllm_engine.h VllmModelRunner): vLLM's default depends on the experts.
  a.settings.runner = vllm_model_runner(a.settings.version, s.engine_version,
                                        kModelRunnerChoices.parse(s.model_runner, "--model-runner"), !moe.empty(),
                                        s.enforce_eager, s.enable_lora, probe.path(), probe.model_type(),
                                        !s.quantization.empty() || !probe.stored_quantization().method.empty(),
                                        !s.cuda_graph_memory.empty());
  if (!s.cuda_graph_memory.empty()) {  // the estimate vLLM logs, where its runner subtracts one
    if (s.enforce_eager)
      throw InputError("--cuda-graph-memory with --enforce-eager: no CUDA graph is captured, so vLLM subtracts no "
                       "estimate; give one or the other");
    if (!vllm_subtracts_graph_estimate(a.settings.version, a.settings.runner))
      throw InputError("--cuda-graph-memory with --engine-version " + s.engine_version + " (Model Runner " +
                       (a.settings.runner == VllmModelRunner::V2 ? "V2" : "V1") + "): that runner captures its CUDA "
                       "graphs after the cache is sized and subtracts no estimate (V1 does from 0.20, V2 from 0.29)");
    a.settings.cuda_graph_estimate = parse_size(s.cuda_graph_memory, "--cuda-graph-memory");
  }
  if (a.settings.rule.v0_engine) vllm_v0_refusals(probe, s, !moe.empty());
  if (s.enable_expert_parallel && moe.empty())
    throw InputError("--enable-expert-parallel: memplan finds no mixture-of-experts layer in " + probe.path() +
                     " (vLLM's flag splits the experts of its FusedMoE layers across the GPUs; a dense model has none)");
  vllm_mla_hold(*g, presents, a.mla, options.inference.held_outside, probe.path());
  // vLLM's MoE LoRA stacks and gptq's and awq's MoE methods are not sized; gpt-oss's MXFP4
  // checkpoint: its experts as vLLM's Mxfp4MoEMethod holds them (cost_models/mxfp4_experts.h); fp8's (block-wise, or
  // per-tensor with experts): Fp8MoEMethod's (report/serve_vllm_fp8.cc).
  a.quantization = vllm_quantization(probe, s, a.settings, capability, options.execution.multiprocessors, served,
                                     a.quantization_source);
  const bool mxfp4 = probe.stored_quantization().method == "mxfp4" && (s.quantization.empty() || s.quantization == "mxfp4");
  // --mxfp4-backend picks the MoE backend of MXFP4 experts (cost_models/mxfp4_experts.h); elsewhere it would not apply.
  if (!mxfp4 && kMxfp4BackendChoices.parse(s.mxfp4_backend, "--mxfp4-backend"))
    throw InputError("--mxfp4-backend " + s.mxfp4_backend + ": " + probe.path() + " has no MXFP4 experts (a "
                     "quantization_config with quant_method mxfp4, gpt-oss's checkpoints): the option picks vLLM's "
                     "backend for those; drop it");
  const bool fp8_moe_or_block = a.quantization.method == "fp8" && (a.quantization.block.on() || !moe.empty());
  // ModelOpt NVFP4 experts: ModelOptNvFp4FusedMoE on Marlin (report/serve_vllm_modelopt.cc).
  const bool nvfp4_experts = a.quantization.method == "nvfp4" && !moe.empty();
  if (nvfp4_experts) vllm_nvfp4_experts_check(a.settings, capability, probe.path());
  const bool quantized = !mxfp4 && !fp8_moe_or_block && !nvfp4_experts &&
                         (!s.quantization.empty() || !probe.stored_quantization().method.empty());
  // Expert parallelism is sized for unquantized experts (report/serve_vllm_moe.cc) and fp8 ones
  // (report/serve_vllm_fp8.cc); other quantized ones are not.
  if (s.enable_expert_parallel && tp * dp > 1 && (quantized || nvfp4_experts))
    throw InputError("--enable-expert-parallel with " + probe.path() + "'s quantized experts: memplan sizes vLLM's "
                     "expert parallelism for unquantized and fp8 experts (UnquantizedFusedMoEMethod, "
                     "Fp8MoEMethod) only");
  if (!moe.empty() && (s.enable_lora || quantized))
    throw InputError(std::string(s.enable_lora ? "--enable-lora" : "--quantization") + " with " + probe.path() +
                     "'s experts: vLLM runs them as its fused MoE kernel, whose " +
                     (s.enable_lora ? "LoRA stacks" : "quantized expert weights") + " memplan does not size");
  // The experts (FusedMoE's own weights) and unquantized routers: left out of the quantized linear layers.
  std::set<std::string> left_out =
      fp8_moe_or_block ? vllm_moe_left_out(*g, moe, probe.stored_quantization(), a.fp8_block.routers,
                                           a.fp8_block.router_nodes, probe.path())
                       : modelopt_excluded_nodes(*g, probe.stored_quantization(), probe.path());
  if (nvfp4_experts) {
    std::set<std::string> routers;
    left_out.merge(vllm_moe_left_out(*g, moe, probe.stored_quantization(), a.nvfp4_unquantized_routers, routers,
                                     probe.path()));
  }
  const std::vector<std::string>& attention_steps = sites.attention_steps;
  a.attention_kernels = static_cast<int>(attention_steps.size());
  // A config.json's decoder has a head and one attention block a layer, which vLLM's kernels replace (a soft-capped
  // score too: Gemma 2's attn_logit_softcapping, the backends' logits_soft_cap; a soft-capped head's logits:
  // final_logit_softcapping, LogitsProcessor's soft_cap on the sampled rows); where memplan does not find them, the
  // profile run would count score matrices and logits over every token that vLLM never makes: refused rather than
  // overstated.
  if (probe.max_positions() > 0 && (!head || a.attention_kernels < a.kv_layers))
    throw InputError(who + ": the profile run of " + probe.path() + " is not modelled: memplan finds " +
                     (head ? "its LM head" : "no LM head") + " and " + std::to_string(a.attention_kernels) + " of " +
                     std::to_string(a.kv_layers) + " attention blocks that vLLM's kernels replace "
                     "(cost_models/engine_kernels.h, op_fusion_matmul.cc)");
  // gpt-oss's MXFP4 experts: the backend vLLM takes on this GPU (cost_models/mxfp4_experts.h).
  const VllmRule& rule = a.settings.rule;
  const std::optional<VllmMxfp4Backend> mxfp4_backend =
      mxfp4 ? std::optional(vllm_mxfp4_backend_for_gpu(capability,
                                                       kMxfp4BackendChoices.parse(s.mxfp4_backend, "--mxfp4-backend"),
                                                       rule, a.settings.flashinfer, probe.path()))
            : std::nullopt;
  // From 0.14 the unquantized, fp8 and NVFP4 experts run in vLLM's modular kernel, whose workspace is held from the
  // first MoE layer on (cost_models/vllm_fused_moe.h), and MXFP4's on Marlin from 0.17 (PR #34588); MXFP4's other
  // backends are their own.
  const bool modular_moe =
      !moe.empty() && rule.modular_moe &&
      (!mxfp4 || (mxfp4_backend == VllmMxfp4Backend::Marlin && rule.mxfp4_marlin_modular));
  // Expert parallelism over one data-parallel rank's tensor-parallel GPUs needs no all-to-all (cost_models/
  // vllm_fused_moe.h); across data-parallel ranks it does.
  if (modular_moe && fp8_moe_or_block && s.enable_expert_parallel && tp * dp > 1)
    throw InputError("--enable-expert-parallel with " + probe.path() + "'s fp8 experts and --engine-version " +
                     s.engine_version + ": from 0.14 vLLM runs them in its modular kernel, whose expert-parallel "
                     "kernel choice for fp8 (Fp8MoEMethod's) memplan has not read; it sizes expert parallelism there "
                     "for unquantized experts, and for fp8 ones up to 0.13");
  // fp8 experts on 9.0 where vLLM takes FlashInfer's CUTLASS MoE: its workspace is not sized.
  if (modular_moe && fp8_moe_or_block && !moe.empty() && capability == 90 && rule.fp8_moe_flashinfer_cutlass &&
      a.settings.flashinfer != false &&
      (a.quantization.block.on() ? !rule.fp8_block_moe_triton_first : a.quantization.static_activations))
    throw VllmGpuRefused("--engine-version " + s.engine_version + " with " + probe.path() + "'s fp8 experts (" +
                             (a.quantization.block.on() ? "block-wise scales" : "static per-tensor scales") +
                             ") on compute capability 9.0: vLLM's select_fp8_moe_backend takes FlashInfer's CUTLASS "
                             "MoE (FlashInferExperts) there wherever flashinfer imports (a dependency of vLLM's CUDA "
                             "wheels), whose workspace memplan does not size; give --flashinfer no if it is not "
                             "installed (vLLM then runs TritonExperts, which memplan sizes)",
                         false);
  // The tokens the kernel runs on: with data-parallel expert parallelism the layer gathers every rank's step
  // (AgRsAll2AllManager.dispatch_router_logits: UnquantizedFusedMoEMethod keeps its own kernel, so the layer's naive
  // dispatch and combine run, as to 0.13: docs/research/vllm-dp-ep-allgather.md).
  const int64_t kernel_tokens =
      moe.empty() ? 0 : (moe.front().tokens > std::numeric_limits<int64_t>::max() / dp ? -1 : moe.front().tokens * dp);
  if (kernel_tokens < 0)
    throw InputError("--data-parallel-size " + std::to_string(dp) + ": the tokens every rank sends the experts overflow");
  if (modular_moe && rule.modular_moe_chunked && kernel_tokens > kVllmModularMoeChunkSize)
    throw InputError(fmt::format("--engine-version {} at {} tokens a MoE call{}: vLLM's modular MoE kernel chunks above "
                                 "VLLM_FUSED_MOE_CHUNK_SIZE ({}) up to 0.17, into workspaces memplan does not size; "
                                 "give --max-batched-tokens {} or less, or 0.18 or later",
                                 s.engine_version, kernel_tokens,
                                 dp > 1 ? fmt::format(" ({} data-parallel ranks' steps gathered)", dp) : "",
                                 kVllmModularMoeChunkSize, kVllmModularMoeChunkSize / dp));
  Estimate forward = estimate_graph(*g, options);
  uint64_t held_moe_workspace = 0;
  if (modular_moe) {  // at the sizes the kernel holds: Marlin pads them (cost_models/vllm_nvfp4.h, mxfp4_experts.h)
    const MoeBlock& first = moe.front();
    const int64_t per_rank = vllm_moe_rank_width(first, tp, dp, s.enable_expert_parallel, probe.path());
    int64_t hidden = first.hidden, width = per_rank;
    if (nvfp4_experts) width = vllm_nvfp4_marlin_moe_width(hidden, per_rank, rule.marlin_moe_pads_width, probe.path());
    if (mxfp4) {
      const Mxfp4ExpertsLayer l = vllm_mxfp4_marlin_layer(first.experts, hidden, per_rank, 0, probe.path());
      hidden = l.hidden_padded;
      width = l.intermediate_padded;
    }
    held_moe_workspace = vllm_hold_moe_workspace(forward, moe, kernel_tokens, hidden, width, served, probe.path());
  }
  if (mxfp4 && moe.empty())
    throw InputError("serve --engine vllm: " + probe.path() + "'s quantization_config mxfp4 quantizes experts, and "
                     "memplan finds no sparse block");
  a.moe = vllm_fused_moe(moe, forward, tp, storage_dtype(DType::Float32, options.inference.float_dtype), probe.path(),
                         mxfp4 ? capability : 0, s.enable_expert_parallel, dp, mxfp4_backend,
                         options.execution.multiprocessors, modular_moe, rule);
  // Before PR #21497 (0.10.1) determine_expert_map gave the last rank every remaining expert: not the rule sized.
  if (a.moe.expert_parallel && !rule.even_expert_map && a.moe.experts % a.moe.ep.ep_size != 0)
    throw InputError("--enable-expert-parallel with --engine-version " + s.engine_version + ": " +
                     std::to_string(tp) + " GPUs do not divide the " + std::to_string(a.moe.experts) + " experts of " +
                     probe.path() + ", and that version's determine_expert_map gave the last rank every remaining "
                     "expert, which memplan does not size (0.11 and later deal them one each to the first ranks)");
  vllm_mla_place(a.mla, forward, attention_steps, e.max_model_len, e.max_num_seqs, e.block_size,
                 storage_dtype(DType::Float32, options.inference.float_dtype));
  a.enable_lora = s.enable_lora;
  if (s.enable_lora) {
    a.max_loras = s.max_loras;
    a.max_lora_rank = s.max_lora_rank;
    const DType d = storage_dtype(DType::Float32, options.inference.float_dtype);
    a.lora_stacks_bytes = vllm_lora_stacks_bytes(*g, head ? head->node : "", tp, true, s.max_loras, s.max_lora_rank, d);
  }
  // vLLM's rotary cache, where the model states its position limit (a config.json), over the rotated part of
  // head_dim the config states (Phi-3's partial_rotary_factor: get_rope's rotary_dim), else head_dim.
  // get_rope memoises one cache per configuration: Gemma 3's sliding layers (rope_local_base_freq) and full ones
  // (rope_theta) hold two. A linear rope_scaling's cache (LinearScalingRotaryEmbedding) is not sized: refused.
  if (probe.rotary_scaled())
    throw InputError(who + ": " + probe.path() + "'s linear rope_scaling: the rows of vLLM's scaled "
                     "rotary cache (LinearScalingRotaryEmbedding) are not sized");
  const int64_t rotary_dim = probe.rotary_dim() > 0 ? probe.rotary_dim() : a.kv.head_dim;
  // deepseek_v3: vLLM's DeepseekScalingRotaryEmbedding rows under yarn (ReadModel::mla rotary_rows).
  if (const int64_t positions = a.mla.on ? probe.mla().rotary_rows : probe.max_positions(); positions > 0 && rotary_dim > 0)
    a.rotary_cache_bytes = checked_mul(
        vllm_rotary_cache_bytes(positions, rotary_dim, storage_dtype(DType::Float32, options.inference.float_dtype)),
        static_cast<uint64_t>(std::max<int64_t>(1, probe.rotary_tables())), "rotary cache bytes");
  // The padded vocabulary rows of the embedding and the head (untied), one rank's.
  if (head) {
    const VllmVocabPadding pad =
        vllm_vocab_padding(*g, head->node, head->vocab, tp, true, options.execution.tied_embeddings_by_shape,
                           storage_dtype(DType::Float32, options.inference.float_dtype), probe.path());
    a.vocab = pad.vocab;
    a.padded_vocab = pad.padded_vocab;
    a.vocab_padding_bytes = pad.bytes;
  }
  // The linear layers as vLLM's quantization method holds them, in place of the graph's.
  if (mxfp4) {  // Mxfp4Config: every linear layer unquantized, the experts MXFP4 in place of the graph's
    a.quantized.layers = a.quantized.modules = a.moe.blocks;
    a.quantized.dense_bytes = a.moe.graph_expert_bytes;
    a.quantized.quantized_bytes = a.moe.expert_weight_bytes;
  } else {
    a.quantized = vllm_quantized_linears(*g, head ? head->node : "", tp, true, a.quantization, e.max_num_batched_tokens,
                                         served, probe.path(), left_out);
  }
  if (fp8_moe_or_block) vllm_fp8_block_apply(a, *g, forward, moe, options.inference.held_outside, capability, served);
  if (nvfp4_experts) vllm_nvfp4_experts_apply(a, options.execution.multiprocessors, served);
  // The buffer held before the profile is the one the final kernel reports (both vllm_modular_moe_workspace_bytes).
  if (held_moe_workspace != a.moe.kernel.workspace_bytes)
    throw std::logic_error("serve --engine vllm: the MoE workspace held differs from the kernel's");
  // NVFP4: each layer's call (its quantized input, or Marlin's reduction buffer) at its step (cost_models/vllm_nvfp4.h).
  if (a.quantization.method == "nvfp4")
    a.nvfp4_call = vllm_largest_call_peak(*g, forward, options.inference.held_outside, a.quantized.call_bytes, probe.path());
  // The stacks, the rotary cache and the padding rows are allocated with the weights: in both the weights and the
  // forward's allocated bytes; the quantized layers replace the graph's.
  // --enable-expert-parallel: rank 0's whole experts and the expert maps in place of the graph's tensor-parallel
  // share of the experts (report/serve_vllm_moe.cc; the same expert bytes when tp divides the experts).
  // fp8 experts are already in the quantized terms (vllm_fp8_block_apply): only the maps.
  const bool swap_experts = a.moe.expert_parallel && !fp8_moe_or_block;
  const uint64_t replaced = checked_add(a.quantized.dense_bytes, swap_experts ? a.moe.graph_expert_bytes : 0,
                                        "weights bytes");
  const uint64_t expert_parallel_bytes =
      !a.moe.expert_parallel ? 0
      : swap_experts         ? checked_add(a.moe.expert_weight_bytes, a.moe.expert_map_bytes, "weights bytes")
                             : a.moe.expert_map_bytes;
  const uint64_t loaded = checked_add(
      checked_add(checked_add(a.lora_stacks_bytes, a.rotary_cache_bytes, "weights bytes"),
                  checked_add(a.vocab_padding_bytes, a.quantized.quantized_bytes, "weights bytes"), "weights bytes"),
      checked_add(checked_add(a.mla.router_bias_bytes, a.mla.module_workspace_bytes, "weights bytes"),
                  checked_add(a.fp8_block.mla_absorbed_bytes, expert_parallel_bytes, "weights bytes"), "weights bytes"),
      "weights bytes");
  a.forward_peak_allocated =
      checked_add(std::max({forward.allocated_bytes, a.moe.peak_allocated, a.mla.peak_allocated,
                            a.fp8_block.input_quant_peak, a.nvfp4_call.peak}) - replaced,
                  checked_add(loaded, a.quantized.dequantized_bytes + a.quantized.workspace_bytes, "profile bytes"),
                  "profile bytes");
  const uint64_t weights = checked_add(forward.breakdown.weights - replaced, loaded, "weights bytes");
  if (head) {
    const Tensor& hidden = g->tensors[head->hidden];
    const DType d = storage_dtype(hidden.dtype, options.inference.float_dtype);
    a.hidden_states_bytes = bytes_as(hidden, d);
    a.dtype = std::string(dtype_name(d));
    const int64_t rows = a.settings.profile_requests;
    a.sampler = a.settings.rule.v0_engine                    ? VllmSamplerPath::V0Sort
                : a.settings.runner == VllmModelRunner::V2 ? VllmSamplerPath::Gumbel
                : a.settings.rule.triton_top_k_top_p && rows >= kVllmTritonTopKTopPMinRows
                    ? VllmSamplerPath::Triton
                : a.settings.rule.flashinfer_sampler && a.settings.flashinfer == true ? VllmSamplerPath::FlashInfer
                                                                                      : VllmSamplerPath::Sort;
    const int sms = options.execution.multiprocessors;
    switch (a.sampler) {
      case VllmSamplerPath::V0Sort:
        a.sampler_peak_bytes = vllm_v0_sampler_peak_bytes(rows, head->vocab, a.padded_vocab, d);
        break;
      case VllmSamplerPath::Gumbel:
        a.sampler_peak_bytes = vllm_v2_sampler_peak_bytes(rows, head->vocab, a.padded_vocab, head->hidden_size, d);
        break;
      case VllmSamplerPath::Triton:
        a.sampler_buffer_rows = vllm_triton_sampler_buffer_rows(rows, sms);
        a.sampler_multiprocessors = sms;
        a.sampler_peak_bytes =
            vllm_triton_sampler_peak_bytes(rows, head->vocab, a.padded_vocab, head->hidden_size, d, sms);
        break;
      case VllmSamplerPath::Sort:
        a.sampler_peak_bytes = vllm_sampler_peak_bytes(rows, head->vocab, a.padded_vocab, head->hidden_size, d);
        break;
      case VllmSamplerPath::FlashInfer:
        a.sampler_peak_bytes =
            vllm_flashinfer_sampler_peak_bytes(rows, head->vocab, a.padded_vocab, head->hidden_size, d);
        break;
    }
  }
  // What the forward leaves allocated: the weights and, once a MatMul has run, PyTorch's cuBLAS workspace.
  a.kept_workspace_bytes = cublas_workspace_bytes(options.execution.cuda_arch_major);
  // 0.8's runner frees the forward's hidden states before the sampler runs (cost_models/vllm_engine.h V0_8).
  const bool hidden_held = a.settings.rule.hidden_held_at_sampler;
  // NVFP4's FP4 GEMM: FlashInfer's cached mm_fp4 workspace too (cost_models/vllm_nvfp4.h).
  // The modular MoE kernel's workspace too (cost_models/vllm_fused_moe.h), held from the first MoE layer.
  const uint64_t kept = checked_add(
      weights, a.kept_workspace_bytes + a.quantized.workspace_bytes + a.moe.kernel.workspace_bytes, "profile bytes");
  const uint64_t peak = vllm_profile_peak_allocated(a.forward_peak_allocated, kept,
                                                    hidden_held ? a.hidden_states_bytes : 0, a.sampler_peak_bytes);
  a.sampler_sets_peak = peak > a.forward_peak_allocated;
  // 0.6.5 to 0.7, 0.9.1 to 0.10: the custom all-reduce's buffers (0.6.x: with rank_data) in the non-torch increase.
  a.custom_all_reduce_bytes = a.settings.rule.all_reduce_after_snapshot
                                  ? vllm_custom_all_reduce_bytes(tp, a.settings.rule.rank_data_after_baseline) : 0;
  a.memory = vllm_available_memory(total_memory, e.gpu_memory_utilization, weights, peak,
                                   checked_add(non_torch.bytes(a.settings.rule), a.custom_all_reduce_bytes,
                                               "non-torch bytes"),
                                   a.settings.cuda_graph_estimate);
  if (a.sliding_window > 0 && a.sliding_layer_count < a.kv_layers) {
    // Hybrid: vLLM's groups of layers of one kind, every layer's page the same (the config's layers share their
    // heads and head_dim: _get_kv_cache_groups_uniform_page_size's assumption).
    std::vector<int64_t> windows;
    for (bool slides : probe.sliding_layers()) windows.push_back(slides ? a.sliding_window : 0);
    a.grouping = vllm_kv_groups(windows, a.settings.rule.kv_group_pad_quarters);
    if (a.kv_bytes_per_token % static_cast<uint64_t>(a.kv_layers) != 0)
      throw std::logic_error("serve --engine vllm: the layers of " + probe.path() + " differ in KV bytes");
    a.layer_bytes_per_token = a.kv_bytes_per_token / static_cast<uint64_t>(a.kv_layers);
    a.block_bytes = checked_mul(checked_mul(static_cast<uint64_t>(e.block_size), a.layer_bytes_per_token, "KV bytes"),
                                static_cast<uint64_t>(a.grouping.group_size), "KV bytes");
    a.capacity = vllm_grouped_kv_capacity(a.memory.available, a.grouping, e.block_size, a.layer_bytes_per_token,
                                          e.max_model_len, e.max_num_batched_tokens, a.settings.rule.kv_start_check);
  } else {
    a.capacity = vllm_kv_capacity(a.memory.available, cache, e.max_model_len,
                                  VllmSlidingWindow{a.sliding_window, e.max_num_batched_tokens});
  }
  a.max_concurrent_sequences = a.capacity.starts ? a.capacity.num_blocks / a.capacity.blocks_per_request : 0;
  return a;
}

}  // namespace memplan
