// What a serving engine's kernels replace in a decoder's exported graph, found by structure (no names read):
//  - the language-model head: the graph output that is not a KV cache's present output, produced by MatMul (or
//    Gemm) of the last hidden states with a weight, directly or through Cast/Identity (transformers'
//    `logits.float()`) and a final soft-cap, cap x tanh(logits / cap) (Gemma 2's final_logit_softcapping, which
//    vLLM's LogitsProcessor applies to the sampled rows). vLLM computes logits only at the positions it samples (vllm/v1/worker/gpu_model_runner.py,
//    GPUModelRunner._dummy_run returns hidden_states[logit_indices], one row per request), so the head's output
//    over every token of a step never exists there;
//  - grouped-query attention's repeat_kv: the present keys and values expanded to every query head
//    (transformers' repeat_kv: unsqueeze, expand, reshape, written Unsqueeze/Expand/Reshape, then the keys'
//    Transpose) before the attention MatMuls. vLLM's attention kernels read the paged cache in place, one KV head
//    per group of query heads (vllm/v1/attention/backends/flash_attn.py, FlashAttentionImpl.forward).
//  - a mixture of experts' sparse block (find_moe_blocks below): the router's softmax and top-k, the tokens each
//    expert gathers, its MLP, the scatter back: what a fused MoE kernel computes in its own buffers (vLLM's
//    fused_experts, cost_models/vllm_fused_moe.h).
// The attention block itself (MatMul, scale, a soft-cap, mask, Softmax, MatMul) is the fusion's
// (cost_models/op_fusion.h, OpKind::Attention, with AttentionImpl::EngineKernel): a kernel that writes its output
// only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

struct LmHead {
  std::string node;                  // the MatMul/Gemm node
  int32_t hidden = -1;               // its data input: the last hidden states [..., hidden]
  int64_t hidden_size = 0;
  int64_t vocab = 0;                 // the logits' last dimension
  std::vector<std::string> logits;   // the head's output and the Cast/Identity chain to the graph output
};

// The head of `g`, or nullopt when no graph output outside `cache_outputs` is a MatMul/Gemm of a weight
// (initializer, or its Transpose) whose last dimension is the output's.
std::optional<LmHead> find_lm_head(const Graph& g, const std::vector<std::string>& cache_outputs);

struct RepeatKv {
  std::vector<std::string> expands;  // the Expand nodes, one per expanded present output
  std::vector<std::string> tensors;  // every tensor of the chains from the present outputs to the MatMuls
};

// The repeat_kv chains of `g`: from each of `present_outputs`, the data path through Unsqueeze, Expand, Reshape
// and Transpose nodes to the MatMul that reads it, when it passes an Expand (a cache read in place, as a model
// without grouped-query attention reads it, has no chain).
RepeatKv find_repeat_kv(const Graph& g, const std::vector<std::string>& present_outputs);

// One sparse block of a mixture of experts, as transformers' blocks are written (MixtralSparseMoeBlock,
// Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock; tests/models/hf_moe.py): router logits = MatMul(x, W_gate)
// [tokens, E], Softmax, Cast, TopK k; per expert its tokens gathered and its MLP; each result scattered into a
// [tokens, hidden] accumulator (index_add_, exported ScatterElements into zeros, then Add). Found by structure:
// from a TopK over a Cast of a Softmax of a MatMul on a weight, every tensor downstream up to the accumulator that
// no further scatter reads (the block's result), the first accumulator (zeros of the tokens' shape), and the
// router's Softmax and Cast.
struct MoeBlock {
  std::string topk;                  // the router's TopK node
  int64_t tokens = 0, hidden = 0, experts = 0, top_k = 0;
  int64_t expert_intermediate = 0;   // one expert's MLP width (its first projection's output features)
  int expert_linears = 0;            // MatMuls on weights inside the block (3 per expert)
  // The experts' weights, in the order the block reads them: every expert's projection weights (the loop's
  // MatMuls), or the stacked [E, in, out] weights aten::_grouped_mm reads (transformers 5's grouped experts,
  // onnx_import/hf_moe_grouped.h: gate_up_proj and down_proj, the layout of vLLM's FusedMoE w13_weight and
  // w2_weight), each standing for E projections (2E for gate_up, chunked into gate and up) in expert_linears.
  std::vector<std::string> weights;
  std::string result;                // the accumulator the block returns (kept: the kernel's output)
  std::vector<std::string> tensors;  // what the fused kernel replaces (held outside the step)
};
// DeepseekV3MoE's router (sigmoid scores plus e_score_correction_bias, the group mask, TopK: hf_deepseek.cc) is found
// too: TopK(Where(mask, 0, Add(Sigmoid(MatMul(x, W_gate)), bias))); its ops before the top-k stay the graph's.
std::vector<MoeBlock> find_moe_blocks(const Graph& g);

// What an engine's kernels replace in one graph, found once (serve asks for the same profile step on every GPU of
// the catalog): find_lm_head, find_repeat_kv and find_moe_blocks on `present_outputs`, and the steps of the
// attention blocks that the engine's attention kernel runs (fuse_ops' OpKind::Attention ops under
// AttentionImpl::EngineKernel, in order).
struct EngineKernelSites {
  std::optional<LmHead> head;
  RepeatKv repeat;
  std::vector<MoeBlock> moe;
  std::vector<std::string> attention_steps;
};
EngineKernelSites find_engine_kernel_sites(const Graph& g, const std::vector<std::string>& present_outputs);

// Multi-head latent attention's decompression (transformers' DeepseekV3Attention as onnx_import/hf_deepseek.cc
// builds it): from each present output back along Concat, Split, Transpose, Reshape and Unsqueeze to the MatMul that
// makes it (kv_b_proj's output) or an Expand (the one-head rope key expanded to every head: its output held, its
// input, the rope key, kept), then forward from those tensors along Transpose, Reshape and Unsqueeze to the
// attention's MatMuls. vLLM's MLA profile run computes none of it (cost_models/vllm_mla.h). `layers`: the presents
// whose chain reached a MatMul (every present of a deepseek_v3 graph); tensors: every tensor of those chains.
struct MlaDecompression {
  int layers = 0;
  std::vector<std::string> tensors;
};
MlaDecompression find_mla_decompression(const Graph& g, const std::vector<std::string>& present_outputs);

}  // namespace memplan
