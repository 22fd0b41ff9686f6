// Small facts about a shaped graph that several cost models need: which tensors are scalar constants,
// which are shape computations (a few int64 values that never reach the GPU in PyTorch), and the bytes
// of a tensor stored in another element type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// The module paths a node ran in, outermost first ("" the root), from torch.onnx.export's name
// /<component>/<component>/<Op>: one component per called module, its name relative to the nearest enclosing module
// that is not a container, so a component extending the one above it by '.' is relative to what that one is
// relative to: /layers.0/mlp/down_proj/MatMul (a ModuleList is never called): layers.0, layers.0.mlp,
// layers.0.mlp.down_proj; torchvision's /features/features.1/conv/conv.0/conv.0.0/Conv (called Sequentials):
// features, features.1, features.1.conv, features.1.conv.0, features.1.conv.0.0. Empty for a name without the
// leading '/'.
std::vector<std::string> scope_paths(const std::string& node_name);

// An initializer or Constant output with at most one element (the 0.5 of a GELU, a LayerNorm epsilon).
bool is_scalar_constant(const Graph& g, int32_t tensor);

// A torch.onnx ATen fallback node of aten::`op` (onnx_import/rules/aten.cc): op type ATen, domain org.pytorch.aten,
// attribute operator = `op`.
bool is_aten(const Node& n, const std::string& op);

// A Constant-node output with at most one element: torch.onnx's spelling of a Python number in the
// model code (`x * 0.5`), which eager PyTorch never stores on the GPU. (Module buffers are initializers.)
bool is_python_scalar(const Graph& g, int32_t tensor);

// An initializer or Constant-node output (of any size).
bool is_constant(const Graph& g, int32_t tensor);

// Per tensor: true for shape computations, i.e. the outputs of Shape/Size and of integer ops whose inputs
// are all shape computations or small integer constants (Gather/Concat/Unsqueeze/Cast ... on shapes).
// Graph outputs are never marked. In PyTorch these values are Python ints; in ORT's CUDA EP, Shape
// writes to CPU memory (OrtMemTypeCPUOutput) and the shape subgraph is placed on the CPU EP.
std::vector<bool> shape_tensors(const Graph& g);

// The element type a tensor is stored in when float tensors are converted to `float_dtype`
// (model.half(): float32/float64/float16/bfloat16 all become float_dtype; Float32 means "as exported").
DType storage_dtype(DType original, DType float_dtype);

// elements(t) * bits(dtype) / 8, overflow-checked; 4-bit types packed two per byte.
uint64_t bytes_as(const Tensor& t, DType dtype);

// Head weights that may be a tied output embedding's folded copy. torch.onnx (1.13) constant-folds
// `F.linear(x, embedding.weight)` into MatMul with a new, pre-transposed initializer (`onnx::MatMul_N`,
// docs/zoo.md), so the file holds a tied weight twice while PyTorch holds (and trains) one parameter;
// but it folds an untied nn.Linear head the same way and records nothing of the tie, so such a copy is
// never proven, only suspected: callers drop it under --tied-embeddings shape only (docs/cost-models.md
// 3.10). A tie the file proves (the head reads the embedding's own initializer,
// through a Transpose node, as an export without constant folding writes it) has no second initializer
// and needs nothing here. Per tensor: the embedding initializer a suspected copy stands for, or -1. A
// copy is a rank-2 initializer read as MatMul's right operand, that MatMul's result is a graph output
// (directly or through one bias Add), and its shape is the transpose of an initializer that a Gather
// reads as its table (the embedding), in the same element type.
std::vector<int32_t> tied_embedding_copies(const Graph& g);

// The copies a file proves tied: tied_embedding_copies' suspects with the ties the file records
// (Graph::recorded_tied_copies: a config's tie_word_embeddings, hidden by constant folding) set, and, unless
// `by_shape` (--tied-embeddings shape), the unrecorded suspects cleared. Per tensor: its parameter, or -1.
std::vector<int32_t> held_tied_copies(const Graph& g, bool by_shape);

// The rank-2 weight initializer a MatMul/Gemm operand reads: the operand itself, or the weight an exporter's
// Transpose node reads (nn.Linear exported without constant folding, a tied head). -1 for anything else.
int32_t matmul_weight(const Graph& g, int32_t operand);

// What a stacked experts' operand is the .transpose(-2, -1) of (the input of a Transpose with perm [0, 2, 1]), or the
// operand itself.
int32_t untransposed_experts_operand(const Graph& g, int32_t operand);

// The stacked expert weight [E, in, out] an aten::_grouped_mm reads as its groups (transformers 5's grouped experts,
// onnx_import/hf_moe_grouped.h; the layout of vLLM's FusedMoE w13_weight and w2_weight, one tensor a layer): a
// rank-3 weight initializer, or the Transpose (perm [0, 2, 1]) of one [E, out, in]; -1 otherwise.
int32_t stacked_expert_weight(const Graph& g, int32_t operand);

// The stacked expert weight `n` reads as its groups when it is an aten::_grouped_mm (stacked_expert_weight of its
// operand 1); -1 for any other node. The tensor-parallel plan, find_moe_blocks and --ep's FSDP2 sharding ask it.
int32_t grouped_mm_experts(const Graph& g, const Node& n);

// The number of distinct nodes that read `tensor`.
int count_consumers(const Graph& g, int32_t tensor);

// The only consumer node of `tensor` when it has exactly one use and is not a graph output, else -1.
int32_t sole_consumer(const Graph& g, int32_t tensor);

bool is_graph_output(const Graph& g, int32_t tensor);

// Operand `index` of `op` only describes a shape or an index range (Reshape's shape, Slice's
// starts/ends/axes/steps, Expand's shape, axes of Unsqueeze/Squeeze/reductions, Split sizes, the sizes
// of ConstantOfShape/Tile/Pad/Range/Resize/TopK/OneHot). PyTorch passes these as Python ints.
bool is_shape_operand(const std::string& op, size_t index);

// A small integer constant read only as a shape operand or by shape computations (`shape` from
// shape_tensors): in PyTorch it is a Python value, never a GPU tensor.
bool constant_only_in_shape_math(const Graph& g, int32_t tensor, const std::vector<bool>& shape);

}  // namespace memplan
