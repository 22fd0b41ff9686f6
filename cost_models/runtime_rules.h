// Per-runtime facts about single ops: which ones are views (their output shares the input's storage),
// which ones a runtime runs in place, and which decompositions it fuses back.
#pragma once

#include <string>

#include "cost_models/cost_model.h"
#include "cost_models/op_fusion.h"

namespace memplan {

// Ops whose first output aliases their first input in every runtime modelled:
//  - PyTorch: reshape/flatten/squeeze/unsqueeze are views of a contiguous tensor; dropout in eval and
//    Identity return the input itself;
//  - ORT CUDA EP: these kernels are registered with KernelDefBuilder::Alias(0, 0)
//    (onnxruntime/core/providers/cuda/tensor/{reshape,squeeze,unsqueeze,flatten,identity_op}.cc).
bool is_alias_op(const std::string& op);

// PyTorch-only views: transpose/permute, expand, slice and split return strided views (no copy), whose
// result is not contiguous; a later reshape of a non-contiguous tensor copies (aten reshape ->
// _reshape_copy when view() is impossible). ORT's Transpose/Expand/Slice/Split kernels copy.
bool is_pytorch_strided_view(const std::string& op);

// ORT kernels registered with MayInplace(0, 0): the allocation planner gives the output the input's
// buffer when this node is the input's last use and sizes match (onnxruntime/core/framework/
// allocation_planner.cc). Unary activations (onnxruntime/core/providers/cuda/activation/activations.cc).
bool is_ort_may_inplace(const std::string& op);

// PyTorch ops that torchvision writes in place, given the op that produced their input (which must have
// no other reader): ReLU(inplace=True) / ReLU6(inplace=True) (exported as Relu / Clip) after conv, batch
// norm or the residual add, and `out += identity` on the batch-norm output (torchvision/models/resnet.py,
// mobilenetv2.py). In place, the output shares the input's storage; autograd saves `result` for them.
// And Tensor.scatter_ / index_put_ into a fresh tensor (torch.zeros / new_empty, exported ConstantOfShape): the
// exporter writes both as ScatterElements, which writes the new tensor's storage (torchtitan's _unpermute,
// onnx_import/hf_moe_ep.cc; DeepseekV3TopkRouter's group mask, zeros_like(...).scatter_); not when an Add reads
// the result, the exporter's scatter_add / index_add_ (ForwardAliasing::in_place).
bool is_pytorch_in_place(const std::string& op, const std::string& input_producer_op);

// Which decompositions each way of running ops (Semantics, cost_models/runtime.h) runs as one op:
//  - as written: none;
//  - pytorch eager: gelu, silu, layer_norm, linear and baddbmm always (the module ran as the fused op before export);
//    attention only with AttentionImpl::Sdpa or EngineKernel (which also fuses a soft-capped score);
//  - ORT CUDA: gelu and layer_norm (GeluFusion, LayerNormFusion in onnxruntime/core/optimizer/, on
//    at the default ORT_ENABLE_ALL level for the CUDA EP).
FusionOptions fusion_for(Semantics semantics, AttentionImpl attention);

// Program steps (by their op) that call cuDNN convolutions in PyTorch: a Conv / ConvTranspose forward and
// its backward step (the input grad and the weight grad are one cuDNN call each, one after the other).
// Each call allocates its workspace through the caching allocator and frees it on return
// (aten/src/ATen/native/cudnn/Conv_v8.cpp, run_conv_plan; Conv_v7.cpp, allocate_workspace).
bool calls_cudnn_convolution(const std::string& step_op);

}  // namespace memplan
