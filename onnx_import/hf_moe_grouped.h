// --experts-implementation grouped_mm: a config.json mixture of experts (mixtral, qwen2_moe, qwen3_moe, deepseek_v2,
// deepseek_v3, gpt_oss) whose experts run as transformers 5 runs them by default.
// PreTrainedModel.get_correct_experts_implementation (src/transformers/modeling_utils.py, huggingface/transformers
// main) returns "grouped_mm" when none is asked for; each model's experts class is decorated with
// use_experts_implementation, which then calls grouped_mm_experts_forward (src/transformers/integrations/moe.py at
// 0261a46) in place of the class's own loop:
//  - MixtralExperts, Qwen3MoeExperts (Qwen2MoeExperts subclasses MixtralExperts, models/qwen2_moe/
//    modular_qwen2_moe.py): gate_up_proj [E, 2I, H] and down_proj [E, H, I] in the block's `experts` module
//    (mixtral's block is `mlp` there, as the others'); the router (`gate`, a weight [E, H]) and qwen2_moe's dense
//    shared expert are unchanged.
//  - DeepseekV3NaiveMoe (models/deepseek_v3/modeling_deepseek_v3.py, read in the transformers 5 fork
//    evalstate/transformers at 64bd3ce; named DeepseekV3Experts later, 8b-is/transformers at 6162a92) and
//    DeepseekV2Experts (models/deepseek_v2/modular_deepseek_v2.py: class DeepseekV2Experts(Qwen2MoeExperts), the
//    generated modeling_deepseek_v2.py decorated, yunkchen/transformers at f5136fd): the same two parameters
//    (E = n_routed_experts, I = moe_intermediate_size), silu. DeepseekV3MoE / DeepseekV2Moe.forward: the router's
//    top-k indices and float32 weights [N, k] (DeepseekV3MoE.route_tokens_to_experts: sigmoid, group-limited top-k,
//    the gathered scores normalised and scaled; DeepseekV2Moe: softmax, greedy or group-limited top-k, scaled: the
//    routers of hf_deepseek_router.cc), experts(hidden.view(-1, H), indices, weights).view(*orig_shape) +
//    shared_experts(residuals); first_k_dense_replace's dense layers unchanged. (Transformers 5's V3 router masks
//    the unkept groups with -inf where transformers 4's wrote 0.0: a value, not a size; the graph keeps 0.0.)
//  - GptOssExperts (models/gpt_oss/modular_gpt_oss.py at 0261a46): experts_are_transposed, so the matrices are
//    stored [in, out] and used untransposed: gate_up_proj [E, H, 2I], down_proj [E, I, H], and the biases
//    gate_up_proj_bias [E, 2I], down_proj_bias [E, H], which grouped_mm_experts_forward adds as
//    bias[expert_ids_g] ([S, 2I] and [S, H], a gather per row); its _apply_gate replaces chunk/silu: gate_up[...,
//    ::2] and [..., 1::2] (views), gate clamped above at the limit, up to [-limit, limit], gate *
//    sigmoid(1.702 gate), (up + 1) * glu [S, I] (LlamaBuilder::gpt_oss_gate, the eager loop's too). The router is
//    GptOssTopKRouter (Linear with bias, top-k, softmax over the k values), unchanged.
//
// grouped_mm_experts_forward, per sparse block, N tokens, k = num_experts_per_tok, S = N·k (the (token, slot) pairs):
//   final = zeros_like(hidden) [N, H]; expert_ids = top_k_index.reshape(-1) [S] (a view);
//   token_idx = arange(N).unsqueeze(1).expand(-1, k).reshape(-1) [S] int64 (a copy: the expand is strided);
//   perm = argsort(expert_ids, stable=True), inv_perm = argsort(perm, stable=True): each a sort, [S] int64 values
//   and [S] int64 indices (torch.onnx writes argsort as TopK with largest=0, both outputs);
//   sample_weights = top_k_weights.reshape(-1) [S] (a view); current = hidden[token_idx] [S, H];
//   expert_ids_g, sample_weights_g, current_g = those [perm] ([S], [S], [S, H]);
//   histc(expert_ids_g.float(), bins=E) [E] float32 (after a [S] float32 cast); cumsum(dtype=int32) [E] int32
//   (after its [E] int32 cast);
//   gate_up = _grouped_mm(current_g, gate_up_proj.transpose(-2, -1), offs) [S, 2I]; gate, up = chunk(2) (views);
//   act(gate) * up [S, I]; out = _grouped_mm(that, down_proj.transpose(-2, -1), offs) [S, H] (gpt_oss: as above);
//   out * sample_weights_g.unsqueeze(-1) [S, H]; [inv_perm] [S, H]; .to(dtype); final.index_add_(0, token_idx, ...).
// Every size is S rows whatever the routing: the router's choice changes only the offsets' values, so
// --moe-routing (which decides the eager loop's per-expert rows) changes nothing here and is accepted unchanged
// (under --ep it decides the rows each GPU receives, below).
//
// In the graph: torch.onnx (torch 1.13, opset 17) writes each op as it writes it elsewhere in these graphs (Range,
// Unsqueeze, Expand, Reshape, Gather, TopK, Cast, CumSum, Split, Sigmoid, Mul, Transpose, index_add_'s
// ScatterElements and Add), and the two aten ops it has no symbolic for, aten::_grouped_mm and aten::histc, as its
// ATen fallback writes them (onnx_import/rules/aten.cc: op type ATen, domain org.pytorch.aten, attribute
// operator). This graph is not an export: torch 1.13 has no _grouped_mm (transformers asks for torch >= 2.9), so the
// ops are the modeling code's, each tensor at the size the code allocates, not checked node for node against
// torch.onnx as the eager block is (tests/import/hf_moe_test.py). --graph decode and prefill build the same block on
// the new tokens (N = batch x new tokens); their constant folding turns each 3-D expert parameter's transpose into
// a transposed initializer of the same bytes, as it does a 2-D weight's (graph_emitter.h).
//
// serve's engines read this block too (DecoderConfig::engine_experts, hf_moe.h): on vLLM's stacked w13_weight and
// w2_weight, its token indices from the router's pairs.
//
// Refused with one message (check_grouped_experts): a model without experts.
//
// --ep N (check_expert_parallel; the block in hf_moe_ep.cc, which states its rules and sources): torchtitan's
// ExpertParallel around these grouped experts, the graph of rank 0 of the N expert-parallel GPUs: E/N experts'
// parameters, its rows sent and received by all-to-all, permuted and padded, and combined back.
#pragma once

#include <string>

#include "onnx_import/hf_config.h"

namespace memplan {

// Checks --experts-implementation `experts` ("eager" or "grouped_mm") against the config, and sets
// config.grouped_experts. Throws InputError naming the file, the value and why.
void check_grouped_experts(const std::string& path, const std::string& experts, DecoderConfig& config);

// Checks --ep `ep` (> 1) against the config and the graph `kind` and sets config.expert_parallel: the train graph of
// a grouped_mm mixture of experts (not gpt_oss) whose experts N divides. Throws InputError naming both numbers.
void check_expert_parallel(const std::string& path, int ep, ConfigGraph kind, DecoderConfig& config);

}  // namespace memplan
