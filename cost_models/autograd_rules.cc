#include "cost_models/autograd_rules.h"

#include <set>

#include "cost_models/eager_semantics.h"
#include "cost_models/graph_facts.h"
#include "cost_models/runtime_constants.h"
#include "onnx_import/checked.h"

namespace memplan {
namespace {

int32_t input_at(const FusedOp& op, const Graph& g, size_t i) {
  const auto& ins = g.nodes[op.nodes.back()].inputs;
  return i < ins.size() ? ins[i] : -1;
}

int32_t output0(const FusedOp& op) { return op.outputs.empty() ? -1 : op.outputs[0]; }

bool rg(const std::vector<bool>& requires_grad, int32_t t) { return t >= 0 && requires_grad[t]; }

uint64_t round_multiple(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

void save_if(AutogradRule& r, int32_t t, bool condition) {
  if (t >= 0 && condition) r.saved_tensors.push_back(t);
}

const std::set<std::string>& saves_input_ops() {
  // derivatives.yaml: these backward formulas use `self`.
  static const std::set<std::string> ops{"Erf", "LeakyRelu", "Elu", "Selu", "Softplus", "HardSigmoid",
                                         "HardSwish", "Log", "Sin", "Cos", "Abs", "Pow", "Celu", "Mish",
                                         "AveragePool", "PRelu", "Clip"};
  return ops;
}

const std::set<std::string>& saves_output_ops() {
  // derivatives.yaml: these backward formulas use `result`.
  static const std::set<std::string> ops{"Relu", "Sigmoid", "Tanh", "Exp", "Sqrt", "Reciprocal", "Softmax", "LogSoftmax"};
  return ops;
}

}  // namespace

AutogradRule autograd_rule(const Graph& g, const FusedOp& op, const std::vector<bool>& requires_grad,
                           const std::vector<DType>& dtype, bool mean_saves_input) {
  AutogradRule r;
  const Node& n = g.nodes[op.nodes.back()];
  const std::string& type = n.op_type;
  const int32_t out = output0(op);
  switch (op.kind) {
    case OpKind::Gelu:
    case OpKind::Silu:
      save_if(r, op.x, true);
      return r;
    case OpKind::Linear:
    case OpKind::Baddbmm:  // batch1 and batch2 (derivatives.yaml: baddbmm)
      save_if(r, op.x, rg(requires_grad, op.weight));
      save_if(r, op.weight, rg(requires_grad, op.x));
      // F.linear's weight.t() (a Transpose node in the export): the weight's grad reaches the parameter
      // through TBackward, a view (what a tied embedding's second grad is then summed with, out of place).
      for (int32_t node : op.nodes)
        if (g.nodes[node].op_type == "Transpose") r.passthrough_inputs.push_back(op.weight);
      return r;
    case OpKind::IndexAdd:
      // derivatives.yaml index_add: self: grad (passed through); source: grad.index_select(dim, index)
      // .expand_as(source), a formula that names `source`, so autograd saves the whole source tensor with the
      // index (torch 1.13's IndexAddBackward0 holds _saved_source and _saved_index; current main is unchanged).
      save_if(r, op.source, true);
      save_if(r, op.index, true);
      r.passthrough_inputs.push_back(op.x);
      return r;
    case OpKind::Rsqrt:  // derivatives.yaml rsqrt: `self: -0.5 * grad * result.pow(3).conj()`, the result only
      save_if(r, out, true);
      return r;
    case OpKind::LayerNorm: {
      save_if(r, op.x, true);
      save_if(r, op.weight, true);
      save_if(r, op.bias, true);
      return r;  // and mean, rstd (forward_extras)
    }
    case OpKind::Attention: {
      // SDPA (flash): saves q, k, v, out and logsumexp (forward_extras); out is [batch, heads, seq_q, head_dim].
      for (int32_t t : {op.q, op.k, op.v, out}) save_if(r, t, true);
      const Tensor& o = g.tensors[out];
      const uint64_t d = o.shape.empty() ? 1 : static_cast<uint64_t>(std::max<int64_t>(1, o.shape.back()));
      const uint64_t s = o.shape.size() < 2 ? 1 : static_cast<uint64_t>(std::max<int64_t>(1, o.shape[o.shape.size() - 2]));
      const uint64_t bh = o.elements() / d / s;
      // flash-attn 2 mha_bwd (csrc/flash_attn/flash_api.cpp): dq_accum float [b, round128(s), h, round32(d)]
      // and softmax_d float [b, h, round128(s)] (check: measured on a GPU before relying on it).
      const uint64_t s_rounded = round_multiple(s, 128);
      const uint64_t d_rounded = d <= 192 ? round_multiple(d, 32) : 256;
      r.backward_temporaries = {{":dq_accum", checked_mul(checked_mul(checked_mul(bh, s_rounded), d_rounded), 4)},
                                {":softmax_d", checked_mul(checked_mul(bh, s_rounded), 4)}};
      return r;
    }
    case OpKind::Node:
      break;
  }
  // Ops are matched by type alone, so a custom-domain op of the same name, or one without the inputs the
  // ONNX op takes, reaches these rules too: a rule that reads a tensor's shape needs that tensor to exist
  // (fuzz/regressions/analysis_mutate/training-custom-batchnorm-without-inputs.onnx).
  const int32_t a = input_at(op, g, 0), b = input_at(op, g, 1);
  if (type == "Conv" || type == "ConvTranspose") {
    save_if(r, a, rg(requires_grad, b));
    save_if(r, b, rg(requires_grad, a));
  } else if (type == "MatMul" || type == "Gemm") {
    save_if(r, a, rg(requires_grad, b));
    save_if(r, b, rg(requires_grad, a));
  } else if (is_aten(n, "_grouped_mm")) {
    // derivatives.yaml _grouped_mm (pytorch/pytorch at d327a78): self's grad _grouped_mm_mat1_backward(grad, mat2,
    // ..., offs), mat2's _grouped_mm_mat2_backward(grad, self, ..., offs): self kept when mat2 needs a grad, mat2
    // when self does (as mm), offs for either (an int32 [G]). Each grad a fresh tensor of its input's size: [S, K]
    // and [G, K, N] (the transposed parameter's grad, reaching the parameter through TransposeBackward, a view).
    const int32_t offs = input_at(op, g, 2);
    save_if(r, a, rg(requires_grad, b));
    save_if(r, b, rg(requires_grad, a));
    save_if(r, offs, rg(requires_grad, a) || rg(requires_grad, b));
  } else if (saves_output_ops().count(type)) {
    save_if(r, out, true);
  } else if (saves_input_ops().count(type)) {
    save_if(r, a, true);
  } else if (type == "LayerNormalization" && a >= 0) {
    save_if(r, a, true);
    save_if(r, b, true);
    save_if(r, input_at(op, g, 2), true);
    // mean and rstd: the graph's own outputs when it has them, else forward_extras.
    if (node_output(n, 1) >= 0)
      for (size_t i = 1; i < n.outputs.size(); ++i) save_if(r, n.outputs[i], true);
  } else if (type == "BatchNormalization" && a >= 0) {
    // Training batch norm saves input, weight and save_mean / save_invstd (forward_extras).
    save_if(r, a, true);
    save_if(r, b, true);
  } else if (type == "Dropout" && !dropout_is_noop(g, n, /*training=*/true)) {
    save_if(r, node_output(n, 1), true);  // the mask: the graph's own output, else forward_extras
  } else if (type == "MaxPool" && out >= 0) {
    save_if(r, a, true);
    save_if(r, node_output(n, 1), true);  // the indices: the graph's own output, else forward_extras
  } else if (type == "Mul") {
    save_if(r, a, rg(requires_grad, b) && !is_scalar_constant(g, a));
    save_if(r, b, rg(requires_grad, a) && !is_scalar_constant(g, b));
  } else if (type == "Div") {
    save_if(r, b, rg(requires_grad, a) && !is_scalar_constant(g, b));
    save_if(r, a, rg(requires_grad, b));
  } else if (type == "Where") {
    save_if(r, a, true);  // the condition
  } else if (type == "Gather") {
    save_if(r, b, rg(requires_grad, a));  // embedding / index_select keep the indices
  } else if (type == "GatherElements") {
    // torch.gather (derivatives.yaml gather: `self: gather_backward(grad, self, dim, index, sparse_grad)`): torch
    // 1.13's GatherBackward0 holds _saved_self and _saved_index. DeepSeek's router: scores.gather(1, topk_indices).
    save_if(r, a, rg(requires_grad, a));
    save_if(r, b, rg(requires_grad, a));
  } else if (type == "TopK") {
    // derivatives.yaml topk: `self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(),
    // true)`: TopkBackward0 holds _saved_indices (torch 1.13), the int64 indices the op returns. A mixture of
    // experts' routing weights, torch.topk(softmax(router_logits), k) (Mixtral, Qwen-MoE).
    save_if(r, node_output(n, 1), rg(requires_grad, a));
  } else if (type == "ReduceMean") {
    save_if(r, a, mean_saves_input);  // torch 1.13's MeanBackward1 keeps `self` (cost_model.h)
  }
  // Grads that are views of the output's grad.
  if (type == "Reshape" || type == "Flatten" || type == "Squeeze" || type == "Unsqueeze" || type == "Identity" ||
      type == "Transpose" || dropout_is_noop(g, n, /*training=*/true) ||
      (type == "Cast" && a >= 0 && out >= 0 && dtype[a] == dtype[out])) {
    if (a >= 0) r.passthrough_inputs.push_back(a);
  } else if ((type == "Add" || type == "Sub") && out >= 0) {
    const auto& shape = g.tensors[out].shape;
    if (a >= 0 && g.tensors[a].shape == shape) r.passthrough_inputs.push_back(a);  // sub: b's grad is negated
    if (type == "Add" && b >= 0 && g.tensors[b].shape == shape) r.passthrough_inputs.push_back(b);
  } else if (type == "Concat") {
    for (int32_t t : n.inputs)
      if (t >= 0) r.passthrough_inputs.push_back(t);
  }
  return r;
}

AutocastClass autocast_class(const FusedOp& op) {
  switch (op.kind) {
    case OpKind::Linear:
    case OpKind::Baddbmm:
    case OpKind::Attention:
      return AutocastClass::LowPrecision;
    case OpKind::LayerNorm:
    case OpKind::Rsqrt:  // rsqrt is on AT_FORALL_FP32 (aten/src/ATen/autocast_mode.h at d70fe7f)
      return AutocastClass::Float32;
    default:
      break;
  }
  // aten::_grouped_mm (an ATen node) is on no autocast list (aten/src/ATen/autocast_mode.h at d70fe7f,
  // AT_FORALL_LOWER_PRECISION_FP / FP32 / PROMOTE): it falls through uncast, Promote here.
  static const std::set<std::string> low{"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum"};
  static const std::set<std::string> fp32{"Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization",
                                          "Exp", "Log", "Pow", "ReduceSum", "ReduceL2", "ReduceLogSumExp",
                                          "CumSum", "Reciprocal", "Softplus", "ReduceProd"};
  if (low.count(op.op)) return AutocastClass::LowPrecision;
  if (fp32.count(op.op)) return AutocastClass::Float32;
  return AutocastClass::Promote;
}

}  // namespace memplan
