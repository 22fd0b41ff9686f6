// SGLang's quantized weights (serve --engine sglang with --quantization or a config.json's quantization_config): what
// each quantized linear module holds once loaded, one tensor-parallel rank's, sized over the modules the shared
// analysis groups (cost_models/vllm_weights.h VllmLinearModule: the graph's linear layers on one activation, as
// SGLang's QKVParallelLinear and MergedColumnParallelLinear fuse them too). SGLang measures its free memory after
// loading (cost_models/sglang_engine.h): only what stays allocated counts, nothing transient of the load. Read in
// sgl-project/sglang, python/sglang/srt/layers/quantization/ (stored copies: fp8.py at 00563d3, whose per-tensor and
// block branches below read the same in the stored 0.5-series copies; fp8_utils.py cutlass_fp8_supported and
// can_auto_enable_marlin_fp8; awq.py at 0149944; gptq.py at 006d096) and models/ (qwen3_moe.py at 008af3a,
// qwen2_moe.py at 0115497):
//  - fp8, per-tensor (no weight_block_size), CUDA with cutlass_fp8_supported (compute capability 8.9 with CUDA 12.4,
//    9.0 and up with 12.0; SGLang 0.5's wheels are 12.4 or later): Fp8LinearMethod.create_weights (create_fp8_
//    weight_) makes weight float8_e4m3fn [out_p, in_p] and weight_scale float32 [shards]; process_weights_after_
//    loading replaces the scale by convert_to_channelwise's float32 [out_p, 1] ("cutlass sgl-kernel and marlin only
//    support per-channel scale"): 4 B an output row where vLLM requantizes to one float a module. With
//    activation_scheme static, input_scale [shards] becomes its max, one float (as vLLM's). A bfloat16 checkpoint
//    under --quantization fp8 is quantized at load per channel (per_token_group_quant_fp8 over the whole row, its
//    float32 [out_p, 1] scale transposed): the same bytes, no input scale. On compute capability 12.x later copies
//    requantize a checkpoint's scales to one a module (use_sm120_fp8_pertensor) where earlier 0.5 copies keep them
//    per channel: refused. Below 8.9 SGLang runs FP8 Marlin (can_auto_enable_marlin_fp8): refused.
//  - fp8, block-wise (the checkpoint's weight_block_size [block_n, block_k]): weight fp8 [out_p, in_p] and
//    weight_scale_inv float32 [ceil(out_p / block_n), ceil(in_p / block_k)] (create_fp8_weight_, the shard checks of
//    validate_block_quant_shapes equal vLLM's), kept as loaded on 8.9 and 9.0 (process_weights_after_loading_block_
//    quant requantizes the scales to UE8M0 in place only where DeepGEMM takes UE8M0 scales, Blackwell): vLLM's
//    layout, vllm_fp8_block_linear_bytes. Other GPUs refused as vLLM's rule refuses them.
//  - awq (--quantization awq): AWQConfig.get_quant_method gives AWQLinearMethod, whose create_weights makes qweight
//    int32 [in_p, out_p / 8], qzeros int32 [in_p / group, out_p / 8], scales [in_p / group, out_p] in the model's type,
//    kept by process_weights_after_loading: vLLM's layout (cost_models/packed_int_weights.h awq_packed). Without the
//    flag, AWQMarlinConfig.override_quantization_method serves a Marlin-compatible checkpoint as awq_marlin, whose
//    repacked layout is not read: refused on compute capability 8.0 and up (Marlin's minimum, check_marlin_supported;
//    below it the checkpoint's own method serves).
//  - gptq (--quantization gptq): GPTQLinearMethod.create_weights makes qweight int32 [in_p x bits / 32, out_p],
//    g_idx int32 [in_p], qzeros int32 [S, out_p x bits / 32] and scales [S, out_p] with S = in_p / group for a
//    row-parallel layer (input_size != in_p) when group_size is not -1, act order or not, else input_size / group
//    (1 for group_size -1); process_weights_after_loading keeps all four. vLLM differs twice: it replaces g_idx by an
//    empty tensor without desc_act, and keeps the whole input's S rows on a row-parallel act-order layer. Without the
//    flag, gptq_marlin (GPTQMarlinConfig.override_quantization_method): refused as awq's.
//  - Mixtures of experts (fp8 only; vLLM's rule refuses the others): Fp8MoEMethod (create_fp8_moe_weight_,
//    process_weights_after_loading) holds w13_weight fp8 [E, 2 I_p, H] and w2_weight fp8 [E, H, I_p]
//    (get_moe_weight_sizes pads only for AITER or SGLANG_MOE_PADDING), per-tensor w13_weight_scale [E, 2] made its
//    max over the shards [E], w2_weight_scale [E] and static input scales made one float each, block-wise
//    w13_weight_scale_inv [E, 2 ceil(I_p / block_n), ceil(H / block_k)] and w2_weight_scale_inv
//    [E, ceil(H / block_n), ceil(I_p / block_k)] kept as loaded where DeepGEMM does not run the experts (the moe
//    runner's auto choice without DeepEP is Triton): vLLM's Fp8MoEMethod layout, the analysis's expert bytes
//    (cost_models/vllm_fp8_block.h) unchanged. The routers differ: qwen3_moe's gate is a ReplicatedLinear given
//    quant_config only for ModelSlim checkpoints (Qwen3MoeSparseMoeBlock.__init__), so an fp8 checkpoint's stays in
//    the model's type where vLLM quantizes it; qwen2_moe's gate has quant_config None and its shared_expert_gate is
//    a torch.nn.Linear, as vLLM's. Other model types' routers under SGLang are not read: refused.
//  - Not read, refused: MXFP4 (SGLang's Mxfp4MoEMethod), multi-head latent attention's quantized kv_b_proj (what
//    DeepseekV2ForCausalLM.post_load_weights makes of w_kc and w_vc from it), ROCm (fnuz rescale, AITER shuffles).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cost_models/vllm_weights.h"

namespace memplan {

// What is known before the analysis runs: the method ("fp8", "awq", "gptq", "mxfp4", ...), whether --quantization
// names it, whether the checkpoint is fp8 (its quantization_config's method) and block-wise, the GPU (`cuda` false:
// ROCm; `capability` major x 10 + minor). Throws InputError naming `model` for what is not modelled above.
void sglang_quantization_check(const std::string& method, bool from_flag, bool checkpoint_fp8, bool block, bool cuda,
                               int capability, const std::string& model);

// After the analysis: its mixture of experts (`moe`, `model_type`) and latent attention (`mla`). Throws InputError.
void sglang_quantized_model_check(const std::string& method, bool moe, const std::string& model_type, bool mla,
                                  const std::string& model);

struct SglangQuantizedLinears {
  int modules = 0;            // the quantized modules (routers not counted)
  uint64_t bytes = 0;         // what SGLang holds for every module, the routers in the model's type included
  int routers = 0;            // modules SGLang keeps in the model's type (a router vLLM quantizes)
  uint64_t router_bytes = 0;  // their weights
  std::string layout;         // how the weights and scales are held, in words
};

// The modules of the analysis (`modules`, one rank's) under quantization `q`; a module whose layers are all in
// `routers` stays in the model's type (`element_bytes`). Throws std::logic_error on a module mixing a router with
// other layers (the analysis groups a router alone).
SglangQuantizedLinears sglang_quantized_linears(const std::vector<VllmLinearModule>& modules, const VllmQuantization& q,
                                                const std::set<std::string>& routers, uint64_t element_bytes);

}  // namespace memplan
