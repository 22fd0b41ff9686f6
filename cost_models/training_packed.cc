// Training over a GPTQ or AWQ 4-bit base (--frozen-dtype gptq-int4 / awq-int4, frozen_storage.h): what each packed
// layer allocates in forward and backward, and what autograd keeps of it, where bitsandbytes' NF4 layer (the
// generic path of training_forward.cc) differs.
//
// GPTQ. transformers loads a GPTQ checkpoint through optimum's GPTQQuantizer.convert_model, which asks gptqmodel
// (preferred over auto-gptq when both are installed: transformers quantizers/quantizer_gptq.py validate_environment)
// for a QuantLinear (hf_select_quant_linear). For training only kernels with SUPPORTS_TRAINING qualify (backend
// auto_trainable): Marlin and ExLlama v1/v2 declare False; on CUDA the first trainable one is TritonV2QuantLinear
// (gptqmodel v4.2.5, utils/importer.py AUTO_SELECT_BACKEND_ORDER), whose forward in training mode is its parent's,
// TorchQuantLinear.forward (nn_modules/qlinear/tritonv2.py: `if self.training: return super().forward(x)`).
// TorchQuantLinear._forward (nn_modules/qlinear/torch.py) runs
//     weights = self.dequantize_weight(num_itr=num_itr).to(x.dtype); out = torch.matmul(x, weights)
// in plain autograd: dequantize_weight (BaseQuantLinear, nn_modules/qlinear/__init__.py; torch.compile'd by
// TorchQuantLinear.optimize from post_init, so its unpacking runs fused into one kernel writing the result) returns
// [in, out] in the scales' type, float16, and .to(x.dtype) copies it into a bfloat16 model's type. matmul on the
// flattened 2-D input is aten::mm, whose backward node keeps mat2, the dequantized weight, when the input needs a
// grad (grad_input = grad @ weights.T; the input itself is kept only for mat2's grad, which a buffer has not).
// So, unlike NF4: the compute-type weight made in forward is kept until the layer's backward, and the backward
// dequantizes nothing. (auto-gptq's cuda-old QuantLinear with trainable=True, or at 128 rows or more, runs the
// same eager dequantize-and-matmul: auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py QuantLinear.forward.)
//
// AWQ. transformers' AWQ integration replaces the linears with AutoAWQ's WQLinear_GEMM (v0.2.9, awq/modules/linear/
// gemm.py), whose forward in training runs WQLinearMMFunction (an autograd.Function) on x.half():
//  - forward: ctx.save_for_backward(x, qweight, qzeros, scales, bias): the float16 input is kept; then with awq_ext,
//    when x.shape[0] * x.shape[1] >= 1024 (FP16_MATMUL_HEURISTIC_CONDITION) awq_ext.dequantize_weights_cuda writes
//    the whole [in, out] float16 weight for torch.matmul, a transient of the op; below it awq_ext.gemm_forward_cuda
//    (AutoAWQ_kernels awq_ext/quantization/gemm_cuda_gen.cu) writes split_k_iters = 8 partial products
//    torch::empty({split_k_iters, M, out}) in float16 and returns their .sum(0);
//  - backward: weights = dequantize_weights_cuda(...) [in, out] float16, then grad_output.bmm(weights.transpose(0,
//    1).unsqueeze(0).repeat(batch_size, 1, 1)) with batch_size = grad_output.shape[0]: a float16 copy of the weight
//    for every sequence of the batch, alive with the weight while the bmm writes the input grad.
// WQLinear_GEMM computes in float16 whatever the model's type (x.half(), out.to(input_dtype)): the precision is
// float16 (report/option_checks.cc), and under --kbit-prep those two casts are k-bit preparation's (kbit_prep.h).
#include <algorithm>

#include "cost_models/eager_semantics.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"

namespace memplan {
namespace {

constexpr int64_t kAwqDequantizeTokens = 1024;  // WQLinearMMFunction.forward, FP16_MATMUL_HEURISTIC_CONDITION
constexpr uint64_t kAwqSplitK = 8;              // WQLinearMMFunction.forward: gemm_forward_cuda(..., 8)
constexpr uint64_t kFloat16Bytes = 2;

}  // namespace

bool TrainingStep::packed_storage(int32_t t) const {
  return layout().storage[t] == FrozenStorage::GptqInt4 || layout().storage[t] == FrozenStorage::AwqInt4;
}

void TrainingStep::packed_forward(int32_t i, int32_t t, Step& st, std::map<int32_t, int32_t>& effective) {
  const FusedOp& op = context_.ops[i];
  const std::string& name = graph_.tensors[t].name;
  if (layout().storage[t] == FrozenStorage::GptqInt4) {
    const int32_t fp16 = writer_.new_buffer(name + ":dequantized", bytes_in(t, DType::Float16), Category::Weight);
    st.writes.push_back(fp16);
    effective[t] = fp16;
    const DType d = layout().dtype[t];
    if (d != DType::Float16) {  // .to(x.dtype): the copy mm keeps; the float16 result is freed with the step
      effective[t] = writer_.new_buffer(name + ":dequantized:" + std::string(dtype_name(d)), bytes_in(t, d), Category::Weight);
      st.writes.push_back(effective[t]);
    }
    return;
  }
  const int32_t x = linear_input_of(graph_, op);
  const int32_t y = op.outputs.empty() ? -1 : op.outputs[0];
  if (x < 0 || y < 0 || graph_.tensors[x].shape.empty() || graph_.tensors[y].shape.empty()) return;
  const std::vector<int64_t>& xs = graph_.tensors[x].shape;
  const int64_t heuristic = xs.size() >= 2 ? xs[0] * xs[1] : xs[0];  // x.shape[0] * x.shape[1], as the code reads it
  if (heuristic >= kAwqDequantizeTokens) {
    st.writes.push_back(writer_.new_buffer(name + ":dequantized", bytes_in(t, DType::Float16), Category::Weight));
    return;
  }
  const uint64_t in = static_cast<uint64_t>(std::max<int64_t>(1, xs.back()));
  const uint64_t out = static_cast<uint64_t>(std::max<int64_t>(1, graph_.tensors[y].shape.back()));
  const uint64_t rows = graph_.tensors[x].elements() / in;
  const uint64_t split = checked_mul(checked_mul(kAwqSplitK, rows, "awq split-k"), checked_mul(out, kFloat16Bytes, "awq split-k"),
                                     "awq split-k bytes");
  st.writes.push_back(writer_.new_buffer(op.name + ":awq_split_k", split, Category::Workspace));
}

void TrainingStep::packed_backward(int32_t i, int32_t t, Step& st) {
  if (layout().storage[t] == FrozenStorage::GptqInt4) return;  // mm's saved weight (read through saved_by_op_)
  const FusedOp& op = context_.ops[i];
  const std::string& name = graph_.tensors[t].name;
  st.writes.push_back(writer_.new_buffer(name + ":dequantized", bytes_in(t, DType::Float16), Category::Weight));
  const int32_t y = op.outputs.empty() ? -1 : op.outputs[0];
  const std::vector<int64_t>& ys = y < 0 ? graph_.tensors[t].shape : graph_.tensors[y].shape;
  // The function's output is 3-D (a 2-D one is unsqueezed to [1, M, out]): grad_output.shape[0] is the batch.
  const uint64_t batch = y >= 0 && ys.size() >= 3 ? static_cast<uint64_t>(std::max<int64_t>(1, ys[0])) : 1;
  st.writes.push_back(writer_.new_buffer(name + ":dequantized:repeat", checked_mul(batch, bytes_in(t, DType::Float16), "awq repeat"),
                                         Category::Weight));
}

}  // namespace memplan
