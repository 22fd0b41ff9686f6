// serve --engine vllm: the quantization vLLM serves with (vllm_quantization, report/serve_vllm.h), from
// --quantization and the checkpoint's quantization_config, checked as vLLM's config classes check it. What it sizes
// is the layers' (cost_models/vllm_weights.h) and, for ModelOpt and block-wise fp8, serve_vllm_modelopt.cc's and
// serve_vllm_fp8.cc's.
#include <fmt/format.h>

#include <string>

#include "onnx_import/errors.h"
#include "report/serve_vllm.h"

namespace memplan {

VllmQuantization vllm_quantization(ServeProbe& probe, const ServeSettings& s, const VllmResolved& r, int capability,
                                   int multiprocessors, DType served, std::string& source) {
  const StoredQuantization& stored = probe.stored_quantization();
  VllmQuantization q;
  if (stored.modelopt)
    return vllm_modelopt_quantization(stored, s, r, capability, multiprocessors, served, probe.path(), source);
  if (!s.quantization.empty() && !stored.method.empty() && s.quantization != stored.method)
    throw InputError("--quantization " + s.quantization + ": " + probe.path() + "'s quantization_config is " +
                     stored.method + " (vLLM refuses a --quantization that differs from the checkpoint's)");
  q.method = s.quantization.empty() ? stored.method : s.quantization;
  if (q.method.empty()) return q;
  q.capability = capability;
  q.multiprocessors = multiprocessors;
  source = s.quantization.empty() ? "the config's quantization_config" : "--quantization";
  // Without --quantization naming it, vLLM takes a compatible gptq checkpoint as gptq_marlin
  // (GPTQMarlinConfig.override_quantization_method, gptq_marlin.py at 00161ce: user_quant None, marlin or gptq_marlin,
  // and Marlin supports the bits and group size on the GPU), awq likewise as awq_marlin. Marlin's repacked layout is
  // not sized here: the layout of --quantization gptq / awq is, which keeps qzeros (and g_idx) Marlin may drop.
  if (s.quantization.empty() && (stored.method == "gptq" || stored.method == "awq"))
    source += " (vLLM may serve it as " + stored.method + "_marlin, whose repacked layout is not sized: this is " +
              stored.method + "'s own, as with --quantization " + stored.method + ")";
  q.bits = static_cast<int>(s.quant_bits ? s.quant_bits : stored.bits ? stored.bits : 4);
  q.group_size = s.quant_group_size ? s.quant_group_size : stored.group_size ? stored.group_size : 128;
  q.desc_act = stored.desc_act;
  q.static_activations = stored.static_activations;
  // Block-wise fp8 comes from the checkpoint only (--quantization fp8 on a bfloat16 model is per-tensor).
  if (q.method == "fp8" && stored.method == "fp8") q.block = VllmFp8Block{stored.block_n, stored.block_k};
  const std::string m = "--quantization " + q.method;
  if (q.method == "gptq" && q.bits != 2 && q.bits != 3 && q.bits != 4 && q.bits != 8)
    throw InputError(m + ": " + std::to_string(q.bits) + " bits; vLLM's GPTQ stores 2, 3, 4 or 8");
  if (q.method == "awq" && q.bits != 4)
    throw InputError(m + ": " + std::to_string(q.bits) + " bits; vLLM's AWQ stores 4");
  // VllmConfig._get_quantization_config checks the GPU's capability against get_min_capability, then the served
  // type against get_supported_act_dtypes: a GPU's refusal first (a catalog table's row), then the type's.
  const int min_capability = q.method == "fp8" || q.method == "mxfp4" ? 80 : q.method == "awq" ? 75 : 60;
  if (capability < min_capability || (q.method == "fp8" && capability < 89))
    throw VllmGpuRefused(fmt::format("{} on compute capability {}.{}: {}", m, capability / 10, capability % 10,
                                 q.method == "fp8" && capability >= 80
                                     ? "vLLM runs FP8 Marlin below 8.9 (weight-only, repacked), which memplan does not size"
                                     : fmt::format("vLLM needs {}.{} (get_min_capability)", min_capability / 10,
                                                   min_capability % 10)),
                         capability < min_capability);
  vllm_fp8_block_check_gpu(q, capability);
  // Mxfp4Config: get_min_capability 80, get_supported_act_dtypes bfloat16 (quantization/mxfp4.py at 007d500).
  if (q.method == "mxfp4" && served != DType::BFloat16)
    throw InputError(m + " serves in bfloat16 (vLLM's Mxfp4Config.get_supported_act_dtypes), not " +
                     std::string(dtype_name(served)) + ": give --dtype bf16");
  // GPTQ's and AWQ's own kernels run float16 only; gptq_marlin, which a config's gptq becomes without the flag,
  // runs bfloat16 too (GPTQMarlinConfig.get_supported_act_dtypes at 00161ce).
  const bool half_only = q.method == "awq" || (q.method == "gptq" && !s.quantization.empty());
  if (served == DType::Float32 || (half_only && served != DType::Float16))
    throw InputError(m + " serves in " + (half_only ? "float16" : "bfloat16 or float16") + " (vLLM's " +
                     "get_supported_act_dtypes), not " + std::string(dtype_name(served)) + ": give --dtype " +
                     (half_only ? "fp16" : "bf16 or fp16"));
  return q;
}

}  // namespace memplan
