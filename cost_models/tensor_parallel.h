// Tensor parallelism (--tp N, --sequence-parallel), Megatron-LM style: which tensors each of the N GPUs of a
// tensor-parallel group holds only a slice of. A dataflow pass over the shaped graph, in node order, gives each
// tensor one sharded axis (or none):
//   - a MatMul/Gemm on a rank-2 weight initializer (directly or through the exporter's Transpose(W)) is
//     column-parallel when its activation input is not sharded on the contracted axis: the weight is split on
//     its output dimension and the output is sharded on the last axis (ColumnParallelLinear,
//     megatron/core/tensor_parallel/layers.py); its bias is split with it. It is row-parallel when the input is
//     sharded on the contracted axis: the weight is split on its input dimension, the output is all-reduced
//     (replicated; with sequence parallelism reduce-scattered along the sequence) and its bias is replicated
//     (RowParallelLinear adds it after the reduction);
//   - the token embedding, a Gather on a weight whose indices are a graph input, is vocab-parallel: the table
//     is split by rows and the output all-reduced (VocabParallelEmbedding); position tables stay replicated;
//   - elementwise ops, Softmax, reductions over other axes, Transpose, Reshape (the sharded axis mapped to the
//     output axis that starts at the same offset, which must be divisible by N: the head count), Split, Slice,
//     Concat, Expand, Unsqueeze/Squeeze and MatMuls of two sharded activations carry the shard (each GPU
//     computes attention for its own heads);
//   - with sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198, sec. 4.2.2) the outputs of
//     row-parallel layers and of the embedding are sharded along the sequence axis (the one before the last),
//     so norms, dropouts and residual adds keep 1/N of their tensors; a column-parallel layer whose input is
//     sequence-sharded all-gathers it for the GEMM (a full-size transient) and saves only the local shard,
//     gathering it again in backward for the weight grad (layers.py, LinearWithGradAccumulationAndAsync-
//     Communication with sequence_parallel); the input grad is computed full-size and reduce-scattered.
// As vLLM builds them (ReplicatedLinear), a mixture of experts' router and multi-head latent attention's
// down-projections (q_a_proj, kv_a_proj_with_mqa: a latent normalized over its features) stay whole on every GPU.
// The logits of a column-parallel head stay sharded by vocabulary: Megatron's vocab-parallel cross entropy
// (megatron/core/tensor_parallel/cross_entropy.py) never gathers them. Every rank holds the same slice sizes
// except for a vocabulary that N does not divide: rank 0 then holds ceil(V / N) rows, the busiest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

struct TensorParallelPlan {
  int tp = 1;
  bool sequence_parallel = false;
  // Per tensor: the axis split across the group (-1: every GPU holds all of it) and, when split, the
  // elements of that axis rank 0 holds (ceil(dim / tp)).
  std::vector<int> axis;
  std::vector<int64_t> local_dim;
  // Per node: the sequence-sharded input a column-parallel MatMul/Gemm all-gathers (-1: none).
  std::vector<int32_t> gathered_input;
  int column_parallel = 0, row_parallel = 0, vocab_parallel = 0;

  bool sharded(int32_t t) const { return t >= 0 && axis[t] >= 0; }
  // The bytes rank 0 holds of tensor `t`, given its full size in bytes.
  uint64_t local_bytes(const Graph& g, int32_t t, uint64_t full_bytes) const;
};

// tp == 1: nothing is sharded. Throws InputError (naming the node) when N does not divide the head count of
// a head reshape, the output dimension of a column-parallel layer, or (with sequence parallelism) the
// sequence length, and when the model has no layer to split.
// `replicate_kv_heads`: with more GPUs than key/value heads (N a multiple of them), each GPU holds one whole
// key/value head, replicated (vLLM's QKVParallelLinear num_kv_head_replicas, vllm/model_executor/layers/linear.py)
// instead of the refusal (Megatron-LM needs the query groups divisible by N).
TensorParallelPlan plan_tensor_parallel(const Graph& g, int tp, bool sequence_parallel, bool replicate_kv_heads = false);

// The note an estimate carries: what was split, that the figures are one GPU's, and what is not counted.
std::string tensor_parallel_note(const TensorParallelPlan& plan);

}  // namespace memplan
