// PyTorch's strides for the views an exported graph's ops stand for, and where PyTorch's matmul must copy an
// operand because no view has the shape its GEMM needs. Only PyTorch eager reads these (ForwardAliasing,
// eager_semantics.h); ONNX Runtime's kernels write every output contiguous.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

using Strides = std::vector<int64_t>;

// Row-major strides of `shape` (a fresh tensor's).
Strides contiguous_strides(const std::vector<int64_t>& shape);

// Tensor.is_contiguous(): every dimension of size above 1 has the row-major stride (c10/core/TensorImpl.cpp,
// compute_contiguous).
bool is_contiguous_layout(const std::vector<int64_t>& shape, const Strides& strides);

// The strides of `to` as a view of a tensor of `shape` and `strides`, or none where no view exists and
// reshape copies (aten/src/ATen/TensorUtils.cpp computeStride: `to`'s dimensions must split or merge only runs of
// dimensions that are contiguous with one another; view() fails and reshape() falls back to a copy otherwise).
std::optional<Strides> view_strides(const std::vector<int64_t>& shape, const Strides& strides,
                                    const std::vector<int64_t>& to);

// The strides of output `out` of `n`, a node whose output PyTorch makes as a view of its first input (strides
// `in`): Transpose permutes them (Tensor.permute), Slice keeps them (times its steps), Split keeps them, Expand
// gives the broadcast dimensions stride 0, Gather by a Python int drops the axis (Tensor.select); any other view
// (reshape, squeeze, unsqueeze, identity, a no-op cast, an in-place update) keeps the input's layout.
Strides view_output_strides(const Graph& g, const Node& n, int32_t out, const Strides& in);

// An operand of a MatMul that PyTorch's matmul copies before its GEMM, and the elements of that copy.
struct MatmulCopy {
  int32_t tensor = -1;
  uint64_t elements = 0;
};

// The operands of MatMul node `n` that torch.matmul copies. aten/src/ATen/native/LinearAlgebra.cpp _matmul_impl: a
// left operand of rank >= 3 by a 2-D right one is folded to [rows, k] by reshape (one mm); operands of rank >= 2
// with a batch (either of rank >= 3) are each expanded to the broadcast batch and reshaped to [batch, rows, cols]
// for bmm. A reshape without a view (view_strides) is a contiguous copy, which the GEMM then reads and autograd
// saves in the operand's place (BmmBackward0 / MmBackward0 keep the reshaped tensors). Measured on torch 1.13's CPU:
// q @ k.transpose(2, 3) copies nothing; probs @ v, where v is a transposed [b, s, heads, d] view (or a slice of
// one: DeepSeek's values split from kv_b_proj's output), allocates one [b x heads, s, d] copy inside matmul.
// A left operand of rank <= 2 by a batched right one is not modelled (no copy).
std::vector<MatmulCopy> matmul_operand_copies(const Graph& g, const Node& n,
                                              const std::function<Strides(int32_t)>& strides_of);

}  // namespace memplan
