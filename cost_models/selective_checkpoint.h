// torchtitan's selective activation checkpointing (--checkpoint selective, selective:op, selective:N), as read at
// pytorch/torchtitan v0.2.2 (73a0e6979dd10b6b1904098eb3c8f62c18ab87ce), torchtitan/distributed/activation_checkpoint.py:
//  - apply_ac wraps each child of model.layers (each transformer block) through _apply_ac_to_transformer_block;
//  - selective_ac_option "op" (_apply_op_sac): ptd_checkpoint_wrapper (non-reentrant torch.utils.checkpoint) whose
//    context_fn is create_selective_checkpoint_contexts(_custom_policy): the outputs of the ops in the model's
//    op_sac_save_list are MUST_SAVE, every other op is PREFER_RECOMPUTE, except that aten.mm is saved only when its
//    counter is odd: meta = defaultdict(int) is made per context_fn call (per block, per forward call), and
//    meta["forward_mm_count"] / meta["recompute_mm_count"] count the block's mms in the forward and in the
//    recomputation apart, so the 1st, 3rd, 5th ... mm of each block are saved and the 2nd, 4th ... recomputed
//    (the same ones in both passes: the recomputation replays the block's ops in order);
//  - selective_ac_option N (_apply_layer_sac): a module-global counter _layer_sac_count, incremented before the test,
//    checkpoints a block fully when _layer_sac_count % N == 0: the N-th, 2N-th ... block (0-based b with
//    (b + 1) % N == 0); the others are not wrapped. torchtitan takes "0" too (`not ac_freq`: every block, which is
//    --checkpoint layers); memplan refuses it and names layers.
// The save list of llama3 (torchtitan/models/llama3/infra/parallelize.py, _op_sac_save_list at v0.2.2): aten.mm, the
// SDPA ops (_scaled_dot_product_{efficient,flash,cudnn}_attention, _scaled_dot_product_attention_math,
// _scaled_dot_product_fused_attention_overrideable), _c10d_functional.reduce_scatter_tensor, aten.max.default,
// flex_attention, torch_attn._varlen_attn, inductor_compiled_code. The policy also saves a CUDA->CPU _to_copy, which
// a graph on one device has none of.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_models/op_fusion.h"
#include "onnx_import/graph.h"

namespace memplan {

// What the aten op an executed op runs is to torchtitan's policy.
//  Mm: aten.mm (counted, saved when its count in the block is odd). PyTorch's matmul folds an input of rank >= 2 by
//      a 2-D right operand into one mm (aten/src/ATen/native/LinearAlgebra.cpp, _matmul_impl/should_fold), and a
//      bias-free F.linear is matmul(x, W.t()) (Linear.cpp, linear): the exporter's MatMul by a 2-D operand, a fused
//      bias-free Linear, a Gemm without C.
//  Saved: an op of the save list: fused attention under --attention sdpa (scaled_dot_product_attention dispatches
//      to the flash / efficient / cudnn op, whose outputs, out and logsumexp, are all cached), and torch.max(x)
//      without a dim (aten.max.default: a ReduceMax to a scalar).
//  Recomputed: everything else, among them a Linear with a bias (addmm, Linear.cpp: linear / _flatten_nd_linear,
//      not in the list), batched matmuls of eager attention (bmm), softmax, norms, activations.
// Not modelled: reduce_scatter_tensor (memplan's sequence-parallel collectives are not graph ops) and the other
// list members, which an exported ONNX graph does not contain.
enum class SacOp { Recomputed, Mm, Saved };
SacOp sac_op_class(const Graph& g, const FusedOp& op);

// Per op: whether torchtitan's per-op policy saves its outputs, for the ops of a checkpointed segment
// (segment_of_op >= 0; each segment one block); false elsewhere. The mm counter restarts with each segment.
std::vector<bool> sac_saved_ops(const Graph& g, const std::vector<FusedOp>& ops, const std::vector<int32_t>& segment_of_op);

// selective:N: whether torchtitan checkpoints block `block` (0-based, forward order), N >= 1.
bool layer_sac_checkpoints(size_t block, int every);

}  // namespace memplan
