#include "cost_models/sglang_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "cost_models/mxfp4_experts.h"
#include "cost_models/packed_int_weights.h"
#include "cost_models/vllm_fp8_block.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

constexpr const char* kSglang = "SGLang quantized weights";

}  // namespace

void sglang_quantization_check(const std::string& method, bool from_flag, bool checkpoint_fp8, bool block, bool cuda,
                               int capability, const std::string& model, bool modelopt) {
  if (method.empty()) return;
  const std::string who = "serve --engine sglang on " + model + " (" + (modelopt ? "ModelOpt FP8" : method) + "): ";
  if (!cuda)
    throw InputError(who + "SGLang's quantized layers on ROCm (e4m3fnuz rescale, AITER's shuffled weights) are not "
                     "modelled");
  if (modelopt) {
    if (from_flag)
      throw InputError(who + "--quantization " + method + " names another method than the checkpoint's modelopt; "
                       "give no --quantization");
    if (capability < 89)
      throw InputError(who + fmt::format("ModelOptFp8Config needs compute capability 8.9 (get_min_capability), not "
                                         "{}.{}", capability / 10, capability % 10));
    return;  // per channel wherever cutlass_fp8_supported holds: 8.9 with CUDA 12.4 and up, 9.0 and up
  }
  if (method == "mxfp4") {  // a checkpoint's (--quantization does not take it): cost_models/mxfp4_experts.h
    sglang_mxfp4_backend(capability, model);  // throws where it is not sized
    return;
  }
  if (method != "fp8" && method != "awq" && method != "gptq")
    throw InputError(who + "how SGLang holds " + method + " weights (its quantization method) is not read; memplan "
                     "sizes SGLang's fp8, awq, gptq and mxfp4");
  // Marlin needs compute capability 8.0 (marlin_utils.py check_marlin_supported): below it the checkpoint's own
  // method serves, the layout sized here.
  if ((method == "awq" || method == "gptq") && !from_flag && capability >= 80)
    throw InputError(who + "without --quantization " + method + ", SGLang serves a Marlin-compatible checkpoint as " +
                     method + "_marlin (" + (method == "awq" ? "AWQMarlinConfig" : "GPTQMarlinConfig") +
                     ".override_quantization_method), whose repacked layout memplan does not size: give "
                     "--quantization " + method + " (SGLang's " + (method == "awq" ? "AWQLinearMethod" : "GPTQLinearMethod") +
                     ", which memplan sizes)");
  if (method != "fp8") return;
  const std::string cc = fmt::format("compute capability {}.{}", capability / 10, capability % 10);
  if (capability < 89)
    throw InputError(who + "SGLang runs FP8 Marlin below 8.9 (fp8_utils.py can_auto_enable_marlin_fp8: weight-only, "
                     "repacked), which memplan does not size; " + cc);
  if (block && capability != 89 && capability != 90)
    throw InputError(who + "block-wise fp8 on " + cc + ": SGLang's DeepGEMM UE8M0 requantization and scale layouts "
                     "there are not sized (memplan sizes 8.9 and 9.0)");
  if (!block && checkpoint_fp8 && capability / 10 == 12)
    throw InputError(who + "per-tensor fp8 checkpoint on " + cc + ": SGLang's scales there changed within the 0.5 "
                     "series (per channel, later one a module: fp8.py use_sm120_fp8_pertensor); not modelled");
}

void sglang_quantized_model_check(const VllmQuantization& q, bool moe, const std::string& model_type, bool mla,
                                  const std::string& model) {
  if (q.method.empty()) return;
  const std::string who = "serve --engine sglang on " + model + " (" + q.method + "): ";
  // DeepseekV2ForCausalLM.post_load_weights: block_quant_dequant to bf16 only for CUDA's [128, 128] blocks.
  if (mla && !(q.method == "fp8" && q.block.n == 128 && q.block.k == 128))
    throw InputError(who + "what SGLang's DeepseekV2ForCausalLM.post_load_weights makes of this kv_b_proj is not "
                     "sized (" + (q.method != "fp8" ? "a " + q.method + " kv_b_proj"
                                  : q.block.on() ? fmt::format("block_quant_to_tensor_quant for blocks [{}, {}]",
                                                               q.block.n, q.block.k)
                                                 : std::string("channel_quant_to_tensor_quant for per-tensor fp8")) +
                     "); memplan sizes block fp8 [128, 128], DeepSeek-V3's: bf16 w_kc and w_vc)");
  const bool deepseek = model_type == "deepseek_v2" || model_type == "deepseek_v3";
  if (moe && model_type != "qwen2_moe" && model_type != "qwen3_moe" && !deepseek)
    throw InputError(who + "whether SGLang quantizes " + (model_type.empty() ? std::string("this model") : model_type) +
                     "'s router is not read (memplan reads qwen2_moe's, qwen3_moe's, deepseek_v2's and deepseek_v3's: "
                     "kept in the model's type)");
}

uint64_t sglang_fp8_kv_scale_bytes(int64_t attentions) {
  return checked_mul(checked_mul(static_cast<uint64_t>(attentions), 2, kSglang), 4, kSglang);  // k_scale, v_scale
}

SglangQuantizedLinears sglang_quantized_linears(const std::vector<VllmLinearModule>& modules, const VllmQuantization& q,
                                                const std::set<std::string>& routers, uint64_t element_bytes) {
  SglangQuantizedLinears r;
  const bool block = q.method == "fp8" && q.block.on();
  r.layout = q.method == "fp8" ? block ? fmt::format("fp8 weights, float32 scales a [{}, {}] block", q.block.n, q.block.k)
             : q.modelopt ? std::string("fp8 weights, one float32 scale an output row and a float32 input_scale "
                                        "(ModelOptFp8LinearMethod)")
                          : std::string("fp8 weights, one float32 scale an output row (per channel)")
             : q.method == "awq" ? fmt::format("awq int4, groups of {}", q.group_size)
                                 : fmt::format("gptq int{}, groups of {}, g_idx kept", q.bits, q.group_size);
  for (const VllmLinearModule& m : modules) {
    const uint64_t in_p = u64(m.in_p), out_p = u64(m.out_p);
    const auto is_router = [&](const std::string& n) { return routers.count(n) > 0; };
    const size_t router_layers = static_cast<size_t>(std::count_if(m.nodes.begin(), m.nodes.end(), is_router));
    if (router_layers > 0 && router_layers != m.nodes.size())
      throw std::logic_error("serve --engine sglang: a linear module mixes a router with other layers (" +
                             m.nodes.front() + ")");
    uint64_t b = 0;
    if (router_layers > 0) {  // the gate in the model's type
      b = checked_mul(checked_mul(in_p, out_p, kSglang), element_bytes, kSglang);
      ++r.routers;
      r.router_bytes = checked_add(r.router_bytes, b, kSglang);
    } else if (block) {
      b = vllm_fp8_block_linear_bytes(m.out_p, m.in_p, q.block);
      ++r.modules;
    } else if (q.method == "fp8") {  // convert_to_channelwise: float32 [out_p, 1]; static: input_scale.max()
      b = checked_add(checked_mul(out_p, in_p, kSglang), checked_mul(out_p, 4, kSglang), kSglang) +
          (q.static_activations ? 4 : 0);
      ++r.modules;
    } else if (q.method == "awq") {
      b = awq_packed(in_p, out_p, in_p / u64(q.group_size), element_bytes).total();
      ++r.modules;
    } else if (q.method == "gptq") {
      const bool row_parallel = m.in_p != m.input_size;
      const uint64_t rows = q.group_size == -1 ? 1
                            : row_parallel    ? in_p / u64(q.group_size)
                                              : u64(m.input_size / q.group_size);
      b = gptq_packed(in_p, out_p, static_cast<uint64_t>(q.bits), rows, element_bytes, true).total();
      ++r.modules;
    } else {
      throw std::logic_error("serve --engine sglang: no layout for " + q.method);
    }
    r.bytes = checked_add(r.bytes, b, kSglang);
  }
  return r;
}

}  // namespace memplan
