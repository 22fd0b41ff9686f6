#include "cost_models/runtime_rules.h"

#include <set>

namespace memplan {

bool is_alias_op(const std::string& op) {
  static const std::set<std::string> ops{"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"};
  return ops.count(op) > 0;
}

bool is_pytorch_strided_view(const std::string& op) {
  static const std::set<std::string> ops{"Transpose", "Expand", "Slice", "Split"};
  return ops.count(op) > 0;
}

bool is_ort_may_inplace(const std::string& op) {
  static const std::set<std::string> ops{"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "Softplus",
                                         "Softsign", "HardSigmoid", "ThresholdedRelu"};
  return ops.count(op) > 0;
}

bool is_pytorch_in_place(const std::string& op, const std::string& prod) {
  if (op == "Relu" || op == "Clip") return prod == "Conv" || prod == "BatchNormalization" || prod == "Add";
  if (op == "Add") return prod == "BatchNormalization";
  if (op == "ScatterElements") return prod == "ConstantOfShape";
  return false;
}

bool calls_cudnn_convolution(const std::string& step_op) {
  static const std::set<std::string> ops{"Conv", "ConvTranspose", "Conv_backward", "ConvTranspose_backward"};
  return ops.count(step_op) > 0;
}

FusionOptions fusion_for(Semantics semantics, AttentionImpl attention) {
  FusionOptions f;
  switch (semantics) {
    case Semantics::AsWritten:
      break;
    case Semantics::PyTorchEager:
      f.gelu = f.silu = f.layer_norm = f.linear_bias = f.baddbmm = f.index_add = f.rsqrt = true;
      f.attention = attention != AttentionImpl::Eager;
      f.attention_soft_cap = attention == AttentionImpl::EngineKernel;
      break;
    case Semantics::OrtCuda:
      f.gelu = f.layer_norm = true;
      break;
  }
  return f;
}

}  // namespace memplan
