// A ModelOpt checkpoint under serve (report/serve_vllm.h vllm_modelopt_quantization, modelopt_excluded_nodes):
// what the engines' own rules add to the per-tensor fp8 sizing they share (cost_models/vllm_weights.h,
// sglang_weights.h, trtllm_engine.h), and vLLM's NVFP4 experts (vllm_nvfp4_experts_check and _apply).
#include "report/serve_vllm.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "cost_models/graph_facts.h"
#include "cost_models/vllm_fused_moe.h"
#include "cost_models/vllm_nvfp4.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "report/option_choices.h"

namespace memplan {
VllmQuantization vllm_modelopt_quantization(const StoredQuantization& stored, const ServeSettings& s,
                                            const VllmResolved& r, int capability, int multiprocessors, DType served,
                                            const std::string& model, std::string& source) {
  const bool nvfp4 = stored.method == "nvfp4";
  const std::string algo = stored.modelopt_algo();
  if (!s.quantization.empty())
    throw InputError("--quantization " + s.quantization + ": " + stored.modelopt_path + " makes " + model +
                     " a ModelOpt " + algo + " checkpoint, which the engines serve as their modelopt method (vLLM "
                     "refuses a --quantization that differs from the checkpoint's): give no --quantization");
  if (served == DType::Float32)
    throw InputError("ModelOpt " + algo + " (" + stored.modelopt_path + ") serves in bfloat16 or float16 (vLLM's "
                     "ModelOpt configs' get_supported_act_dtypes), not float32: give --dtype bf16 or fp16");
  const bool vllm = s.engine == "vllm" || s.engine == "all";
  if (vllm && stored.modelopt_kv_fp8 && !kKvCacheDtypeChoices.parse(s.kv_cache_dtype, "--kv-cache-dtype") &&
      r.rule.modelopt_kv_auto_fp8)
    throw InputError("--engine-version " + s.engine_version + " with --kv-cache-dtype auto: " + stored.modelopt_path +
                     " states kv_cache_quant_algo FP8, which vLLM's auto follows from PR #30785 (merged 2025-12-17, "
                     "after 0.13's branch) where its resolve_kv_cache_dtype_string finds it, and issue #34752 reports "
                     "it missing for some checkpoints: give --kv-cache-dtype fp8 (what the checkpoint asks for), or "
                     "--engine-version 0.13 or earlier, where auto is the model's type");
  if (nvfp4) {
    // ModelOptNvFp4Config.get_min_capability: 80 at the v0.11.0 to v0.13.0 tags, 75 from PR #29901 (0.14.0), which
    // brought Marlin's FP4 kernels, vLLM's only FP4 path below 10.0 (cost_models/vllm_nvfp4.h), to 7.5
    // (VllmRule.fp4_marlin_sm75). Its workspace and reduction buffer are one a multiprocessor.
    // docs/research/vllm-turing-marlin.md: at 0.14 the dense layers on 7.5 still take FlashInfer's GEMM where it is
    // installed, which fails; Marlin is what runs with VLLM_NVFP4_GEMM_BACKEND=marlin, and by default from PR #33076.
    const bool sm75 = r.rule.fp4_marlin_sm75;
    if (capability < (sm75 ? 75 : 80))
      throw VllmGpuRefused(fmt::format("ModelOpt NVFP4 on compute capability {}.{} with --engine-version {}: vLLM's "
                                       "ModelOptNvFp4Config needs {} (get_min_capability; 8.0 before 0.14, 7.5 from "
                                       "PR #29901 in 0.14.0, which brought Marlin's FP4 kernels to Turing)",
                                       capability / 10, capability % 10, s.engine_version, sm75 ? "7.5" : "8.0"),
                           true);
    if (rocm_compute_capability(capability))  // ROCm reports 9.4 and 9.5: neither kernel family is CUDA's there
      throw VllmGpuRefused(fmt::format("ModelOpt NVFP4 on ROCm (compute capability {}.{}): vLLM's CUDA FP4 GEMMs and "
                                       "Marlin do not run there, and its ROCm path is not read",
                                       capability / 10, capability % 10),
                           false);
    // ModelOptNvFp4LinearMethod.__init__ (v0.11.0 to v0.13.0 tags): `if has_flashinfer(): backend =
    // "flashinfer-cutlass"` with no capability test until PR #33076 (in the v0.16.0 branch); FlashInfer's mm_fp4
    // needs 10.0 (the failure #33076 quotes at 7.5).
    if (vllm_nvfp4_marlin(capability) && r.flashinfer == true && !r.rule.nvfp4_gemm_needs_sm100)
      throw VllmGpuRefused(fmt::format("ModelOpt NVFP4 on compute capability {}.{} with --flashinfer yes and "
                                       "--engine-version {}: vLLM's ModelOptNvFp4LinearMethod takes FlashInfer's FP4 "
                                       "GEMM wherever FlashInfer is usable, before PR #33076 (0.16) whatever the "
                                       "GPU, and FlashInfer's mm_fp4 needs 10.0: vLLM does not start (give "
                                       "--flashinfer no if it runs Marlin there)",
                                       capability / 10, capability % 10, s.engine_version),
                           true);
    if (vllm_nvfp4_marlin(capability) && multiprocessors <= 0)
      throw InputError("ModelOpt NVFP4 (" + stored.modelopt_path + ") on compute capability " +
                       fmt::format("{}.{}", capability / 10, capability % 10) + ": vLLM runs it on Marlin, whose "
                       "workspace and float32 reduction buffer are sized by the GPU's multiprocessors, which --memory "
                       "does not say: give --gpu NAME");
  } else if (capability < 89) {
    throw VllmGpuRefused(fmt::format("ModelOpt FP8 on compute capability {}.{}: vLLM's ModelOptFp8Config needs 8.9 "
                                     "(get_min_capability)", capability / 10, capability % 10),
                         true);
  }
  VllmQuantization q;
  q.method = stored.method;        // "nvfp4" or "fp8"
  q.static_activations = !nvfp4;  // ModelOpt FP8's per-tensor input_scale
  q.modelopt = true;
  q.modelopt_kv_fp8 = stored.modelopt_kv_fp8;
  q.capability = capability;
  q.multiprocessors = multiprocessors;
  // From 10.0, flashinfer-cutlass with FlashInfer (its cached mm_fp4 workspace), else vLLM's CUTLASS FP4 GEMM.
  q.flashinfer_gemm = r.flashinfer != false;
  source = stored.modelopt_file ? "ModelOpt's hf_quant_config.json (quant_algo " + algo + ")"
                                : "the config's quantization_config (modelopt, quant_algo " + algo + ")";
  return q;
}

void vllm_nvfp4_experts_check(const VllmResolved& settings, int capability, const std::string& model) {
  if (!vllm_nvfp4_marlin(capability))
    throw VllmGpuRefused(fmt::format("the ModelOpt NVFP4 experts of {} on compute capability {}.{}: vLLM runs them "
                                     "there with its CUTLASS FP4 MoE or FlashInfer's (cutlass_moe_fp4, "
                                     "trtllm_fp4_block_scale_moe), whose buffers memplan does not size; it sizes "
                                     "Marlin's, below 10.0",
                                     model, capability / 10, capability % 10),
                         false);
  // The 0.11 to 0.13 series' detect_nvfp4_moe_support takes Marlin where is_fp4_marlin_supported (8.0); from 0.14
  // select_nvfp4_moe_backend does where the FP4 backends are not supported (MarlinExperts from 7.5): below it
  // vllm_modelopt_quantization has refused the checkpoint already (VllmRule.fp4_marlin_sm75).
  if (!settings.rule.nvfp4_marlin_moe)
    throw InputError("--engine-version " + settings.version_text + " with " + model + "'s ModelOpt NVFP4 experts: "
                     "memplan sizes vLLM's Marlin path for them from 0.11 (ModelOptNvFp4FusedMoE calling "
                     "fused_marlin_moe, MarlinExperts in the modular kernel from 0.14); earlier releases' path is not "
                     "read: give --engine-version 0.11 or later");
}

void vllm_nvfp4_experts_apply(VllmAnswer& a, int multiprocessors, DType served) {
  VllmMoeAnswer& m = a.moe;
  if (m.blocks == 0 || m.expert_parallel) throw std::logic_error("vllm_nvfp4_experts_apply: no experts, or EP");
  m.nvfp4 = true;
  const VllmRule& rule = a.settings.rule;
  m.nvfp4_layer = vllm_nvfp4_marlin_experts(
      m.experts, m.hidden, m.intermediate_per_rank, multiprocessors, served,
      {rule.modular_moe, rule.nvfp4_moe_global_scales_float32, rule.marlin_moe_pads_width}, a.model);
  const uint64_t layers = static_cast<uint64_t>(m.blocks);
  // UnquantizedFusedMoEMethod's w13 and w2 (vllm_fused_moe's, the graph's experts on this rank) give way.
  m.graph_expert_bytes = m.expert_weight_bytes;
  m.expert_weight_bytes = checked_mul(m.nvfp4_layer.total(), layers, "expert bytes");
  if (m.modular != rule.modular_moe) throw std::logic_error("vllm_nvfp4_experts_apply: the kernel's release");
  m.kernel = vllm_marlin_moe_bytes(m.kernel_tokens, m.top_k, m.experts, m.hidden, m.nvfp4_layer.width,
                                   vllm_marlin_moe_reduces(a.quantization.capability, served, rule.marlin_moe_atomic_add),
                                   multiprocessors, served, m.modular);
  m.peak_allocated = vllm_moe_peak(m, 0);
  a.quantized.dense_bytes = checked_add(a.quantized.dense_bytes, m.graph_expert_bytes, "weights bytes");
  a.quantized.quantized_bytes = checked_add(a.quantized.quantized_bytes, m.expert_weight_bytes, "weights bytes");
}

std::set<std::string> modelopt_excluded_nodes(const Graph& g, const StoredQuantization& stored,
                                              const std::string& model) {
  std::set<std::string> out;
  for (const std::string& module : stored.excluded_modules) {
    // "model.layers.N.mlp.down_proj" -> the scope "/layers.N/mlp/down_proj/" (onnx_import/llama_graph.cc linear);
    // the tracer's weights are named onnx::MatMul_*, so the node's scope is what names the module.
    const std::string bare = module.substr(6);  // hf_modelopt.cc admits "model.layers.N.<two parts>" only
    const size_t layer_end = bare.find('.', 7);
    std::string scope = "/" + bare.substr(0, layer_end) + "/" + bare.substr(layer_end + 1) + "/";
    std::replace(scope.begin() + static_cast<std::ptrdiff_t>(layer_end + 2), scope.end(), '.', '/');
    bool found = false;
    for (const Node& n : g.nodes)
      if ((n.op_type == "MatMul" || n.op_type == "Gemm") && n.inputs.size() >= 2 && n.name.rfind(scope, 0) == 0 &&
          matmul_weight(g, n.inputs[1]) >= 0) {
        out.insert(n.name);
        found = true;
      }
    if (!found) throw std::logic_error("serve: no linear layer of " + model + " in " + scope + " (" + module + ")");
  }
  return out;
}

}  // namespace memplan
