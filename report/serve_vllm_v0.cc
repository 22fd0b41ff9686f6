// serve --engine vllm --engine-version 0.6.x (vLLM's V0 engine, cost_models/vllm_engine.h V0_6): what its rule
// does not size, refused with the reason rather than answered with the V1 engine's pieces.
#include "onnx_import/errors.h"
#include "report/serve_vllm.h"

namespace memplan {

void vllm_v0_refusals(ServeProbe& probe, const ServeSettings& s, bool moe) {
  const std::string v = "--engine-version " + s.engine_version + " (vLLM's V0 engine)";
  // V0's profile_run gives its dummy prompts max_loras dummy LoRAs round-robin (vllm/worker/model_runner.py at
  // 587909c, ModelRunner.profile_run), so the LoRA kernels' buffers are in its peak: not sized.
  if (s.enable_lora)
    throw InputError(v + " with --enable-lora: V0's profile run activates max_loras dummy adapters, whose LoRA "
                     "kernels' buffers memplan does not size");
  if (!s.quantization.empty() || !probe.stored_quantization().method.empty())
    throw InputError(v + ": " + probe.path() + "'s quantization (" +
                     (s.quantization.empty() ? probe.stored_quantization().method : s.quantization) +
                     ") is not modelled for V0 (its quantized layers are read at V1-era commits only)");
  if (moe)
    throw InputError(v + ": " + probe.path() + "'s mixture of experts is not modelled for V0 (its fused MoE kernel's "
                     "buffers are read at V1-era commits only)");
  // V0's --dtype auto (vllm/config.py at c0c2335, _get_and_verify_dtype): a float32 checkpoint in float16, other
  // types kept; the 0.6 text is not read, nor what it did with bfloat16 below compute capability 8.0: memplan's
  // V1 rule answers only where it keeps the stored type.
  const DType stored = probe.stored_float_dtype();
  const int arch = probe.options().execution.cuda_arch_major;
  if (probe.auto_dtype() && (stored == DType::Float32 || (stored == DType::BFloat16 && arch < 8)))
    throw InputError(v + ": the type V0's --dtype auto serves " + probe.path() + " (stored in " +
                     std::string(dtype_name(stored)) + ") in is not read at a 0.6 commit: give --dtype");
}

}  // namespace memplan
