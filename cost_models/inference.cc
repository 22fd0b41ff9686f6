// Inference: one step per executed op, in graph order. Weights resident, inputs live from the start,
// outputs to the end, views share their input's buffer. Runtime-specific extras (PyTorch's max-pool
// indices, layer_norm statistics, cuBLAS workspace) are added as the runtime allocates them.
#include <algorithm>
#include <climits>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "cost_models/cost_model.h"
#include "cost_models/eager_semantics.h"
#include "cost_models/flops.h"
#include "cost_models/forward_emitter.h"
#include "cost_models/graph_facts.h"
#include "cost_models/op_fusion.h"
#include "cost_models/runtime_constants.h"
#include "cost_models/program_writer.h"
#include "cost_models/python_references.h"
#include "cost_models/tensor_layout.h"
#include "onnx_import/checked.h"
#include "onnx_import/name_index.h"

namespace memplan {
namespace {

class InferenceBuilder {
 public:
  InferenceBuilder(const Graph& g, const ExecutionOptions& exec, const InferenceOptions& opt)
      : g_(g), exec_(exec), opt_(opt), runtime_(runtime_model(exec, /*training=*/false)),
        semantics_(runtime_.semantics), writer_(result_.program),
        buffer_of_(g.tensors.size(), -1), last_use_(g.tensors.size(), -1),
        shape_(off_device_shape_tensors(g, semantics_)), layout_(inference_layout(g, exec, opt)),
        folded_(ort() ? ort_constant_folded(g, shape_) : std::vector<bool>(g.tensors.size(), false)),
        held_outside_(held_with_identity_sources(g, opt.held_outside)),
        forward_(g, layout_, runtime_, shape_, /*training=*/false, Precision::Fp32, exec.cuda_arch_major, writer_) {
    for (size_t t = 0; t < g.tensors.size(); ++t)
      for (int32_t c : g.tensors[t].consumers) last_use_[t] = std::max(last_use_[t], c);
    for (int32_t t : g.outputs) last_use_[t] = INT32_MAX;
  }

  CostModelResult build() {
    add_constants();
    add_inputs();
    const std::vector<FusedOp> ops = executed_ops(g_, semantics_, exec_.attention, shape_);
    // PyTorch: what Python still references is freed when it returns (python_references.h); each hold reads the
    // tensor's buffer at the last op running at or before its node.
    std::vector<PythonHold> holds;
    if (pytorch()) holds = transformers_attention_holds(g_, exec_.attention == AttentionImpl::Eager);
    std::sort(holds.begin(), holds.end(),
              [](const PythonHold& a, const PythonHold& b) { return a.until_node < b.until_node; });
    size_t next_hold = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (folded_op(ops[i])) continue;
      add_op(ops[i]);
      const int32_t next_op = i + 1 < ops.size() ? ops[i + 1].nodes.back() : INT32_MAX;
      for (; next_hold < holds.size() && holds[next_hold].until_node < next_op; ++next_hold)
        hold(holds[next_hold].tensor, ops[i].nodes.back());
    }
    for (int32_t t : g_.outputs)
      if (buffer_of_[t] >= 0) result_.program.buffers[buffer_of_[t]].live_at_end = true;
    add_notes(ops);
    return std::move(result_);
  }

 private:
  bool pytorch() const { return semantics_ == Semantics::PyTorchEager; }
  bool ort() const { return semantics_ == Semantics::OrtCuda; }

  // The layout's passes that apply to inference (tensor_layout.h): the storage type under --dtype, then the slice
  // of each tensor one GPU of a --tp group holds. Nothing is re-stored or sharded across data-parallel GPUs.
  static TensorLayout inference_layout(const Graph& g, const ExecutionOptions& exec, const InferenceOptions& opt) {
    TensorLayout l;
    l.dtype.resize(g.tensors.size());
    for (size_t t = 0; t < g.tensors.size(); ++t) l.dtype[t] = storage_dtype(g.tensors[t].dtype, opt.float_dtype);
    l.tp = plan_tensor_parallel(g, exec.tp, exec.sequence_parallel, exec.replicate_kv_heads);
    return l;
  }

  // --tp: the slice one GPU holds; 0 for a tensor held outside the step (InferenceOptions::held_outside).
  uint64_t tensor_bytes(int32_t t) const { return held_outside_[t] ? 0 : layout_.local_bytes(g_, t); }

  // The tensors held outside the step, and what each is an Identity of: an inlined If branch (the optimum merged
  // decoder's) computes `present.0.key` inside the branch and the If's output is an Identity of it, the same
  // storage (ATen's Identity is the tensor itself), so the branch's tensor is the one held apart.
  static std::vector<bool> held_with_identity_sources(const Graph& g, const std::vector<std::string>& names) {
    std::vector<bool> held(g.tensors.size(), false);
    // By name, once: a mixture of experts holds every expert's tensors (serve --engine vllm's fused kernel),
    // 10^5 names in a graph of 10^5 tensors, which a search per name makes quadratic.
    NameIndex ids;
    if (!names.empty()) {
      ids.reserve(g.tensors.size());
      for (size_t i = 0; i < g.tensors.size(); ++i) ids.emplace(g.tensors[i].name, static_cast<int32_t>(i));
    }
    for (const std::string& name : names) {
      const int32_t* found = ids.find(name);
      std::optional<int32_t> t;
      if (found) t = *found;
      if (t) held[*t] = true;
      while (t && g.tensors[*t].producer >= 0) {
        const Node& n = g.nodes[g.tensors[*t].producer];
        if (n.op_type != "Identity" || n.inputs.empty() || n.inputs[0] < 0) break;
        t = n.inputs[0];
        held[*t] = true;
      }
    }
    return held;
  }

  // ORT: an op whose outputs its constant folding computed at session creation does not run.
  bool folded_op(const FusedOp& op) const {
    bool any = false;
    for (int32_t t : op.outputs) {
      if (shape_[t]) continue;
      if (!folded_[t]) return false;
      any = true;
    }
    return any;
  }

  // ORT: a constant whose every reader was folded is no longer held (the folded result is).
  bool read_only_by_folded(int32_t t) const {
    const Tensor& x = g_.tensors[t];
    if (!ort() || x.consumers.empty() || is_graph_output(g_, t)) return false;
    for (int32_t c : x.consumers) {
      bool folded = false;
      for (int32_t o : g_.nodes[c].outputs) folded = folded || (o >= 0 && folded_[o]);
      if (!folded) return false;
    }
    return true;
  }

  // Initializers and Constant-node outputs that the runtime holds on the device: resident weights.
  // PyTorch holds a tied output embedding once: under --tied-embeddings shape the exporter's suspected
  // transposed copy shares its buffer; otherwise it is counted, and the note says so.
  void add_constants() {
    std::vector<int32_t> tied = pytorch() ? held_tied_copies(g_, exec_.tied_embeddings_by_shape)
                                          : std::vector<int32_t>(g_.tensors.size(), -1);
    if (pytorch() && !exec_.tied_embeddings_by_shape) {
      const std::vector<int32_t> suspects = tied_embedding_copies(g_);
      for (size_t t = 0; t < suspects.size(); ++t) untied_lookalikes_ += suspects[t] >= 0 && tied[t] < 0;
    }
    for (size_t t = 0; t < g_.tensors.size(); ++t) {
      const int32_t id = static_cast<int32_t>(t);
      if (tied[t] >= 0) continue;
      if (!folded_[t] && (!constant_on_device(g_, id, semantics_, shape_) || read_only_by_folded(id))) continue;
      if (folded_[t]) ++folded_count_;
      const int32_t b = writer_.new_buffer(g_.tensors[t].name, tensor_bytes(id), Category::Weight);
      writer_.buffer(b).resident = true;
      buffer_of_[t] = b;
    }
    for (size_t t = 0; t < g_.tensors.size(); ++t)
      if (tied[t] >= 0) {
        buffer_of_[t] = buffer_of_[tied[t]];
        ++tied_copies_;
      }
  }

  void add_inputs() {
    for (int32_t t : g_.inputs) {
      if (buffer_of_[t] >= 0) continue;
      const int32_t b = writer_.new_buffer(g_.tensors[t].name, tensor_bytes(t), Category::Activation);
      writer_.buffer(b).live_at_start = true;
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

  // The one forward emitter (forward_emitter.h): nothing is saved, the GEMMs run on the caller's cuBLAS handle.
  void add_op(const FusedOp& op) {
    const ForwardPolicy policy;
    const BufferView view{[this](int32_t t) { return buffer_of_[t]; }, &result_.program,
                          [this](int32_t b) { return buffer_last_use(b); }};
    Step step = forward_.open(op, op_flops(g_, op.nodes), policy);
    forward_.read_inputs(op, view, step, [&](int32_t t) { forward_.matmul_copy(op, t, tensor_bytes(t), step); });
    const ClosedOp closed = forward_.close(op, view, [this](int32_t t) { return tensor_bytes(t); },
                                           [this](int32_t t, int32_t b) { buffer_of_[t] = b; }, std::move(step), policy);
    for (const EmittedExtra& e : closed.extras) {
      if (e.extra.suffix == ":indices") ++maxpool_indices_;
      if (!ort()) continue;
      ++ort_dequantized_;  // MatMulNBits' dequantized weight, the only extra ORT's kernels take (ort_forward_extras)
      ort_dequantized_bytes_ = checked_add(ort_dequantized_bytes_, e.extra.bytes, "dequantized weight bytes");
    }
  }

  // The tensor's buffer read by the last step, kept live through it (a hold on an absent or resident one is moot).
  void hold(int32_t t, int32_t node) {
    const int32_t b = buffer_of_[t];
    if (b < 0 || result_.program.buffers[b].resident || result_.program.steps.empty()) return;
    std::vector<int32_t>& reads = result_.program.steps.back().reads;
    if (std::find(reads.begin(), reads.end(), b) != reads.end()) return;
    reads.push_back(b);
    held_at_[b] = std::max(held_at_[b], node);
  }

  // The held buffers whose hold outlasts every graph reader of their tensors (one pass over the tensors).
  size_t held_past_last_use() const {
    std::map<int32_t, int32_t> last;
    for (size_t t = 0; t < g_.tensors.size(); ++t)
      if (held_at_.count(buffer_of_[t])) last[buffer_of_[t]] = std::max(last[buffer_of_[t]], last_use_[t]);
    size_t n = 0;
    for (const auto& [b, node] : held_at_) n += node > last[b];
    return n;
  }

  bool has_op(std::initializer_list<const char*> types) const {
    for (const Node& n : g_.nodes)
      for (const char* t : types)
        if (n.op_type == t) return true;
    return false;
  }

  void add_notes(const std::vector<FusedOp>& ops) {
    auto& notes = result_.notes;
    if (exec_.tp > 1) notes.push_back(tensor_parallel_note(layout_.tp));
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
        notes.push_back("A head weight shaped as the embedding's transpose is taken for the exporter's copy of a tied "
                        "embedding and counted once, as PyTorch holds it (--tied-embeddings shape); auto counts it, as "
                        "the file does not prove the tie.");
      if (untied_lookalikes_ > 0)
        notes.push_back("A head weight shaped as the embedding's transpose has its own initializer and is counted: the "
                        "file does not prove a tie (a constant-folded export looks the same tied or not); "
                        "--tied-embeddings shape if the model ties them (GPT-2, Llama-3.2-1B).");
      if (forward_.workspace_created())
        notes.push_back("cuBLAS workspace of " + std::to_string(cublas_workspace_bytes(exec_.cuda_arch_major)) +
                        " bytes for compute capability " + std::to_string(exec_.cuda_arch_major) +
                        ".x, allocated at the first matmul and kept (CublasHandlePool.cpp).");
      if (const size_t held = held_past_last_use(); held > 0)
        notes.push_back(std::to_string(held) + " buffers of decoder layers with eager attention under a self_attn "
                        "module are held past their last use while transformers' Python still references them (the "
                        "layer's and the attention's inputs, q, k, v, repeat_kv's copies, the attention weights, the "
                        "MLP's input; modeling_llama.py).");
      if (maxpool_indices_ > 0)
        notes.push_back("CUDA max_pool2d writes int64 indices even in inference (" + std::to_string(maxpool_indices_) + " ops).");
    }
    if (ort()) {
      if (shapes > 0)
        notes.push_back(std::to_string(shapes) + " shape-computation tensors live in CPU memory under ORT's CUDA EP and are not counted.");
      notes.push_back("ORT copies on Transpose, Expand, Slice and Split; unary activations may reuse their input's buffer (MayInplace).");
      notes.push_back("ORT's cuBLAS/cuDNN workspaces are not modelled.");
      if (folded_count_ > 0)
        notes.push_back(std::to_string(folded_count_) + " tensors computed only from constants (a float16 weight cast to float32, ...) "
                        "are folded into weights when ORT creates the session (constant_folding.cc); DequantizeLinear is not folded.");
      if (ort_dequantized_ > 0)
        notes.push_back(std::to_string(ort_dequantized_) + " MatMulNBits ops dequantize their weight for a cuBLAS GEMM instead of the fused GEMV (M > 1, g_idx or typed zero points), " +
                        std::to_string(ort_dequantized_bytes_) + " bytes in all, each freed after its op (matmul_nbits.cc).");
    }
  }

  const Graph& g_;
  const ExecutionOptions& exec_;
  const InferenceOptions& opt_;
  const RuntimeModel runtime_;
  const Semantics semantics_;
  CostModelResult result_;
  ProgramWriter writer_;
  std::vector<int32_t> buffer_of_;   // tensor -> buffer id (-1: none)
  std::vector<int32_t> last_use_;    // tensor -> last consumer node (INT32_MAX for graph outputs)
  const std::vector<bool> shape_;    // tensor is a shape computation off the device
  const TensorLayout layout_;        // tensor -> storage type under --dtype, and the slice one GPU holds (--tp)
  const std::vector<bool> folded_;   // tensor -> computed by ORT's constant folding (onnxruntime only)
  const std::vector<bool> held_outside_;  // tensor -> held outside the step: 0 bytes
  ForwardEmitter forward_;
  int maxpool_indices_ = 0;
  std::map<int32_t, int32_t> held_at_;  // buffer -> the last node whose op holds it (hold)
  int tied_copies_ = 0;
  int untied_lookalikes_ = 0;  // suspected copies counted as their own weight (--tied-embeddings auto, no)
  int folded_count_ = 0;
  int ort_dequantized_ = 0;
  uint64_t ort_dequantized_bytes_ = 0;
};

}  // namespace

CostModelResult build_inference_program(const Graph& graph, const ExecutionOptions& execution,
                                        const InferenceOptions& options) {
  if (options.float_dtype != DType::Float32 && options.float_dtype != DType::Float16 &&
      options.float_dtype != DType::BFloat16)
    throw InputError("inference dtype must be float32, float16 or bfloat16, not " + std::string(dtype_name(options.float_dtype)));
  // Refused before any cost model runs (report/option_checks.cc's combination matrix).
  precondition(execution.tp == 1 || execution.runtime != Runtime::OnnxRuntime, "tensor parallelism under ONNX Runtime");
  return InferenceBuilder(graph, execution, options).build();
}

}  // namespace memplan
