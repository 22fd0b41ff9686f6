// gpt_oss from its config.json (transformers models/gpt_oss/configuration_gpt_oss.py GptOssConfig,
// modeling_gpt_oss.py GptOssForCausalLM), built as torch.onnx.export (torch 1.13, opset 17) writes
// tests/models/hf_gpt_oss.py's plain-PyTorch twin; tests/import/hf_gpt_oss_test.py checks it node for node.
//
// What differs from the other decoders (each in hf_gpt_oss.cc, hooked into the shared builders):
//  - GptOssAttention (arch_attention, hf_arch_layers.cc): q/k/v/o with biases; eager_attention_forward's attention
//    sinks, a learned logit per head (`sinks`, [heads]) expanded to (batch, heads, new, 1), concatenated to the masked
//    scores, the row maximum subtracted, softmax, the sink column dropped: per layer one (batch, heads, new,
//    total + 1) concatenation, its difference and its softmax instead of the (…, total) softmax;
//  - GptOssRotaryEmbedding / _apply_rotary_emb: cos and sin over head_dim / 2 (no concatenation), times
//    attention_scaling; yarn rope_scaling (modeling_rope_utils.py _compute_yarn_parameters) changes inv_freq's
//    values and attention_scaling = 0.1 ln(factor) + 1 (get_mscale), no shape;
//  - layer_types: "sliding_attention" layers masked to sliding_window (gemma's window mask, llama_graph.cc);
//  - GptOssMLP (hf_moe.cc's sparse block and both --moe-routing rules): GptOssTopKRouter, a Linear with bias (a Gemm
//    on the 2-D tokens), top-k of the logits, softmax over the k values; GptOssExperts: per expert its tokens
//    gathered, x @ gate_up_proj[e] + gate_up_proj_bias[e] ([E, H, 2I] parameters: the expert's slice is a view),
//    gate = [..., ::2] and up = [..., 1::2] (strided views), gate clamped above at swiglu_limit, up to [-limit,
//    limit], gate * sigmoid(1.702 gate), (up + 1) * glu @ down_proj[e] + down_proj_bias[e], weighted, index_add_.
//    transformers runs this loop in training; its eval path on a GPU (v4.55 to v4.57) instead repeated every token
//    through every expert (hidden_states.repeat(num_experts, 1), two bmm), removed later (modular_gpt_oss.py at
//    0261a467 loops in eval too): memplan builds the loop for every graph (docs/cost-models.md gives the batched
//    path's size).
// Internal to onnx_import.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "onnx_import/hf_config.h"

namespace memplan {

// The config keys of model_type gpt_oss beyond the shared ones (empty for any other type).
const std::set<std::string>& gpt_oss_keys(const std::string& model_type);

// Reads gpt_oss's own keys into `c`. Throws InputError naming the file and the key.
void parse_gpt_oss(const std::string& path, const nlohmann::json& j, DecoderConfig& c);

}  // namespace memplan
