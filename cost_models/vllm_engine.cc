#include "cost_models/vllm_engine.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <vector>

#include "cost_models/graph_facts.h"
#include "cost_models/tensor_parallel.h"
#include "cost_models/vllm_kv_groups.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

// The number after "0." and after "0.MINOR." ("0.6.4.post1": 6 and 4); -1 where there is none.
int version_part(const std::string& text, size_t from) {
  size_t end = from;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  if (end == from || end - from > 3 || (end < text.size() && text[end] != '.')) return -1;
  return std::stoi(text.substr(from, end - from));
}

// The PATCH of "0.MINOR.PATCH[...]"; -1 where there is none.
int patch_version(const std::string& text) {
  const size_t at = vllm_minor_version(text) >= 0 ? text.find('.', 2) : std::string::npos;
  return at == std::string::npos ? -1 : version_part(text, at + 1);
}

}  // namespace

int vllm_minor_version(const std::string& text) {
  // "MAJOR.MINOR" or "MAJOR.MINOR.PATCH[...]", major 0.
  return text.size() > 2 && text.compare(0, 2, "0.") == 0 ? version_part(text, 2) : -1;
}

VllmVersion vllm_version(const std::string& text) {
  const int minor = vllm_minor_version(text);
  const int patch = patch_version(text);
  const std::string accepted = "memplan models 0.6.0 to 0.6.4 (the V0 engine's absolute rule), 0.6.5 to 0.6.x and "
                               "0.7.x (V0 over PR #10511's baseline and PR #12126's snapshot), 0.8 and 0.9.0 (the V1 "
                               "worker's absolute rule), 0.9.1 to 0.10.x (the baseline rule, NCCL after the snapshot), "
                               "0.11 to 0.19 (the current rule; from 0.17 with the Triton top-k/top-p sampler), 0.20 "
                               "to 0.24 (Model Runner V1 with --enforce-eager or --cuda-graph-memory; V2 for a dense "
                               "Qwen3 from 0.22, Llama or Mistral from 0.23), 0.25 to 0.28 (Model Runner V2 for a model "
                               "without experts; V1 with --enforce-eager or --cuda-graph-memory) and 0.29 or later with "
                               "--enforce-eager or --cuda-graph-memory";
  if (minor == 8 || (minor == 9 && patch == 0)) return VllmVersion::V0_8;
  if (minor == 10 || (minor == 9 && patch >= 1)) return VllmVersion::V0_9;
  if (minor >= 11 && minor <= 16) return VllmVersion::V0_11;
  if (minor >= 17 && minor <= 19) return VllmVersion::V0_17;
  if (minor >= 20 && minor <= 24) return VllmVersion::V0_20;
  if (minor >= 25 && minor <= 28) return VllmVersion::V0_25;
  if (minor >= 29) return VllmVersion::V0_29;
  if (minor == 6 && patch >= 0 && patch <= 4) return VllmVersion::V0_6;
  if (minor == 6 && patch >= 5) return VllmVersion::V0_6_5;
  if (minor == 7) return VllmVersion::V0_7;
  if (minor == 6 && patch < 0)
    throw InputError("--engine-version " + text + ": give the patch (0.6.0 to 0.6.4 are the V0 worker's absolute "
                     "rule; PR #10511, from 0.6.5, made it a baseline's); " + accepted);
  if (minor == 9 && patch < 0)
    throw InputError("--engine-version " + text + ": give the patch (0.9.0 ran 0.8's absolute rule; PR #19312's "
                     "baseline rule came with 0.9.1); " + accepted);
  if (minor >= 0 && minor < 6)
    throw InputError("--engine-version " + text + ": not modelled (vLLM's V0 engine before 0.6: its sampler and "
                     "profile run are read at 0.6-era commits only); " + accepted);
  throw InputError("--engine-version " + text + ": expected a vLLM version such as 0.11; " + accepted);
}

namespace {

// The budget rule's flags: what every release of `v`'s range does.
VllmRule budget_rule(VllmVersion v) {
  VllmRule r;
  switch (v) {
    case VllmVersion::V0_6:
      r.v0_engine = r.absolute_budget = r.hidden_held_at_sampler = true;
      break;
    case VllmVersion::V0_6_5:
      r.v0_engine = r.hidden_held_at_sampler = r.all_reduce_after_snapshot = r.rank_data_after_baseline = true;
      break;
    case VllmVersion::V0_7:
      r.v0_engine = r.hidden_held_at_sampler = r.all_reduce_after_snapshot = true;
      break;
    case VllmVersion::V0_8:
      r.absolute_budget = r.needs_step_flags = true;
      break;
    case VllmVersion::V0_9:
      r.hidden_held_at_sampler = r.needs_step_flags = r.all_reduce_after_snapshot = true;
      break;
    case VllmVersion::V0_11:
      r.hidden_held_at_sampler = r.sizes_sliding_window = r.sizes_mla = r.sizes_data_parallel = true;
      break;
    case VllmVersion::V0_17:
      r.hidden_held_at_sampler = r.sizes_sliding_window = r.sizes_mla = r.sizes_data_parallel = true;
      r.triton_top_k_top_p = true;
      break;
    case VllmVersion::V0_20:
    case VllmVersion::V0_25:
    case VllmVersion::V0_29:
      r.hidden_held_at_sampler = r.sizes_sliding_window = r.sizes_mla = r.sizes_data_parallel = true;
      r.triton_top_k_top_p = r.cudagraph_estimate = true;
      r.default_gpu_memory_utilization = 0.92;
      break;
  }
  return r;
}

}  // namespace

VllmRule vllm_rule(const std::string& version_text) {
  const VllmVersion v = vllm_version(version_text);
  VllmRule r = budget_rule(v);
  if (r.v0_engine) return r;  // V0's quantized layers and experts are refused (report/serve_vllm_v0.cc)
  const int minor = vllm_minor_version(version_text);
  const int patch = patch_version(version_text);
  // 0.9.1: PR #19312's worker with 0.8's profile run, whose _dummy_run returns hidden_states[logit_indices].
  if (minor == 9 && patch == 1) r.hidden_held_at_sampler = false;
  r.even_expert_map = minor > 10 || (minor == 10 && patch >= 1);
  r.modelopt_kv_auto_fp8 = minor >= 14;
  r.nvfp4_marlin_moe = minor >= 11;
  r.modular_moe = minor >= 14;
  r.nvfp4_moe_global_scales_float32 = minor >= 20;
  r.marlin_moe_pads_width = minor >= 24;
  r.modular_moe_chunked = minor >= 14 && minor <= 17;
  r.mxfp4_marlin_modular = minor >= 17;
  r.triton_moe_block_by_batch = minor >= 17;
  r.fp8_moe_flashinfer_cutlass = minor >= 16;
  r.fp8_block_moe_triton_first = minor >= 17;
  r.fp4_marlin_sm75 = minor >= 14;
  r.marlin_moe_atomic_add = minor <= 11;
  r.fused_moe_chunk_16k = minor >= 12;
  r.flashinfer_sampler_unread = minor == 8;
  r.flashinfer_sampler = minor == 9 || minor == 10 || (minor == 11 && patch < 1);
  r.nvfp4_gemm_needs_sm100 = minor >= 16;
  r.sm100_family = minor >= 13;
  r.mla_block_multiples = minor >= 12;
  r.mla_backend_priorities = minor > 11 || (minor == 11 && patch >= 1);
  r.mla_preferred_block = minor > 17 || (minor == 17 && patch >= 1);
  r.flashinfer_mla_blackwell = minor >= 15;
  r.flashinfer_mla_shapes_018 = minor >= 18;
  r.bundles_triton_kernels = minor >= 12;
  r.mxfp4_hopper_swizzle = minor > 11 || (minor == 11 && patch >= 1);
  const bool from_0_17_2 = minor > 17 || (minor == 17 && patch >= 2);
  r.triton_mla_fp8 = from_0_17_2;
  r.clamps_default_step = minor > 11 || (minor == 11 && patch >= 1);
  r.largest_step_tier = minor >= 28;
  r.performance_mode = minor >= 17;
  r.kv_group_pad_quarters = from_0_17_2 ? 6 : minor >= 12 ? 5 : 0;
  r.kv_start_check = minor <= 13                                 ? VllmKvStartCheck::EveryLayer
                     : minor > 18 || (minor == 18 && patch >= 1) ? VllmKvStartCheck::EveryGroup
                                                                 : VllmKvStartCheck::FirstGroup;
  return r;
}

bool vllm_v2_default_before_0_29(int minor, bool has_experts, const std::string& model_type, bool quantized) {
  if (minor < 22 || minor > 28) return false;
  // DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES by the architecture a config.json's model_type names: from 0.24 the
  // mixtures of experts Qwen2MoeForCausalLM and DeepseekV2ForCausalLM (GraniteMoeForCausalLM is not memplan's).
  const bool listed_experts = minor >= 24 && (model_type == "qwen2_moe" || model_type == "deepseek_v2");
  if (minor >= 25) return !has_experts || listed_experts;  // `is_default_v2_architecture or not is_moe`
  if (has_experts) return listed_experts;
  const bool listed = model_type == "qwen3" || (minor >= 23 && (model_type == "llama" || model_type == "mistral"));
  return listed && (!quantized || minor >= 24);
}

bool vllm_subtracts_graph_estimate(VllmVersion v, VllmModelRunner runner) {
  return runner == VllmModelRunner::V2 ? v == VllmVersion::V0_29 : budget_rule(v).cudagraph_estimate;
}

VllmModelRunner vllm_model_runner(VllmVersion v, const std::string& version_text,
                                  std::optional<VllmModelRunner> forced, bool has_experts, bool enforce_eager,
                                  bool enable_lora, const std::string& model, const std::string& model_type,
                                  bool quantized, bool estimate_given) {
  const int minor = vllm_minor_version(version_text);
  const bool v2_default = v == VllmVersion::V0_29 ||
                          ((v == VllmVersion::V0_20 || v == VllmVersion::V0_25) &&
                           vllm_v2_default_before_0_29(minor, has_experts, model_type, quantized));
  const VllmModelRunner runner = forced ? *forced : v2_default ? VllmModelRunner::V2 : VllmModelRunner::V1;
  const std::string at = "--engine-version " + version_text;
  // An estimate vLLM measures and memplan is not given: no answer.
  const bool estimate_unknown = vllm_subtracts_graph_estimate(v, runner) && !enforce_eager && !estimate_given;
  if (runner == VllmModelRunner::V2) {
    if (v != VllmVersion::V0_25 && v != VllmVersion::V0_29 && !(v == VllmVersion::V0_20 && minor >= 22))
      throw InputError("--model-runner v2 with " + at + ": Model Runner V2's profile run is read from 0.22 only (the "
                       "release that made it the default for dense Qwen3 models); give --engine-version 0.22 or later, "
                       "or --model-runner v1");
    if (enable_lora)
      throw InputError("--enable-lora with Model Runner V2 (" + at + ", " + model + "): V2's LoRA layers are not "
                       "read; give --model-runner v1 (with --enforce-eager) if vLLM's log says it runs V1");
    if (estimate_unknown)
      throw InputError(at + " with Model Runner V2" + (forced ? std::string(" (--model-runner v2)") : std::string()) +
                       ": from 0.29 that runner subtracts its CUDA graphs' memory from the KV cache too (PR #53306, "
                       "\"[Model Runner V2] Reserve CUDA graph memory\": graphs captured against a minimal cache in a "
                       "throwaway pool, measured on the GPU), which memplan does not size; give it as vLLM logs it "
                       "(--cuda-graph-memory SIZE), or add --enforce-eager (no graph is captured and nothing is "
                       "subtracted), or give --engine-version 0.28 or earlier");
    return runner;
  }
  if (estimate_unknown) {
    std::string which = at;
    if (v == VllmVersion::V0_25 || v == VllmVersion::V0_29)
      which += " with Model Runner V1 (" +
               (forced ? std::string("--model-runner v1")
                       : model + " has experts, and 0.25 to 0.28 run only Qwen2-MoE and DeepSeek-V2 of those on V2") +
               ")";
    else if (v == VllmVersion::V0_20 && minor >= 22)
      which += " with Model Runner V1 (" +
               (forced ? std::string("--model-runner v1")
                       : model + " is not one that 0.22 to 0.24 run on V2 by default: a dense Qwen3 from 0.22, "
                                 "Llama or Mistral from 0.23, quantized ones and Qwen2-MoE or DeepSeek-V2 from 0.24") +
               ")";
    throw InputError(which + ": from 0.20 vLLM's V1 runner subtracts its CUDA graphs' estimate from the KV cache "
                     "(PR #38284 turned VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on; profile_cudagraph_memory: the "
                     "first two captures of each mode, measured on the GPU), which memplan does not size; give it as "
                     "vLLM logs it (\"Estimated CUDA graph memory: X GiB total\": --cuda-graph-memory XGiB), or add "
                     "--enforce-eager (no graph is captured and nothing is subtracted), or give --engine-version 0.19 "
                     "or earlier");
  }
  return runner;
}

std::string vllm_rules_name(VllmVersion v, VllmModelRunner runner) {
  switch (v) {
    case VllmVersion::V0_6: return "vLLM 0.6 V0 (worker.py determine_num_available_blocks: absolute peak and all non-torch memory)";
    case VllmVersion::V0_8: return "vLLM 0.8 to 0.9.0 V1 (gpu_worker.py determine_available_memory: absolute peak and all non-torch memory)";
    case VllmVersion::V0_6_5: return "vLLM 0.6.5 to 0.6.x V0 (worker.py determine_num_available_blocks after PR #10511: the increase over a baseline)";
    case VllmVersion::V0_7: return "vLLM 0.7 V0 (worker.py determine_num_available_blocks after PR #12126: the increase over a baseline snapshot)";
    case VllmVersion::V0_9: return "vLLM 0.9.1 to 0.10 V1 (gpu_worker.py determine_available_memory after PR #19312: NCCL and the custom all-reduce after the snapshot)";
    case VllmVersion::V0_17:
      return "vLLM V1 (gpu_worker.py determine_available_memory after PR #25359; the Triton top-k/top-p sampler)";
    case VllmVersion::V0_20:
      return runner == VllmModelRunner::V2
                 ? "vLLM 0.22 V1 engine, Model Runner V2 (gpu/model_runner.py: no CUDA-graph estimate, the Gumbel sampler)"
                 : "vLLM 0.20 to 0.24 V1 engine, Model Runner V1 (its CUDA-graph estimate: none with --enforce-eager, "
                   "else --cuda-graph-memory)";
    case VllmVersion::V0_25:
      return runner == VllmModelRunner::V2
                 ? "vLLM 0.25 V1 engine, Model Runner V2 (gpu/model_runner.py: no CUDA-graph estimate, the Gumbel sampler)"
                 : "vLLM 0.25 V1 engine, Model Runner V1 (its CUDA-graph estimate: none with --enforce-eager, else "
                   "--cuda-graph-memory)";
    case VllmVersion::V0_29:
      return runner == VllmModelRunner::V2
                 ? "vLLM 0.29 V1 engine, Model Runner V2 (its CUDA-graph estimate: none with --enforce-eager, else "
                   "--cuda-graph-memory; the Gumbel sampler)"
                 : "vLLM 0.29 V1 engine, Model Runner V1 (its CUDA-graph estimate: none with --enforce-eager, else "
                   "--cuda-graph-memory)";
    default: return "vLLM V1 (gpu_worker.py determine_available_memory after PR #25359)";
  }
}

uint64_t vllm_custom_all_reduce_bytes(int tp, bool rank_data) {
  if (tp != 2 && tp != 4 && tp != 6 && tp != 8) return 0;  // CustomAllreduce._SUPPORTED_WORLD_SIZES
  return (kVllmCustomAllReduceMetaSize + kVllmCustomAllReduceMaxSize) + kVllmCustomAllReduceMaxSize +
         (rank_data ? kVllmCustomAllReduceRankData : 0);
}

VllmStepDefaults vllm_v0_step(int64_t max_model_len, int64_t max_batched_tokens, int64_t max_num_seqs,
                              const std::string& version) {
  const std::string v = "--engine-version " + version + ": ";
  if (max_batched_tokens == 0 && max_model_len > kVllmV0LongContext)
    throw InputError(v + "a max_model_len of " + std::to_string(max_model_len) + " is over 32,768 tokens, where vLLM's "
                     "V0 may turn chunked prefill on by default with another default step, not modelled: give "
                     "--max-batched-tokens (or --context 32768 or less)");
  VllmStepDefaults d;
  d.max_num_batched_tokens = max_batched_tokens > 0 ? max_batched_tokens : std::max<int64_t>(max_model_len, 2048);
  d.max_num_seqs = max_num_seqs > 0 ? max_num_seqs : kVllmV0DefaultMaxNumSeqs;
  if (d.max_num_batched_tokens < max_model_len)
    throw InputError(v + "--max-batched-tokens " + std::to_string(d.max_num_batched_tokens) + " is under max_model_len " +
                     std::to_string(max_model_len) + ": vLLM's V0 refuses that without chunked prefill "
                     "(SchedulerConfig._verify_args), whose profile memplan does not model");
  if (d.max_num_batched_tokens < d.max_num_seqs)
    throw InputError(v + "--max-batched-tokens " + std::to_string(d.max_num_batched_tokens) + " is under max_num_seqs " +
                     std::to_string(d.max_num_seqs) + " (vLLM's V0 SchedulerConfig._verify_args refuses it)");
  return d;
}

VllmStepDefaults vllm_step_defaults(uint64_t device_memory, const std::string& device_name, VllmUsageContext context,
                                    bool largest_tier) {
  if (context == VllmUsageContext::Engine) return {2048, 128};
  const bool llm = context == VllmUsageContext::LlmClass;
  if (largest_tier && device_memory >= (uint64_t{160} << 30)) return {16384, 1024};
  std::string name = device_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  const bool large = device_memory >= (uint64_t{70} << 30) && name.find("a100") == std::string::npos;
  if (large) return {llm ? 16384 : 8192, 1024};
  return {llm ? 8192 : 2048, 256};
}

DType vllm_auto_dtype(DType stored, int cuda_arch_major, const std::string& model_type) {
  const bool no_fp16 = model_type == "gemma2" || model_type == "gemma3" || model_type == "gemma3_text" ||
                       model_type == "glm4" || model_type == "plamo2";
  std::vector<DType> supported;
  if (cuda_arch_major >= 8) supported.push_back(DType::BFloat16);
  if (!no_fp16) supported.push_back(DType::Float16);
  supported.push_back(DType::Float32);
  const DType preferred = supported.front();
  if (stored == DType::Float32) return preferred;
  return std::find(supported.begin(), supported.end(), stored) != supported.end() ? stored : preferred;
}

uint64_t vllm_lora_stacks_bytes(const Graph& g, const std::string& lm_head, int tp, bool replicate_kv_heads,
                                int64_t max_loras, int64_t max_lora_rank, DType dtype) {
  const TensorParallelPlan plan = plan_tensor_parallel(g, tp, false, replicate_kv_heads);
  // One rank's size of tensor t's last axis.
  auto last_local = [&](int32_t t) {
    const Tensor& x = g.tensors[t];
    const int last = static_cast<int>(x.shape.size()) - 1;
    return plan.sharded(t) && plan.axis[t] == last ? plan.local_dim[t] : x.shape[last];
  };
  uint64_t features = 0;  // sum over the adapted layers of (in + out), one rank's
  for (const Node& n : g.nodes) {
    if ((n.op_type != "MatMul" && n.op_type != "Gemm") || n.name == lm_head || n.inputs.size() < 2 ||
        matmul_weight(g, n.inputs[1]) < 0 || n.outputs.empty() || n.outputs[0] < 0 || g.tensors[n.inputs[0]].shape.empty())
      continue;
    features = checked_add(features, static_cast<uint64_t>(last_local(n.inputs[0]) + last_local(n.outputs[0])),
                           "LoRA stack bytes");
  }
  const uint64_t d = static_cast<uint64_t>(dtype_bits(dtype)) / 8;
  return checked_mul(checked_mul(checked_mul(static_cast<uint64_t>(max_loras), static_cast<uint64_t>(max_lora_rank),
                                             "LoRA stack bytes"),
                                 features, "LoRA stack bytes"),
                     d, "LoRA stack bytes");
}

uint64_t vllm_rotary_cache_bytes(int64_t max_positions, int64_t rotary_dim, DType dtype) {
  return checked_mul(checked_mul(static_cast<uint64_t>(max_positions), static_cast<uint64_t>(rotary_dim),
                                 "rotary cache bytes"),
                     static_cast<uint64_t>(dtype_bits(dtype)) / 8, "rotary cache bytes");
}

int64_t vllm_profile_requests(const VllmEngineSettings& s) {
  return std::min(s.max_num_seqs, s.max_num_batched_tokens);
}

namespace {

// Sampler.forward's logits.to(torch.float32) (V0's logits.to(torch.float)): a new float32 tensor, 4 bytes a logit,
// unless the head's logits are float32 already, when it returns them.
uint64_t float32_logits_copy_bytes(DType dtype) { return dtype == DType::Float32 ? 0 : 4; }

// What the V1 runner's sampler warm-up holds in the model's type d: the sampled hidden rows and their rand_like
// [requests, hidden] and the head's logits [requests, logits_width]; plus `per_logit` bytes over [requests, vocab].
uint64_t v1_sampler_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden, DType dtype,
                          uint64_t per_logit) {
  const uint64_t d = static_cast<uint64_t>(dtype_bits(dtype)) / 8;
  const uint64_t rows = static_cast<uint64_t>(requests);
  const uint64_t in_d = checked_mul(
      checked_mul(rows, static_cast<uint64_t>(logits_width) + 2 * static_cast<uint64_t>(hidden), "sampler bytes"), d,
      "sampler bytes");
  const uint64_t logits = checked_mul(checked_mul(rows, static_cast<uint64_t>(vocab), "sampler bytes"), per_logit,
                                      "sampler bytes");
  return checked_add(in_d, logits, "sampler bytes");
}

}  // namespace

uint64_t vllm_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden, DType dtype) {
  // Over [requests, vocab]: the float32 logits (4, none when the head's are float32), sort values (4) and int64
  // indices (8), the top-k mask (1), the sorted softmax (4), the top-p mask (1), the scatter's output (4).
  return v1_sampler_bytes(requests, vocab, logits_width, hidden, dtype,
                          float32_logits_copy_bytes(dtype) + 4 + 8 + 1 + 4 + 1 + 4);
}

uint64_t vllm_flashinfer_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden,
                                            DType dtype) {
  // Over [requests, vocab]: the float32 logits (4, none when the head's are float32), masked_logits (4), probs (4).
  return v1_sampler_bytes(requests, vocab, logits_width, hidden, dtype, float32_logits_copy_bytes(dtype) + 4 + 4);
}

int64_t vllm_triton_sampler_buffer_rows(int64_t requests, int multiprocessors) {
  if (multiprocessors <= 0) return static_cast<int64_t>(next_power_of_2(u64(requests)));
  const int64_t programs = std::min<int64_t>(multiprocessors, requests);
  return std::min<int64_t>(static_cast<int64_t>(next_power_of_2(u64(programs))), multiprocessors);
}

uint64_t vllm_triton_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden,
                                        DType dtype, int multiprocessors) {
  // Over [requests, vocab]: the float32 logits (4, none when the head's are float32), the softmax (4) and the
  // exponential noise (4); and the kernel's float32 buffer.
  const uint64_t per_logit = float32_logits_copy_bytes(dtype) + 4 + 4;
  const uint64_t buffer =
      checked_mul(checked_mul(static_cast<uint64_t>(vllm_triton_sampler_buffer_rows(requests, multiprocessors)),
                              static_cast<uint64_t>(vocab), "sampler bytes"),
                  4, "sampler bytes");
  return checked_add(v1_sampler_bytes(requests, vocab, logits_width, hidden, dtype, per_logit), buffer,
                     "sampler bytes");
}

uint64_t vllm_v2_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, int64_t hidden, DType dtype) {
  const uint64_t d = static_cast<uint64_t>(dtype_bits(dtype)) / 8;
  const uint64_t rows = static_cast<uint64_t>(requests);
  // gumbel_sample's BLOCK_SIZE: one local argmax (int64) and maximum (float32) per 1,024 logits of a row.
  constexpr int64_t kGumbelBlock = 1024;
  const uint64_t blocks = static_cast<uint64_t>((vocab + kGumbelBlock - 1) / kGumbelBlock);
  const uint64_t in_d = checked_mul(checked_mul(rows, static_cast<uint64_t>(hidden) + static_cast<uint64_t>(logits_width),
                                                "sampler bytes"),
                                    d, "sampler bytes");
  const uint64_t fp32_logits = checked_mul(checked_mul(rows, static_cast<uint64_t>(vocab), "sampler bytes"), 4,
                                           "sampler bytes");
  const uint64_t gumbel = checked_add(checked_mul(checked_mul(rows, blocks, "sampler bytes"), 8 + 4, "sampler bytes"),
                                      checked_mul(rows, 8 + 8, "sampler bytes"), "sampler bytes");
  return checked_add(checked_add(in_d, fp32_logits, "sampler bytes"), gumbel, "sampler bytes");
}

uint64_t vllm_v0_sampler_peak_bytes(int64_t requests, int64_t vocab, int64_t logits_width, DType dtype) {
  const uint64_t d = static_cast<uint64_t>(dtype_bits(dtype)) / 8;
  const uint64_t rows = static_cast<uint64_t>(requests);
  const uint64_t head = checked_mul(checked_mul(rows, static_cast<uint64_t>(logits_width), "sampler bytes"), d,
                                    "sampler bytes");
  // float32 copy (none when d is float32), sort values and indices, top-k mask, softmax, cumsum, top-p mask,
  // scatter's output.
  const uint64_t per_logit = float32_logits_copy_bytes(dtype) + 4 + 8 + 1 + 4 + 4 + 1 + 4;
  return checked_add(head,
                     checked_mul(checked_mul(rows, static_cast<uint64_t>(vocab), "sampler bytes"), per_logit,
                                 "sampler bytes"),
                     "sampler bytes");
}

uint64_t vllm_profile_peak_allocated(uint64_t forward_peak_allocated, uint64_t kept, uint64_t hidden_states_bytes,
                                     uint64_t sampler_peak) {
  const uint64_t sampling =
      checked_add(checked_add(kept, hidden_states_bytes, "profile bytes"), sampler_peak, "profile bytes");
  return std::max(forward_peak_allocated, sampling);
}

VllmMemory vllm_available_memory(uint64_t total, double gpu_memory_utilization, uint64_t weights,
                                 uint64_t profile_peak_allocated, uint64_t non_torch, uint64_t cuda_graphs) {
  VllmMemory m;
  m.total = total;
  // requested_memory is a float; available = int(requested - non_kv), and non_kv is a whole number of bytes.
  m.requested = static_cast<uint64_t>(std::floor(static_cast<long double>(total) * gpu_memory_utilization));
  m.weights = weights;
  m.activation_peak = profile_peak_allocated > weights ? profile_peak_allocated - weights : 0;
  m.non_torch = non_torch;
  m.cuda_graphs = cuda_graphs;
  const long double non_kv = static_cast<long double>(weights) + m.activation_peak + non_torch + cuda_graphs;
  m.available = static_cast<int64_t>(static_cast<long double>(m.requested) - non_kv);
  return m;
}

int64_t vllm_blocks_per_request(const PagedKvCache& cache, int64_t max_model_len, const VllmSlidingWindow& sliding) {
  if (sliding.window <= 0) return cache.blocks_for(max_model_len);  // FullAttentionSpec.max_memory_usage_bytes
  const int64_t tokens = std::min(sliding.window - 1 + sliding.max_num_batched_tokens, max_model_len);
  return cache.blocks_for(tokens) + 1;  // SlidingWindowSpec.max_memory_usage_bytes
}

VllmKvCapacity vllm_kv_capacity(int64_t available, const PagedKvCache& cache, int64_t max_model_len,
                                const VllmSlidingWindow& sliding) {
  // One group of one spec: the grouped rule (cost_models/vllm_kv_groups.h) with every layer's block as one page
  // (floor(floor(available / page_size) / num_layers) = floor(available / (page_size x num_layers))).
  VllmKvGrouping one;
  one.group_size = 1;
  one.groups.push_back({sliding.window, 1});
  // Every start check asks the same of one group of every layer.
  return vllm_grouped_kv_capacity(available, one, cache.block_size, cache.bytes_per_token, max_model_len,
                                  sliding.max_num_batched_tokens, VllmKvStartCheck::EveryGroup);
}

uint64_t vllm_kv_bytes_per_rank(const Graph& g, const std::vector<std::string>& presents, uint64_t bytes_per_token,
                                int tp) {
  if (tp <= 1) return bytes_per_token;
  const TensorParallelPlan plan = plan_tensor_parallel(g, tp, false, true);
  unsigned __int128 whole = 0, local = 0;
  for (const std::string& name : presents) {
    const std::optional<int32_t> t = g.find_tensor(name);
    if (!t) continue;
    const uint64_t elements = static_cast<uint64_t>(g.tensors[*t].elements());
    whole += elements;
    local += plan.local_bytes(g, *t, elements);
  }
  if (whole == 0) return bytes_per_token;
  return static_cast<uint64_t>(static_cast<unsigned __int128>(bytes_per_token) * local / whole);
}

int64_t vllm_kv_heads_per_rank(int64_t kv_heads, int64_t tp, const std::string& model) {
  if (tp <= 1) return kv_heads;
  if (kv_heads >= tp) {
    if (kv_heads % tp != 0)
      throw InputError("--tp " + std::to_string(tp) + " does not divide the " + std::to_string(kv_heads) +
                       " KV heads of " + model + " (vLLM shards KV heads evenly over the tensor-parallel ranks)");
    return kv_heads / tp;
  }
  if (tp % kv_heads != 0)
    throw InputError("--tp " + std::to_string(tp) + " is not a multiple of the " + std::to_string(kv_heads) +
                     " KV heads of " + model + " (vLLM replicates each KV head over tp / heads ranks)");
  return 1;
}

}  // namespace memplan
