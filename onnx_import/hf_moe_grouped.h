// --experts-implementation grouped_mm: a config.json mixture of experts (mixtral, qwen2_moe, qwen3_moe) whose experts
// run as transformers 5 runs them by default. PreTrainedModel.get_correct_experts_implementation
// (src/transformers/modeling_utils.py, huggingface/transformers main) returns "grouped_mm" when none is asked for;
// MixtralExperts and Qwen3MoeExperts are decorated with use_experts_implementation (Qwen2MoeExperts subclasses
// MixtralExperts, models/qwen2_moe/modular_qwen2_moe.py), which then calls grouped_mm_experts_forward
// (src/transformers/integrations/moe.py at 0261a46). Their experts are
// two 3-D parameters, gate_up_proj [E, 2I, H] and down_proj [E, H, I], in the block's `experts` module (mixtral's
// block is `mlp` there, as the others'); the router (`gate`, a weight [E, H]) and qwen2_moe's dense shared expert
// are unchanged.
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
//   act(gate) * up [S, I]; out = _grouped_mm(that, down_proj.transpose(-2, -1), offs) [S, H];
//   out * sample_weights_g.unsqueeze(-1) [S, H]; [inv_perm] [S, H]; .to(dtype); final.index_add_(0, token_idx, ...).
// Every size is S rows whatever the routing: the router's choice changes only the offsets' values, so
// --moe-routing (which decides the eager loop's per-expert rows) changes nothing here and is accepted unchanged.
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
// Not modelled, refused with one message (check_grouped_experts): deepseek_v2/v3 (their transformers-5 experts
// class and router are not read here) and gpt_oss (its experts have biases and a clamped gate: another _apply_gate
// path), and a model without experts.
#pragma once

#include <string>

#include "onnx_import/hf_config.h"

namespace memplan {

// Checks --experts-implementation `experts` ("eager" or "grouped_mm") against the config, and sets
// config.grouped_experts. Throws InputError naming the file, the value and why.
void check_grouped_experts(const std::string& path, const std::string& experts, DecoderConfig& config);

}  // namespace memplan
