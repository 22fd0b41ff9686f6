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
// vllm_serve when no --experts-implementation is asked for, which they refuse), which replace each sparse block's experts by their fused MoE kernel (cost_models/engine_kernels.h
// find_moe_blocks: everything downstream of the router's top-k up to the block's result is held outside the profile
// step), the loop is written without what only its held tensors need: every expert's MLP (its three projections, or
// gpt_oss's two with their biases and clamped gate, the same weights in the same order) reads one gathered state of
// the pairs' tokens, gathered again before the last expert (so the block's input is last read where the loop last
// reads it), and the experts' outputs are summed (Sum) and index_add_'ed once, after the zeros accumulator the loop
// makes after its first expert. What the engines read stays the loop's: the router and its steps, the block's input
// and result, the expert weights each a MatMul's (the tensor-parallel plan splits them, the quantized-layer count
// leaves them out), E, k, I, H and the tokens (tests/report/serve_fused_experts_test.cc). DeepSeek-V3's decode graph:
// 105,672 nodes instead of 564,742 (bench/config_speed.md). DeepseekV2MoEGate's group_limited_greedy router, which
// find_moe_blocks does not read (its experts stay in the step), keeps the loop.
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
