// Inference: one step per executed op, in graph order. Weights resident, inputs live from the start,
// outputs to the end, views share their input's buffer. Runtime-specific extras (PyTorch's max-pool
// indices, layer_norm statistics, cuBLAS workspace) are added as the runtime allocates them.
#include <algorithm>
#include <climits>
#include <initializer_list>
#include <map>
#include <set>
#include <string>

#include "cost_models/cost_model.h"
#include "cost_models/flops.h"
#include "cost_models/graph_facts.h"
#include "cost_models/op_fusion.h"
#include "cost_models/runtime_constants.h"
#include "cost_models/runtime_rules.h"
#include "onnx_import/checked.h"

namespace memplan {
namespace {

class InferenceBuilder {
 public:
  InferenceBuilder(const Graph& g, const InferenceOptions& opt)
      : g_(g), opt_(opt), buffer_of_(g.tensors.size(), -1), contiguous_(g.tensors.size(), true),
        last_use_(g.tensors.size(), -1) {
    if (opt.runtime != Runtime::Ideal) shape_ = shape_tensors(g);
    else shape_.assign(g.tensors.size(), false);
    for (size_t t = 0; t < g.tensors.size(); ++t)
      for (int32_t c : g.tensors[t].consumers) last_use_[t] = std::max(last_use_[t], c);
    for (int32_t t : g.outputs) last_use_[t] = INT32_MAX;
  }

  CostModelResult build() {
    add_constants();
    add_inputs();
    const std::vector<FusedOp> ops = fuse_ops(g_, fusion_for(opt_.runtime, opt_.attention));
    for (const FusedOp& op : ops) add_op(op);
    for (int32_t t : g_.outputs)
      if (buffer_of_[t] >= 0) result_.program.buffers[buffer_of_[t]].live_at_end = true;
    add_notes(ops);
    return std::move(result_);
  }

 private:
  bool pytorch() const { return opt_.runtime == Runtime::PyTorch; }
  bool ort() const { return opt_.runtime == Runtime::OnnxRuntime; }

  uint64_t tensor_bytes(int32_t t) const {
    return bytes_as(g_.tensors[t], storage_dtype(g_.tensors[t].dtype, opt_.float_dtype));
  }

  int32_t new_buffer(std::string name, uint64_t bytes, Category category) {
    Buffer b;
    b.name = std::move(name);
    b.bytes = bytes;
    b.category = category;
    result_.program.buffers.push_back(std::move(b));
    return static_cast<int32_t>(result_.program.buffers.size() - 1);
  }

  // Initializers and Constant-node outputs: resident weights (shape constants are dropped where
  // shape computations do not run on the GPU).
  // PyTorch holds a tied output embedding once: the exporter's transposed copy shares its buffer.
  void add_constants() {
    const std::vector<int32_t> tied = pytorch() ? tied_embedding_copies(g_) : std::vector<int32_t>(g_.tensors.size(), -1);
    for (size_t t = 0; t < g_.tensors.size(); ++t) {
      const int32_t id = static_cast<int32_t>(t);
      if (!is_constant(g_, id) || used_only_by_shape_math(id) || tied[t] >= 0) continue;
      const int32_t b = new_buffer(g_.tensors[t].name, tensor_bytes(id), Category::Weight);
      result_.program.buffers[b].resident = true;
      buffer_of_[t] = b;
    }
    for (size_t t = 0; t < g_.tensors.size(); ++t)
      if (tied[t] >= 0) {
        buffer_of_[t] = buffer_of_[tied[t]];
        ++tied_copies_;
      }
  }

  // Small integer constants that only feed shape math are Python values outside the ideal runtime.
  // Python numbers (Constant-node scalars) are not GPU tensors in PyTorch either.
  bool used_only_by_shape_math(int32_t t) const {
    if (opt_.runtime == Runtime::Ideal) return false;
    return constant_only_in_shape_math(g_, t, shape_) || (pytorch() && is_python_scalar(g_, t));
  }

  bool node_dropped(int32_t node) const {
    const Node& n = g_.nodes[node];
    if (n.op_type == "Constant") return true;
    if (opt_.runtime == Runtime::Ideal) return false;
    bool any = false;
    for (int32_t o : n.outputs) {
      if (o < 0) continue;
      any = true;
      if (!shape_[o]) return false;
    }
    return any;
  }

  void add_inputs() {
    for (int32_t t : g_.inputs) {
      if (buffer_of_[t] >= 0) continue;
      const int32_t b = new_buffer(g_.tensors[t].name, tensor_bytes(t), Category::Activation);
      result_.program.buffers[b].live_at_start = true;
      buffer_of_[t] = b;
    }
  }

  // The last node that reads any tensor sharing buffer b (INT32_MAX if a graph output).
  int32_t buffer_last_use(int32_t b) const {
    int32_t last = -1;
    for (size_t t = 0; t < g_.tensors.size(); ++t)
      if (buffer_of_[t] == b) last = std::max(last, last_use_[t]);
    return last;
  }

  bool is_input_buffer(int32_t b) const {
    const Buffer& buf = result_.program.buffers[b];
    return buf.resident || buf.live_at_start;
  }

  // PyTorch in place, as torchvision writes its blocks (runtime_rules.h).
  bool pytorch_in_place(const Node& n, int32_t node_index) const {
    if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() || n.outputs[0] < 0) return false;
    const int32_t in = n.inputs[0];
    const Tensor& x = g_.tensors[in];
    if (x.producer < 0 || sole_consumer(g_, in) != node_index || buffer_of_[in] < 0 || is_input_buffer(buffer_of_[in]))
      return false;
    return is_pytorch_in_place(n.op_type, g_.nodes[x.producer].op_type) && g_.tensors[n.outputs[0]].shape == x.shape;
  }

  // Which input buffer (if any) the op's first output shares.
  int32_t aliased_input(const FusedOp& op, int32_t node_index) {
    if (op.kind != OpKind::Node) return -1;
    const Node& n = g_.nodes[node_index];
    if (n.inputs.empty() || n.inputs[0] < 0 || buffer_of_[n.inputs[0]] < 0) return -1;
    if (n.outputs.empty() || n.outputs[0] < 0) return -1;  // no first output to alias (an omitted one)
    const int32_t in = n.inputs[0];
    const int32_t in_buffer = buffer_of_[in];
    if (is_alias_op(n.op_type)) {
      const bool reshape_like = n.op_type == "Reshape" || n.op_type == "Flatten";
      if (pytorch() && reshape_like && !contiguous_[in]) return -1;  // reshape of a strided view copies
      return in_buffer;
    }
    if (pytorch() && is_pytorch_strided_view(n.op_type)) return in_buffer;
    if (pytorch() && pytorch_in_place(n, node_index)) return in_buffer;
    if (ort() && is_ort_may_inplace(n.op_type) && !is_input_buffer(in_buffer) &&
        buffer_last_use(in_buffer) == node_index && tensor_bytes(n.outputs[0]) == tensor_bytes(in))
      return in_buffer;
    return -1;
  }

  void add_op(const FusedOp& op) {
    const int32_t anchor = op.nodes.back();
    if (op.kind == OpKind::Node && node_dropped(anchor)) return;
    const Node& n = g_.nodes[anchor];
    Step step;
    step.name = op.name;
    step.op = op.op;
    step.phase = Phase::Forward;
    for (int32_t node : op.nodes) step.flops = checked_add(step.flops, node_flops(g_, node), "FLOP count");
    for (int32_t t : op.inputs) {
      const int32_t b = buffer_of_[t];
      if (b >= 0 && std::find(step.reads.begin(), step.reads.end(), b) == step.reads.end()) step.reads.push_back(b);
    }
    const int32_t alias = aliased_input(op, anchor);
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      const int32_t t = op.outputs[i];
      if (shape_[t]) continue;
      const bool is_first = op.kind != OpKind::Node || t == n.outputs[0];
      const bool split_part = op.kind == OpKind::Node && n.op_type == "Split";
      if (alias >= 0 && (is_first || split_part)) {
        buffer_of_[t] = alias;
        // A strided view is not contiguous; anything else that aliases keeps its input's layout.
        contiguous_[t] = !(pytorch() && is_pytorch_strided_view(n.op_type)) && contiguous_[n.inputs[0]];
        continue;
      }
      buffer_of_[t] = new_buffer(g_.tensors[t].name, tensor_bytes(t), Category::Activation);
      step.writes.push_back(buffer_of_[t]);
    }
    if (pytorch()) add_pytorch_extras(op, step);
    result_.program.steps.push_back(std::move(step));
  }

  // What eager PyTorch allocates at this op beyond the graph's tensors.
  void add_pytorch_extras(const FusedOp& op, Step& step) {
    const Node& n = g_.nodes[op.nodes.back()];
    if (op.kind == OpKind::Node && n.op_type == "MaxPool" && !n.outputs.empty() && n.outputs[0] >= 0 &&
        (n.outputs.size() < 2 || n.outputs[1] < 0)) {
      const Tensor& out = g_.tensors[n.outputs[0]];
      const uint64_t bytes = checked_mul(out.elements(), kMaxPoolIndexBytes, "max-pool indices");
      step.writes.push_back(new_buffer(out.name + ":indices", bytes, Category::Activation));
      ++maxpool_indices_;
    }
    const bool onnx_layer_norm = op.kind == OpKind::Node && n.op_type == "LayerNormalization" &&
                                 !n.inputs.empty() && n.inputs[0] >= 0;
    if (op.kind == OpKind::LayerNorm || onnx_layer_norm) {
      const bool stats_in_graph = onnx_layer_norm && n.outputs.size() > 1 && n.outputs[1] >= 0;
      if (!stats_in_graph) {
        const uint64_t rows = layer_norm_rows(op, n);
        const uint64_t bytes = checked_mul(rows, kLayerNormStatBytes, "layer_norm statistics");
        step.writes.push_back(new_buffer(op.name + ":mean", bytes, Category::Workspace));
        step.writes.push_back(new_buffer(op.name + ":rstd", bytes, Category::Workspace));
      }
    }
    if (op.kind == OpKind::Attention) {  // sdpa: flash attention's logsumexp, float [batch, heads, seq_q]
      const Tensor& out = g_.tensors[op.outputs[0]];
      const uint64_t rows = out.shape.empty() ? 1 : out.elements() / std::max<int64_t>(1, out.shape.back());
      step.writes.push_back(new_buffer(op.name + ":logsumexp", checked_mul(rows, kLogsumexpBytes), Category::Workspace));
    }
    if (cublas_workspace_ < 0 && uses_cublas(op)) {
      cublas_workspace_ = new_buffer("cublas_workspace", cublas_workspace_bytes(opt_.cuda_arch_major), Category::Workspace);
      result_.program.buffers[cublas_workspace_].live_at_end = true;
      step.writes.push_back(cublas_workspace_);
    }
  }

  uint64_t layer_norm_rows(const FusedOp& op, const Node& n) const {
    const Tensor& x = g_.tensors[op.kind == OpKind::LayerNorm ? op.x : n.inputs[0]];
    int64_t axis = -1;
    if (op.kind == OpKind::Node) {
      auto it = n.attributes.find("axis");
      if (it != n.attributes.end()) axis = it->second.i;
    } else {
      // The decomposition reduces over the trailing axes of its first ReduceMean.
      const Node& mean = g_.nodes[op.nodes.front()];
      auto it = mean.attributes.find("axes");
      if (it != mean.attributes.end() && !it->second.ints.empty()) axis = *std::min_element(it->second.ints.begin(), it->second.ints.end());
    }
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (axis < 0) axis += rank;
    uint64_t rows = 1;
    for (int64_t i = 0; i < axis && i < rank; ++i) rows = checked_mul(rows, static_cast<uint64_t>(x.shape[i]), "layer_norm rows");
    return rows;
  }

  static bool uses_cublas(const FusedOp& op) {
    if (op.kind == OpKind::Linear) return true;
    return op.kind == OpKind::Node && (op.op == "MatMul" || op.op == "Gemm" || op.op == "Einsum");
  }

  bool has_op(std::initializer_list<const char*> types) const {
    for (const Node& n : g_.nodes)
      for (const char* t : types)
        if (n.op_type == t) return true;
    return false;
  }

  void add_notes(const std::vector<FusedOp>& ops) {
    auto& notes = result_.notes;
    if (opt_.float_dtype != DType::Float32)
      notes.push_back("Float weights and activations are stored as " + std::string(dtype_name(opt_.float_dtype)) +
                      " (model.half() / model.bfloat16()).");
    int shapes = 0;
    for (size_t t = 0; t < g_.tensors.size(); ++t) shapes += shape_[t] ? 1 : 0;
    std::map<OpKind, int> fused;
    for (const FusedOp& op : ops)
      if (op.kind != OpKind::Node) ++fused[op.kind];
    std::string fused_text;
    for (const auto& [kind, count] : fused)
      fused_text += (fused_text.empty() ? "" : ", ") + std::to_string(count) + " " + op_kind_name(kind);
    if (!fused_text.empty())
      notes.push_back("Recognised exporter decompositions run as one op: " + fused_text + ".");
    if (pytorch()) {
      if (shapes > 0)
        notes.push_back(std::to_string(shapes) + " shape-computation tensors are Python ints in PyTorch and take no GPU memory.");
      if (has_op({"Transpose", "Expand", "Slice", "Split"}))
        notes.push_back("Transpose, Expand, Slice and Split are views in PyTorch; a reshape of such a view copies.");
      if (has_op({"Relu", "Clip"}) && has_op({"Conv", "BatchNormalization"}))
        notes.push_back("ReLU/ReLU6 after conv/batch-norm/add and the residual add after batch norm run in place, as in torchvision.");
      if (tied_copies_ > 0)
        notes.push_back("The exporter's transposed copy of the tied embedding is counted once, as PyTorch holds it.");
      if (cublas_workspace_ >= 0)
        notes.push_back("cuBLAS workspace of " + std::to_string(cublas_workspace_bytes(opt_.cuda_arch_major)) +
                        " bytes for compute capability " + std::to_string(opt_.cuda_arch_major) +
                        ".x, allocated at the first matmul and kept (CublasHandlePool.cpp).");
      if (maxpool_indices_ > 0)
        notes.push_back("CUDA max_pool2d writes int64 indices even in inference (" + std::to_string(maxpool_indices_) + " ops).");
      if (has_op({"Conv", "ConvTranspose"}))
        notes.push_back("cuDNN convolution workspace is not modelled (0 bytes): its size depends on the algorithm cuDNN picks at run time.");
    }
    if (ort()) {
      if (shapes > 0)
        notes.push_back(std::to_string(shapes) + " shape-computation tensors live in CPU memory under ORT's CUDA EP and are not counted.");
      notes.push_back("ORT copies on Transpose, Expand, Slice and Split; unary activations may reuse their input's buffer (MayInplace).");
      notes.push_back("ORT's cuBLAS/cuDNN workspaces are not modelled.");
    }
  }

  const Graph& g_;
  const InferenceOptions& opt_;
  CostModelResult result_;
  std::vector<int32_t> buffer_of_;   // tensor -> buffer id (-1: none)
  std::vector<bool> contiguous_;     // pytorch: tensor is a contiguous view
  std::vector<int32_t> last_use_;    // tensor -> last consumer node (INT32_MAX for graph outputs)
  std::vector<bool> shape_;          // tensor is a dropped shape computation
  int32_t cublas_workspace_ = -1;
  int maxpool_indices_ = 0;
  int tied_copies_ = 0;
};

}  // namespace

CostModelResult build_inference_program(const Graph& graph, const InferenceOptions& options) {
  if (options.float_dtype != DType::Float32 && options.float_dtype != DType::Float16 &&
      options.float_dtype != DType::BFloat16)
    throw InputError("inference dtype must be float32, float16 or bfloat16, not " + std::string(dtype_name(options.float_dtype)));
  return InferenceBuilder(graph, options).build();
}

}  // namespace memplan
