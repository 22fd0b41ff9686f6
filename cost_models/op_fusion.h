// Recognises the exporter's decompositions of fused framework ops and regroups the graph's nodes into
// the ops a runtime actually executes: torch.onnx writes F.gelu as Div/Erf/Add/Mul/Mul (or the Tanh
// form), F.layer_norm before opset 17 as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, F.silu as
// Sigmoid/Mul, torch.rsqrt as Div(1, Sqrt), F.linear on 3-D inputs as MatMul/Add (and as Transpose(W)/MatMul/Add in training exports),
// torch.baddbmm as MatMul/Mul/Mul/Add, scaled-dot-product attention as MatMul, scale, mask, Softmax,
// Dropout, MatMul, and Tensor.index_add_ (a mixture of experts' combine) as ConstantOfShape/ScatterElements/Add. PyTorch allocates (and autograd saves) for the fused op, so
// the intermediates of the decomposition never exist there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

enum class OpKind : uint8_t { Node, Gelu, Silu, LayerNorm, Linear, Baddbmm, Attention, IndexAdd, Rsqrt };

struct FusedOp {
  OpKind kind = OpKind::Node;
  std::string name;               // the name of its last node (where it runs)
  std::string op;                 // the ONNX op type for Node, else op_kind_name(kind)
  std::vector<int32_t> nodes;     // graph nodes it covers, ascending; back() is where it runs
  std::vector<int32_t> inputs;    // tensors it reads from outside, in first-use order, without duplicates
  std::vector<int32_t> outputs;   // tensors it produces (for a fused op: the one read outside it)
  // Operands by role (tensor ids, -1 when absent).
  int32_t x = -1;                 // Gelu/Silu/LayerNorm/Linear/Rsqrt: the data input; Baddbmm: batch1
  int32_t weight = -1;            // LayerNorm gamma, Linear weight; Baddbmm: batch2
  int32_t bias = -1;              // LayerNorm beta, Linear bias; Baddbmm: self (the added term)
  int32_t q = -1, k = -1, v = -1, mask = -1;  // Attention (k as MatMul's right operand)
  int32_t source = -1, index = -1;  // IndexAdd: x.index_add_(dim, index, source), x the accumulator
  bool attention_dropout = false;
};

struct FusionOptions {
  bool gelu = false;
  bool silu = false;
  bool layer_norm = false;
  bool linear_bias = false;
  bool baddbmm = false;
  bool attention = false;
  bool index_add = false;
  bool rsqrt = false;
  // Attention whose scores pass a soft-cap, cap x tanh(scores / cap) (Gemma 2's attn_logit_softcapping), or meet
  // attention sinks (gpt_oss), for an engine whose kernels take the cap and the sinks (vLLM's attention backends:
  // logits_soft_cap; gpt_oss.py's Attention(sinks=self.sinks)); PyTorch's SDPA takes neither.
  bool attention_soft_cap = false;
};

// The graph's nodes regrouped into ops, in execution order (each op runs at its last node's position,
// which keeps the order topological). Nodes not in a recognised pattern are single Node ops.
std::vector<FusedOp> fuse_ops(const Graph& g, const FusionOptions& options);

const char* op_kind_name(OpKind k);

// The attention blocks fuse_ops fuses under FusionOptions::attention (without soft-caps), with their roles, found
// whether or not the runtime fuses them: a rule about eager attention's tensors (python_references.h) reads the
// block that the fused kernel's rule reads. nodes.back() is the block's MatMul with v.
std::vector<FusedOp> attention_blocks(const Graph& g);

// A linear layer's weight and data input: a fused Linear's roles, or the right and left operands of a MatMul or
// Gemm left as a Node (F.linear without a bias in an export that pre-transposed the weight into an initializer is
// a plain MatMul on it); -1 for any other op. The weight may be an activation: callers ask about its storage.
int32_t linear_weight_of(const Graph& g, const FusedOp& op);
int32_t linear_input_of(const Graph& g, const FusedOp& op);

}  // namespace memplan
