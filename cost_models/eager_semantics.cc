#include "cost_models/eager_semantics.h"

#include <algorithm>

#include "cost_models/autograd_rules.h"
#include "cost_models/graph_facts.h"
#include "cost_models/quantized_weights.h"
#include "cost_models/runtime_constants.h"
#include "cost_models/runtime_rules.h"
#include "onnx_import/checked.h"

namespace memplan {

bool is_amp(Precision p) { return p == Precision::AmpFp16 || p == Precision::AmpBf16; }

bool is_half(Precision p) { return p == Precision::Fp16 || p == Precision::Bf16; }

DType low_precision_dtype(Precision p) {
  return p == Precision::Bf16 || p == Precision::AmpBf16 ? DType::BFloat16 : DType::Float16;
}

DType param_dtype(Precision p) {
  if (p == Precision::Fp16) return DType::Float16;
  if (p == Precision::Bf16) return DType::BFloat16;
  return DType::Float32;
}

// Under autocast the parameters keep the type they were made in: torch.autocast casts an op's inputs, never a module's
// parameters. accelerate's Accelerator.prepare_model (native_amp, huggingface/accelerate 16cb6eb, 1.15.0.dev0) wraps
// the forward in autocast and casts no parameter outside FSDP (its float32 upcast of the parameters that train is in
// the FSDP branches only: Accelerator.prepare_model's flat parameters, utils/fsdp_utils.py fsdp2_prepare_model), so a
// model transformers 5 loaded in bf16 trains in bf16 under the Trainer's bf16=True.
DType stored_param_dtype(const TrainingOptions& o) {
  return is_amp(o.precision) ? o.amp_param_dtype : param_dtype(o.precision);
}

// FSDP1's MixedPrecision and FSDP2's MixedPrecisionPolicy gather every floating parameter in param_dtype
// (training_fsdp_mp.cc, training_fsdp2.cc); accelerate's mixed_precision="bf16"/"fp16" sets param_dtype to the
// autocast type (utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision, v1.14.0).
DType compute_param_dtype(const TrainingOptions& o) {
  return o.fsdp2_mp && is_amp(o.precision) ? low_precision_dtype(o.precision) : stored_param_dtype(o);
}

int32_t node_input(const Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : -1; }
int32_t node_output(const Node& n, size_t i) { return i < n.outputs.size() ? n.outputs[i] : -1; }

std::vector<bool> off_device_shape_tensors(const Graph& g, Semantics semantics) {
  if (semantics == Semantics::AsWritten) return std::vector<bool>(g.tensors.size(), false);
  return shape_tensors(g);
}

std::vector<FusedOp> executed_ops(const Graph& g, Semantics semantics, AttentionImpl attention,
                                  const std::vector<bool>& shape) {
  std::vector<FusedOp> out;
  for (FusedOp& op : fuse_ops(g, fusion_for(semantics, attention))) {
    if (op.kind == OpKind::Node && g.nodes[op.nodes.back()].op_type == "Constant") continue;
    bool all_shape = !op.outputs.empty();
    for (int32_t t : op.outputs) all_shape = all_shape && shape[t];
    if (all_shape) continue;
    out.push_back(std::move(op));
  }
  return out;
}

bool constant_on_device(const Graph& g, int32_t t, Semantics semantics, const std::vector<bool>& shape) {
  if (!is_constant(g, t)) return false;
  if (semantics == Semantics::AsWritten) return true;
  if (constant_only_in_shape_math(g, t, shape)) return false;
  return !(semantics == Semantics::PyTorchEager && is_python_scalar(g, t));
}

std::vector<bool> ort_constant_folded(const Graph& g, const std::vector<bool>& shape) {
  // optimizer_utils.cc, IsOperationDeterministic: the ONNX ops constant folding never runs.
  static const char* const kNonDeterministic[] = {"RandomUniform", "RandomNormal", "RandomUniformLike",
                                                  "RandomNormalLike", "Multinomial", "Bernoulli"};
  std::vector<bool> computed(g.tensors.size(), false);  // outputs of folded nodes, shape computations included
  for (const Node& n : g.nodes) {  // topological order: a folded input is decided before its readers
    if (n.op_type == "Constant" || n.op_type == "DequantizeLinear" || n.inputs.empty()) continue;
    if (n.domain.empty() && std::find_if(std::begin(kNonDeterministic), std::end(kNonDeterministic),
                                         [&](const char* op) { return n.op_type == op; }) != std::end(kNonDeterministic))
      continue;
    bool all_constant = true;
    for (int32_t t : n.inputs) all_constant = all_constant && (t < 0 || is_constant(g, t) || computed[t]);
    if (!all_constant || n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan") continue;
    for (int32_t t : n.outputs)
      if (t >= 0) computed[t] = true;
  }
  std::vector<bool> folded(g.tensors.size(), false);
  for (size_t t = 0; t < g.tensors.size(); ++t) folded[t] = computed[t] && !shape[t];
  return folded;
}

bool dropout_is_noop(const Graph& g, const Node& n, bool training) {
  if (n.op_type != "Dropout") return false;
  if (!training) return true;
  const int32_t ratio = node_input(n, 1), mode = node_input(n, 2);
  if (ratio >= 0 && g.tensors[ratio].real_value && g.tensors[ratio].real_value->size() == 1 &&
      g.tensors[ratio].real_value->front() == 0.0)
    return true;
  const auto attr = n.attributes.find("ratio");
  if (ratio < 0 && attr != n.attributes.end() && attr->second.f == 0.0f) return true;
  return mode >= 0 && g.tensors[mode].int_value && g.tensors[mode].int_value->size() == 1 &&
         g.tensors[mode].int_value->front() == 0;
}

bool uses_cublas(const FusedOp& op) {
  if (op.kind == OpKind::Linear || op.kind == OpKind::Baddbmm) return true;
  return op.kind == OpKind::Node && (op.op == "MatMul" || op.op == "Gemm" || op.op == "Einsum");
}

uint64_t layer_norm_rows(const Graph& g, const FusedOp& op) {
  const Node& n = g.nodes[op.nodes.back()];
  const Tensor& x = g.tensors[op.kind == OpKind::LayerNorm ? op.x : n.inputs[0]];
  int64_t axis = -1;
  if (op.kind == OpKind::Node) {
    auto it = n.attributes.find("axis");
    if (it != n.attributes.end()) axis = it->second.i;
  } else {
    // The decomposition reduces over the trailing axes of its first ReduceMean.
    const Node& mean = g.nodes[op.nodes.front()];
    auto it = mean.attributes.find("axes");
    if (it != mean.attributes.end() && !it->second.ints.empty())
      axis = *std::min_element(it->second.ints.begin(), it->second.ints.end());
  }
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (axis < 0) axis += rank;
  uint64_t rows = 1;
  for (int64_t i = 0; i < axis && i < rank; ++i) rows = checked_mul(rows, static_cast<uint64_t>(x.shape[i]), "layer_norm rows");
  return rows;
}

// Ops are matched by type alone, so a custom-domain op of the same name, or one without the operands the
// ONNX op takes, reaches these rules too: a rule that reads a tensor's shape checks that the tensor exists
// (fuzz/regressions/analysis_mutate/).
std::vector<ForwardExtra> forward_extras(const Graph& g, const FusedOp& op, bool training) {
  const Node& n = g.nodes[op.nodes.back()];
  const int32_t x = node_input(n, 0), y = node_output(n, 0);
  if (op.kind == OpKind::Attention) {  // sdpa: flash attention's logsumexp, float [batch, heads, seq_q]
    const Tensor& out = g.tensors[op.outputs[0]];
    const uint64_t rows = out.shape.empty() ? 1 : out.elements() / std::max<int64_t>(1, out.shape.back());
    return {{":logsumexp", checked_mul(rows, kLogsumexpBytes), Category::Workspace}};
  }
  const bool onnx_layer_norm = op.kind == OpKind::Node && n.op_type == "LayerNormalization" && x >= 0;
  if (op.kind == OpKind::LayerNorm || (onnx_layer_norm && node_output(n, 1) < 0)) {
    const uint64_t bytes = checked_mul(layer_norm_rows(g, op), kLayerNormStatBytes, "layer_norm statistics");
    return {{":mean", bytes, Category::Workspace}, {":rstd", bytes, Category::Workspace}};
  }
  if (op.kind != OpKind::Node) return {};
  if (n.op_type == "MaxPool" && y >= 0 && node_output(n, 1) < 0)
    return {{":indices", checked_mul(g.tensors[y].elements(), kMaxPoolIndexBytes, "max-pool indices"), Category::Activation}};
  if (!training) return {};
  if (n.op_type == "BatchNormalization" && x >= 0) {
    // Training batch norm saves per-channel save_mean / save_invstd (float).
    const Tensor& in = g.tensors[x];
    const uint64_t channels = in.shape.size() > 1 ? static_cast<uint64_t>(in.shape[1]) : 1;
    const uint64_t bytes = checked_mul(channels, kBatchNormStatBytes);
    return {{":save_mean", bytes, Category::Activation}, {":save_invstd", bytes, Category::Activation}};
  }
  if (n.op_type == "Dropout" && y >= 0 && node_output(n, 1) < 0 && !dropout_is_noop(g, n, training))  // else the graph's mask
    return {{":mask", checked_mul(g.tensors[y].elements(), kDropoutMaskBytes), Category::Activation}};
  return {};
}

std::vector<ForwardExtra> ort_forward_extras(const Graph& g, const FusedOp& op, const std::vector<DType>& dtype) {
  if (op.kind != OpKind::Node) return {};
  const Node& n = g.nodes[op.nodes.back()];
  const int32_t a = node_input(n, 0);
  if (n.op_type != "MatMulNBits" || n.domain != "com.microsoft" || a < 0) return {};
  const uint64_t bytes = ort_matmul_nbits_scratch_bytes(g, n, static_cast<uint64_t>(dtype_bits(dtype[a]) / 8));
  if (bytes == 0) return {};
  return {{":dequantized_b", bytes, Category::Workspace}};
}

ForwardAliasing::ForwardAliasing(const Graph& g, Semantics semantics, bool training, const std::vector<DType>& dtype)
    : g_(g), semantics_(semantics), training_(training), dtype_(dtype), strides_(g.tensors.size()) {}

// torchvision's in-place ReLU and residual add (runtime_rules.h): the input is an intermediate read only here.
bool ForwardAliasing::in_place(const FusedOp& op, const BufferView& view) const {
  const int32_t node = op.nodes.back();
  const Node& n = g_.nodes[node];
  const int32_t in = node_input(n, 0), out = node_output(n, 0);
  const Tensor& x = g_.tensors[in];
  const int32_t b = view.buffer_of(in);
  const Buffer& buffer = view.program->buffers[b];
  if (x.producer < 0 || sole_consumer(g_, in) != node || buffer.resident || buffer.live_at_start) return false;
  // Add(acc, ScatterElements(zeros, ...)) is the exporter's scatter_add / index_add_, one op of its own in PyTorch.
  if (n.op_type == "ScatterElements")
    for (int32_t c : g_.tensors[out].consumers)
      if (g_.nodes[c].op_type == "Add") return false;
  return is_pytorch_in_place(n.op_type, g_.nodes[x.producer].op_type) && g_.tensors[out].shape == x.shape;
}

// Tensor.index_add_ adds into its accumulator (PyTorch only): when the accumulator is an activation of the step
// and nothing reads it after the op (the export's functional Add was an in-place update), the result is x's buffer.
bool ForwardAliasing::index_add_in_place(const FusedOp& op, const BufferView& view) const {
  if (semantics_ != Semantics::PyTorchEager || op.x < 0 || op.outputs.empty()) return false;
  const int32_t b = view.buffer_of(op.x);
  if (b < 0 || dtype_[op.x] != dtype_[op.outputs[0]]) return false;
  const Buffer& buffer = view.program->buffers[b];
  if (buffer.resident || buffer.live_at_start) return false;
  for (int32_t c : g_.tensors[op.x].consumers)
    if (c > op.nodes.back()) return false;
  return true;
}

int32_t ForwardAliasing::aliased_input(const FusedOp& op, const BufferView& view) const {
  if (op.kind == OpKind::IndexAdd) return index_add_in_place(op, view) ? view.buffer_of(op.x) : -1;
  if (op.kind != OpKind::Node) return -1;
  const int32_t node = op.nodes.back();
  const Node& n = g_.nodes[node];
  const int32_t in = node_input(n, 0), out = node_output(n, 0);
  if (in < 0 || out < 0) return -1;  // an omitted first operand or result (GRU's Y): nothing to alias
  const int32_t in_buffer = view.buffer_of(in);
  if (in_buffer < 0 || dtype_[in] != dtype_[out]) return -1;
  if (n.op_type == "Dropout" && !dropout_is_noop(g_, n, training_)) return -1;  // an active dropout writes a fresh output
  const bool pytorch = semantics_ == Semantics::PyTorchEager;
  if (is_alias_op(n.op_type)) {
    const bool reshape_like = n.op_type == "Reshape" || n.op_type == "Flatten";
    // A reshape of a strided view is taken as a copy, not as computeStride's view where one exists: the export
    // drops Tensor.contiguous(), and x.transpose(1, 2).contiguous().view(...) is the form modeling code writes.
    if (pytorch && reshape_like && !is_contiguous_layout(g_.tensors[in].shape, strides_[in])) return -1;
    return in_buffer;
  }
  if (pytorch && (is_pytorch_strided_view(n.op_type) || in_place(op, view))) return in_buffer;
  // weight[i] with a Python int i: Tensor.select, a view (aten/src/ATen/native/TensorShape.cpp select: as_strided
  // on the same storage), which torch.onnx writes as a Gather by a scalar Constant (symbolic_opset9.py select).
  // gpt_oss's experts read their stacked parameters so (GptOssExperts: self.gate_up_proj[expert_idx]); a copy
  // would hold every expert's weights twice, and again in every MatMul's saved operand.
  if (pytorch && n.op_type == "Gather" && n.inputs.size() == 2 && n.inputs[1] >= 0 && is_constant(g_, in) &&
      is_python_scalar(g_, n.inputs[1]) && g_.tensors[n.inputs[1]].shape.empty())
    return in_buffer;
  // Tensor.to(dtype) on a tensor that already has the dtype returns self (torch/_tensor_docs.py, Tensor.to:
  // "If the self Tensor already has the correct torch.dtype and torch.device, then self is returned"):
  // PEFT's _cast_input_dtype under autocast when the input is already float32. Floating types only: the
  // exports' integer and bool Casts (gpt's ids, masks) keep their copy, as before this rule.
  if (pytorch && n.op_type == "Cast" && dtype_is_float(dtype_[out])) return in_buffer;
  if (semantics_ == Semantics::OrtCuda && is_ort_may_inplace(n.op_type)) {
    const Buffer& buffer = view.program->buffers[in_buffer];
    if (!buffer.resident && !buffer.live_at_start && view.last_reader(in_buffer) == node &&
        bytes_as(g_.tensors[out], dtype_[out]) == bytes_as(g_.tensors[in], dtype_[in]))
      return in_buffer;
  }
  return -1;
}

bool ForwardAliasing::shares_alias(const FusedOp& op, int32_t t) const {
  if (op.kind != OpKind::Node) return true;
  const Node& n = g_.nodes[op.nodes.back()];
  return t == node_output(n, 0) || n.op_type == "Split";
}

bool ForwardAliasing::output_absent(const FusedOp& op, int32_t t) const {
  if (semantics_ != Semantics::PyTorchEager || op.kind != OpKind::Node) return false;
  const Node& n = g_.nodes[op.nodes.back()];
  return t == node_output(n, 1) && dropout_is_noop(g_, n, training_);
}

void ForwardAliasing::note_alias(const FusedOp& op, int32_t t) {
  if (semantics_ != Semantics::PyTorchEager) return;
  const Node& n = g_.nodes[op.nodes.back()];
  const int32_t in = op.kind == OpKind::IndexAdd ? op.x : n.inputs[0];
  // A layout-keeping view (reshape, squeeze, identity, a no-op cast, an in-place update) of a contiguous tensor is
  // contiguous: decided without strides, as most views are.
  if (strides_[in].empty() && (op.kind != OpKind::Node || !is_pytorch_strided_view(n.op_type))) return;
  Strides s = op.kind == OpKind::Node ? view_output_strides(g_, n, t, strides_of(in)) : strides_of(in);
  if (is_contiguous_layout(g_.tensors[t].shape, s)) s.clear();
  strides_[t] = std::move(s);
}

Strides ForwardAliasing::strides_of(int32_t t) const {
  return strides_[t].empty() ? contiguous_strides(g_.tensors[t].shape) : strides_[t];
}

std::vector<MatmulCopy> ForwardAliasing::matmul_copies(const FusedOp& op) const {
  if (semantics_ != Semantics::PyTorchEager || op.kind != OpKind::Node) return {};
  return matmul_operand_copies(g_, g_.nodes[op.nodes.back()], [this](int32_t t) { return strides_of(t); });
}

DType autocast_target(const Graph& g, const FusedOp& op, int32_t t, Precision precision, const std::vector<DType>& dtype) {
  if (!is_amp(precision) || is_scalar_constant(g, t)) return DType::Undefined;
  const DType have = dtype[t];
  const DType low = low_precision_dtype(precision);
  if (have != DType::Float32 && have != low) return DType::Undefined;
  switch (autocast_class(op)) {
    case AutocastClass::LowPrecision: return have == DType::Float32 ? low : DType::Undefined;
    case AutocastClass::Float32: return have == low ? DType::Float32 : DType::Undefined;
    case AutocastClass::Promote: return DType::Undefined;
  }
  return DType::Undefined;
}

void ForwardAliasing::emit_outputs(const FusedOp& op, const BufferView& view, const std::vector<bool>& shape,
                                   ProgramWriter& writer, const std::function<uint64_t(int32_t)>& bytes,
                                   const std::function<void(int32_t, int32_t)>& set_buffer, Step& st) {
  const int32_t alias = aliased_input(op, view);
  for (int32_t t : op.outputs) {
    if (shape[t] || output_absent(op, t)) continue;
    if (alias >= 0 && shares_alias(op, t)) {
      set_buffer(t, alias);
      note_alias(op, t);
      continue;
    }
    const int32_t b = writer.new_buffer(g_.tensors[t].name, bytes(t), Category::Activation);
    set_buffer(t, b);
    st.writes.push_back(b);
  }
}

}  // namespace memplan
