// serve --engine vllm on deepseek_v3 (report/serve_vllm.h VllmMlaAnswer): vLLM's latent cache, its MLA backend's
// block size and its profile run (cost_models/vllm_mla.h). The graph is transformers' DeepseekV3Attention, which
// decompresses the latent into every head's keys and values and caches those; vLLM's profile run computes the
// queries, the latent and the rope key, then (no attention metadata) allocates MLACommonImpl.forward's simulated
// [workspace tokens, heads, nope + v] tensor and returns its output. So the graph's decompression is held outside
// the step and the simulated tensor is placed on the fullest attention step.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "cost_models/engine_kernels.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "report/option_choices.h"
#include "report/serve_vllm.h"
#include "report/sizes.h"

namespace memplan {

VllmMlaAnswer vllm_mla_settings(ServeProbe& probe, const ServeSettings& s, int tp, int capability, VllmResolved& r) {
  VllmMlaAnswer m;
  const MlaDims& d = probe.mla();
  if (d.kv_lora_rank <= 0) return m;
  const std::string model = probe.path();
  // --engine sglang and all run this analysis for its weights and its latent cache's bytes a token, which SGLang's
  // pool holds alike (cost_models/sglang_mla.h); TensorRT-LLM's MLA is refused by report/serve_engines.cc.
  if (!r.rule.sizes_mla)
    throw InputError("--engine-version " + s.engine_version + " on " + model + ": how that version's MLA backends ran "
                     "the profile (no simulated decompression) and when they allocated their workspace is not "
                     "modelled; give 0.11 or later");
  // DeepseekV2MLAAttention: assert num_heads % tp_size == 0; num_local_heads = num_heads // tp_size (SGLang's
  // DeepseekV2AttentionMLA likewise over its attention tp size, models/deepseek_v2.py).
  if (d.heads % tp != 0)
    throw InputError("--tp " + std::to_string(tp) + " on " + model + ": " +
                     (s.engine == "sglang" ? "SGLang's DeepseekV2AttentionMLA" : "vLLM's DeepseekV2MLAAttention") +
                     " splits the " + std::to_string(d.heads) +
                     " attention heads over the ranks (num_heads % tp_size == 0)");
  m.on = true;
  m.shape.kv_lora_rank = d.kv_lora_rank;
  m.shape.qk_rope_head_dim = d.qk_rope_head_dim;
  m.shape.qk_nope_head_dim = d.qk_nope_head_dim;
  m.shape.v_head_dim = d.v_head_dim;
  m.shape.heads_per_rank = d.heads / tp;
  m.shape.layers = d.layers;
  kKvCacheDtypeChoices.parse(s.kv_cache_dtype, "--kv-cache-dtype");  // one of its names: vllm_mla_choice reads it
  // FlashInfer imports unless --flashinfer no (a dependency of the CUDA wheel wherever its module is imported).
  // vLLM's refusals are --engine vllm's (and all's); SGLang runs this analysis for its weights and latent cache only,
  // with its own backends (cost_models/sglang_mla.h).
  const VllmMlaChoice c = vllm_mla_choice(r.engine.block_size, s.block_size_given, s.kv_cache_dtype, capability,
                                          r.rule, r.flashinfer != false, m.shape);
  if (!c.refused.empty() && (s.engine == "vllm" || s.engine == "all"))
    throw VllmGpuRefused(fmt::format("--engine-version {} on {} at compute capability {}.{}: {}", s.engine_version,
                                     model, capability / 10, capability % 10, c.refused),
                         true);
  m.backend = c.backend;
  m.module_workspace_bytes = c.module_workspace_bytes;
  m.module_workspace = c.module_workspace;
  m.requested_block_size = r.engine.block_size;
  r.engine.block_size = m.block_size = c.block_size;
  // DeepseekV2MoE: e_score_correction_bias = nn.Parameter(torch.empty(n_routed_experts, dtype=torch.float32)) for
  // topk_method noaux_tc (deepseek_v2.py at b863fe5), where the graph holds it in the served type.
  const uint64_t served = static_cast<uint64_t>(dtype_bits(probe.options().inference.float_dtype)) / 8;
  if (served < 4)
    m.router_bias_bytes = checked_mul(static_cast<uint64_t>(d.router_bias_elements), 4 - served, "router bias bytes");
  return m;
}

void vllm_mla_hold(const Graph& g, const std::vector<std::string>& presents, VllmMlaAnswer& m,
                   std::vector<std::string>& held_outside, const std::string& model) {
  if (!m.on) return;
  const MlaDecompression d = find_mla_decompression(g, presents);
  if (d.layers != static_cast<int>(presents.size()) || presents.size() != static_cast<size_t>(2 * m.shape.layers))
    throw InputError("serve --engine vllm: the profile run of " + model + " is not modelled: memplan finds the "
                     "latent's decompression behind " + std::to_string(d.layers) + " of " +
                     std::to_string(presents.size()) + " cached tensors of " + std::to_string(m.shape.layers) +
                     " layers (cost_models/engine_kernels.h find_mla_decompression)");
  m.decompression_layers = d.layers / 2;
  held_outside.insert(held_outside.end(), d.tensors.begin(), d.tensors.end());
}

void vllm_mla_place(VllmMlaAnswer& m, const Estimate& forward, const std::vector<std::string>& attention_steps,
                    int64_t max_model_len, int64_t max_num_seqs, int64_t block_size, DType served) {
  if (!m.on) return;
  m.profile = vllm_mla_profile(m.shape, max_model_len, max_num_seqs, block_size, served);
  // MLAAttention.forward allocates the output, then MLACommonImpl.forward the simulated tensor: on top of what the
  // attention's step holds (its output included).
  for (const std::string& name : attention_steps) {
    const auto it = std::find(forward.step_names.begin(), forward.step_names.end(), name);
    if (it == forward.step_names.end()) continue;
    const size_t step = static_cast<size_t>(it - forward.step_names.begin());
    if (step >= forward.allocated_per_step.size())
      throw std::logic_error("serve --engine vllm: no allocated bytes at " + name);
    m.peak_allocated = std::max(m.peak_allocated,
                                checked_add(forward.allocated_per_step[step], m.profile.simulated_bytes, "profile bytes"));
  }
  if (m.peak_allocated == 0) throw std::logic_error("serve --engine vllm: the MLA attention is not a step of the profile");
}

nlohmann::ordered_json vllm_mla_to_json(const VllmMlaAnswer& m) {
  if (!m.on) return nullptr;
  return {{"backend", m.backend},
          {"requested_block_size", m.requested_block_size},
          {"kv_lora_rank", m.shape.kv_lora_rank},
          {"qk_rope_head_dim", m.shape.qk_rope_head_dim},
          {"qk_nope_head_dim", m.shape.qk_nope_head_dim},
          {"v_head_dim", m.shape.v_head_dim},
          {"heads_per_rank", m.shape.heads_per_rank},
          {"layers", m.shape.layers},
          {"decompression_layers_held", m.decompression_layers},
          {"workspace_tokens", m.profile.workspace_tokens},
          {"simulated_decompression_bytes", m.profile.simulated_bytes},
          {"peak_allocated_bytes", m.peak_allocated},
          {"workspace_after_profile_bytes", m.profile.workspace_bytes},
          {"router_bias_float32_bytes", m.router_bias_bytes},
          {"module_workspace_bytes", m.module_workspace_bytes},
          {"module_workspace", m.module_workspace.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(m.module_workspace)}};
}

std::string vllm_mla_to_text(const VllmMlaAnswer& m) {
  if (!m.on) return "";
  return fmt::format(
      "; multi-head latent attention by vLLM's {} (the cache one head of {} + {} a token and layer; blocks of {} "
      "tokens (--block-size {}); the profile run's simulated decompression [{} tokens, {} heads, {} + {}] = {} on the fullest "
      "attention step; transformers' decompressed keys and values of {} layers not computed; the builder's "
      "workspace of {}, allocated after the profile, is in no term{})",
      m.backend, m.shape.kv_lora_rank, m.shape.qk_rope_head_dim, m.block_size, m.requested_block_size, m.profile.workspace_tokens, m.shape.heads_per_rank, m.shape.qk_nope_head_dim, m.shape.v_head_dim,
      format_bytes(m.profile.simulated_bytes), m.decompression_layers, format_bytes(m.profile.workspace_bytes),
      m.module_workspace.empty() ? std::string()
                                 : fmt::format("; {} of {} allocated at import, with the weights", format_bytes(m.module_workspace_bytes),
                                               m.module_workspace));
}

}  // namespace memplan
