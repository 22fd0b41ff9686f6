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
//    a torch.nn.Linear, as vLLM's. Other model types' routers under SGLang are not read (refused) but DeepSeek's:
//  - DeepSeek-V2/V3 (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM its subclass; models/deepseek_v2.py at 3e4a39ee,
//    a late 0.5-series copy, its weight loading the same in the 2026 deepseek_common/deepseek_weight_loader.py at
//    0201c04e) under block fp8 [128, 128], DeepSeek-V3/R1's checkpoints:
//    . DeepseekV2AttentionMLA.__init__: fused_qkv_a_proj_with_mqa, a ReplicatedLinear of hidden -> q_lora_rank +
//      kv_lora_rank + qk_rope_head_dim given quant_config (load_weights concatenates q_a_proj's and
//      kv_a_proj_with_mqa's weights and scale grids into it: ceil(2112 / 128) = 17 = 12 + 5 rows for DeepSeek-V3;
//      the analysis's module on the same activation, whose q_lora_rank shard vLLM's block check already requires a
//      multiple of block_n), q_b_proj (ColumnParallelLinear, _get_q_b_proj_quant_config: the quant_config),
//      kv_b_proj (ColumnParallelLinear) and o_proj (RowParallelLinear): fp8 weights and float32 block scales kept
//      as loaded on 8.9 and 9.0, vLLM's modules byte for byte. kv_b_proj also feeds w_kc and w_vc
//      (post_load_weights: dequantized to bfloat16 copies, cost_models/sglang_mla.h).
//    . The dense first layers' DeepseekV2MLP (gate_up_proj MergedColumnParallelLinear, down_proj RowParallelLinear,
//      quant_config): fp8 modules as vLLM's.
//    . MoEGate: weight nn.Parameter [n_routed_experts, hidden] in the model's type, no quant method (quant_config
//      only picks e_score_correction_bias's type: float32 unless modelopt_fp4 with FlashInfer's TRT-LLM MoE),
//      as vLLM's DeepSeekV2Gate: the analysis leaves it out of the quantized modules, its float32 bias beside it.
//    . The routed experts: FusedMoE (get_moe_impl_class; Triton without DeepEP) with Fp8MoEMethod, above.
//    . The shared experts: a DeepseekV2MLP with quant_config (fp8, vLLM's modules), or, with shared-experts
//      fusion, one more expert of the FusedMoE (num_experts n_routed + 1, top_k + 1; load_weights renames
//      mlp.shared_experts to mlp.experts.{n_routed}). DeepseekV2ForCausalLM.determine_num_fused_shared_experts turns
//      fusion on for DeepseekV3ForCausalLM with 256 routed and 1 shared expert on CUDA of capability 8.0 and up,
//      without expert parallelism, not for a w4afp8 config, unless --disable-shared-experts-fusion or a server
//      argument sets it (FlashInfer TRT-LLM MoE, server_args.py): DeepSeek-V3 at --tp 8 on Hopper fuses. Fused, the
//      expert holds w13 [2 I_p, H] with [2 ceil(I_p / block_n), ceil(H / block_k)] scales and w2 [H, I_p] with
//      [ceil(H / block_n), ceil(I_p / block_k)]; unfused, gate_up [2 I_p, H] with [ceil(2 I_p / block_n),
//      ceil(H / block_k)] and down the same as w2. Both need I_p a multiple of block_n (Fp8MoEMethod.create_weights;
//      validate_block_quant_shapes on the merged gate_up) and at tp > 1 of block_k: the same bytes, the analysis's
//      shared-expert modules either way.
//    . Fp8Config.get_quant_method gives every RadixAttention (radix_attention.py: quant_config's method, then
//      create_weights) an Fp8KVCacheMethod: BaseKVCacheMethod.create_weights registers k_scale and v_scale, 0-dim
//      float32 parameters, kept by process_weights_after_loading (layers/quantization/kv_cache.py at 078e5e2): 8 B
//      an attention, for every fp8 model (awq's and gptq's configs are not read for it); DeepseekV2AttentionMLA has
//      two RadixAttention given quant_config (attn_mqa, attn_mha): 16 B a layer.
//    Per-tensor fp8 (channel_quant_to_tensor_quant), other block sizes (block_quant_to_tensor_quant), awq and gptq
//    under latent attention are refused, as is a mixture of experts other than these model types'.
//  - ModelOpt FP8 (quant_algo FP8: hf_quant_config.json or a config.json quantization_config "modelopt";
//    modelopt_quant.py at faeb968): ModelOptFp8Config.get_quant_method gives every LinearBase not named by
//    exclude_modules (a substring test on the module's prefix) a ModelOptFp8LinearMethod, whose create_weights makes
//    weight float8_e4m3fn [out_p, in_p], weight_scale and input_scale float32 [shards], and whose
//    process_weights_after_loading requantizes the shards to the max weight scale, converts it to float32 [out_p, 1]
//    where cutlass_fp8_supported (convert_to_channelwise) and keeps input_scale's max: the per-tensor fp8 checkpoint's
//    layout with a static input scale above, sized by that rule. Every RadixAttention gets ModelOptFp8KVCacheMethod
//    (k_scale, v_scale: 8 B) only when kv_cache_quant_algo is set. The KV cache's type under --kv-cache-dtype auto:
//    ModelRunner.configure_kv_cache_dtype makes it fp8_e4m3 where quant_config.kv_cache_quant_algo is "FP8", an
//    attribute faeb968's ModelOptFp8Config does not have (it keeps kv_cache_quant_method: the model's type) and later
//    copies' does (their ModelOptQuantConfig base keeps kv_cache_quant_algo: fp8); which 0.5 releases do which is
//    not read, so auto on a kv_cache_quant_algo FP8 checkpoint is refused (report/serve_engines.cc serve_engine):
//    --kv-cache-dtype fp8 is sized.
//  - Not read, refused: MXFP4 (SGLang's Mxfp4MoEMethod), ROCm (fnuz rescale, AITER shuffles).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cost_models/vllm_weights.h"

namespace memplan {

// What is known before the analysis runs: the method ("fp8", "awq", "gptq", "mxfp4", ...), whether --quantization
// names it, whether the checkpoint is fp8 (its quantization_config's method) and block-wise, the GPU (`cuda` false:
// ROCm; `capability` major x 10 + minor). Throws InputError naming `model` for what is not modelled
// above and, for mxfp4, where SGLang's MoE runner backend is not sized (cost_models/mxfp4_experts.h).
// `modelopt`: a ModelOpt FP8 checkpoint (onnx_import/hf_modelopt.h), SGLang's ModelOptFp8Config
// (layers/quantization/modelopt_quant.py at faeb968): get_min_capability 89, no --quantization memplan takes names it.
void sglang_quantization_check(const std::string& method, bool from_flag, bool checkpoint_fp8, bool block, bool cuda,
                               int capability, const std::string& model, bool modelopt = false);

// After the analysis: its mixture of experts (`moe`, `model_type`) and latent attention (`mla`) under `q`. Throws
// InputError.
void sglang_quantized_model_check(const VllmQuantization& q, bool moe, const std::string& model_type, bool mla,
                                  const std::string& model);

// Fp8KVCacheMethod's k_scale and v_scale (float32 scalars) of `attentions` RadixAttention modules.
uint64_t sglang_fp8_kv_scale_bytes(int64_t attentions);

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
