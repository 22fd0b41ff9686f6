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

}  // namespace memplan
