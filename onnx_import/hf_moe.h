// Mixture-of-experts decoders from their config.json: mixtral (transformers models/mixtral/modeling_mixtral.py,
// MixtralSparseMoeBlock), qwen2_moe (qwen2_moe/modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock with its shared expert)
// and qwen3_moe (qwen3_moe/modeling_qwen3_moe.py, Qwen3MoeSparseMoeBlock), each with its dense analogue's attention
// (mistral's, qwen2's, qwen3's): --graph train, decode and prefill (the same sparse block on the new tokens; the
// decoder graphs fold as the dense ones, the router's top-k count a 1-D Constant). Internal to onnx_import.
//
// The sparse block is built op for op as torch.onnx.export (torch 1.13, opset 17, training export) writes
// tests/models/hf_moe.py's SparseMoeBlock (decode and prefill: eval mode, constant folding): the router (gate
// Linear, softmax in float32, top-k, divided by their sum when the config normalizes, cast), a zeros accumulator, per
// expert its tokens gathered, its SwiGLU MLP, times the routing weights, index_add_ back (which the exporter writes
// as Slice/Expand/ScatterElements/Add, placed after the next expert's work), and qwen2_moe's shared expert times
// sigmoid(shared_expert_gate).
//
// Routing (--moe-routing): which tokens an expert receives depends on the router's values, so the modeling code's
// torch.where over a one-hot of the top-k choices has no static length. Two rules, each a choice the router can make:
// worst: every token picks the same k experts (slot j -> expert j), so experts 0..k-1 each receive all N tokens,
// the most one expert can receive (top-k picks distinct experts and transformers' blocks drop no token), the others
// none (in the graph: a Slice with step k from e, or an empty Slice [0:0]).
// balanced (the default): memplan deals the N·k (token, slot) pairs of N = batch·seq tokens to the experts in
// turn: pair p = token·k + slot goes to expert p mod E, so expert e receives ceil((N·k − e) / E) tokens, i.e. N·k / E
// rounded up for the first (N·k mod E) experts and down for the rest, every pair once (in the graph: a Range over
// the pairs, its token index p / k, and a Slice with step E from e). A router can make exactly this choice (a
// token's k pairs go to k distinct experts when k <= E), so every tensor of the block has a size the modeling code
// meets; the int64 bookkeeping differs (the modeling code's one-hot mask (E, k, N) and torch.where's index pair are
// not in the graph; memplan holds the pair indices, N·k int64 per layer, instead).
//
// For serve's engines (--engine vllm, sglang, trtllm, all: DecoderConfig::engine_experts, set by read_config_model's
// vllm_serve when no --experts-implementation is asked for, which they refuse), which replace each sparse block's
// experts by their fused MoE kernel (cost_models/engine_kernels.h find_moe_blocks: everything downstream of the
// router's top-k up to the block's result is held outside the profile step), the experts are written as those engines
// hold them: vLLM's FusedMoE allocates one w13_weight [E, 2I, H] (every expert's gate and up) and one w2_weight [E, H,
// I] a layer (vllm/model_executor/layers/fused_moe/layer.py at c439a13, UnquantizedFusedMoEMethod.create_weights; its
// fp8 and MXFP4 methods the same two stacked tensors, cost_models/vllm_fp8_block.h, mxfp4_experts.h). The block is
// hf_moe_grouped.h's grouped form (two aten::_grouped_mm over all experts, S = N·k rows) on the stacked weights stored
// [E, H, 2I] and [E, I, H] under vLLM's names (layers.N.mlp.experts.w13_weight, .w2_weight; gpt_oss keeps
// GptOssExperts' gate_up_proj, down_proj and their biases), its token indices taken from the router's pairs so that all
// of it is downstream of the top-k, the checkpoint's module names kept (mixtral's block_sparse_moe), and
// DeepseekV3MoE's float32 result cast back as the eager loop writes it. What the engines read is the loop's: the router
// and its steps, the block's input and result, E, k, I, H, the tokens, the projections (find_moe_blocks counts a
// stacked weight as E of them, 2E for w13) and the tensor-parallel split of each expert (tensor_parallel.cc,
// stacked_linear); what changes is what PyTorch's caching allocator does with one large weight instead of E small ones
// (tests/report/serve_fused_experts_test.cc, bench/config_speed.md). DeepseekV2MoEGate's group_limited_greedy router,
// which find_moe_blocks does not read (its experts stay in the step), keeps the eager loop.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "onnx_import/hf_config.h"

namespace memplan {

// The dense model type whose attention, keys and checks a mixture of experts shares: mixtral -> mistral,
// qwen2_moe -> qwen2, qwen3_moe -> qwen3; any other type is returned as it is.
std::string moe_dense_type(const std::string& model_type);

// The config keys of a mixture-of-experts type (empty for any other type).
const std::set<std::string>& moe_keys(const std::string& model_type);

// Reads the experts' keys into `c` (model_type one of the three). Throws InputError naming the file and the key.
void parse_moe(const std::string& path, const nlohmann::json& j, DecoderConfig& c);

}  // namespace memplan
