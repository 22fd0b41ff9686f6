// What the runtime does for one forward op, decided once for inference and training: which ops run, which
// constants live on the device, which outputs are fresh buffers and which share an input's storage (views,
// in-place updates, ORT's MayInplace), what an op allocates beyond its outputs, which ops call cuBLAS, and
// what torch.autocast casts. Both cost models call these functions; neither keeps a copy of a rule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"
#include "cost_models/tensor_strides.h"
#include "cost_models/op_fusion.h"
#include "cost_models/program_writer.h"
#include "onnx_import/graph.h"
#include "planner/program.h"

namespace memplan {

// How the ops run (Semantics) is decided once, from the runtime, by runtime_model (cost_models/runtime.h).

// Operand and result `i` of a node, or -1 when absent or omitted.
int32_t node_input(const Node& n, size_t i);
int32_t node_output(const Node& n, size_t i);

// The ops that run, in order: the fused list without Constant nodes and (outside AsWritten) without ops
// whose every output is a shape computation (`shape` from shape_tensors()).
std::vector<FusedOp> executed_ops(const Graph& g, Semantics semantics, AttentionImpl attention,
                                  const std::vector<bool>& shape);

// Per tensor: the shape computations that never reach the device (all false for AsWritten).
std::vector<bool> off_device_shape_tensors(const Graph& g, Semantics semantics);

// An initializer or Constant output that the runtime holds on the device: not a small integer constant only
// read by shape math (a Python value in PyTorch, CPU memory in ORT), not a Python number (PyTorch).
bool constant_on_device(const Graph& g, int32_t tensor, Semantics semantics, const std::vector<bool>& shape);

// ONNX Runtime's ConstantFolding (onnxruntime/core/optimizer/constant_folding.cc, a level-1 transformer on
// by default) runs, once at session creation on the CPU, every deterministic node without subgraphs whose
// inputs are all constants, and stores its outputs as initializers; an initializer left unread is dropped.
// DequantizeLinear is kept (skip_dequantize_linear, true unless session.disable_quant_qdq is set) so QDQ
// units survive for the EPs that fuse them (ORT folds it only inside a whole constant DQ -> X -> Q unit,
// not modelled). Per tensor: the node outputs it folds (shape computations, which
// ORT keeps on the CPU, excluded). So a float16 weight Cast to float32 is held as a float32 weight and no
// Cast runs. `shape` marks the shape computations (shape_tensors()).
std::vector<bool> ort_constant_folded(const Graph& g, const std::vector<bool>& shape);

// PyTorch's dropout returns its input, allocating neither an output nor a mask, when not training or when
// p == 0 (aten/src/ATen/native/Dropout.cpp: `if (p == 0 || !train || input.numel() == 0) return input;`).
// In training, a Dropout is a no-op when its ratio is a known 0 (input 1, or the `ratio` attribute before
// opset 12) or its training_mode input is a known false; an absent training_mode is assumed true, as
// torch.onnx's training exports write it.
bool dropout_is_noop(const Graph& g, const Node& n, bool training);

// Ops that call cuBLAS (and so create PyTorch's per-handle workspace on first use).
bool uses_cublas(const FusedOp& op);

// A buffer eager PyTorch allocates at a forward op beyond the graph's tensors: max-pool indices, layer_norm's
// mean and rstd, flash attention's logsumexp, and in training batch norm's save_mean/save_invstd and the
// dropout mask. Training saves every one for backward; inference frees it after the op, and reports it
// under `category` (an op's second result is an Activation, a kernel's internal buffer a Workspace).
struct ForwardExtra {
  std::string suffix;  // appended to the op's name: ":indices", ":mean", ...
  uint64_t bytes = 0;  // exact requested bytes
  Category category = Category::Activation;
};
std::vector<ForwardExtra> forward_extras(const Graph& g, const FusedOp& op, bool training);

// A buffer ONNX Runtime's CUDA EP takes from its arena inside a kernel, beyond the op's outputs, and returns
// when the kernel ends: MatMulNBits' dequantized weight for a GEMM (quantized_weights.h), a Workspace.
// `dtype` is each tensor's storage type.
std::vector<ForwardExtra> ort_forward_extras(const Graph& g, const FusedOp& op, const std::vector<DType>& dtype);

// Rows of a layer norm over `x` (the product of the dims before the first normalised axis).
uint64_t layer_norm_rows(const Graph& g, const FusedOp& op);

// Where the op's outputs live. The caller owns the tensor -> buffer map (training keeps a second one for
// recomputation) and passes it in; this decides, it never allocates.
struct BufferView {
  std::function<int32_t(int32_t)> buffer_of;  // tensor -> buffer id, -1 when none
  const Program* program = nullptr;           // the buffers' flags (resident, live_at_start)
  std::function<int32_t(int32_t)> last_reader;  // buffer -> last node reading any tensor in it (ORT only)
};

class ForwardAliasing {
 public:
  ForwardAliasing(const Graph& g, Semantics semantics, bool training, const std::vector<DType>& dtype);

  // The input buffer the op's first output (and every part of a Split) shares, or -1: views (reshape of a
  // contiguous tensor, squeeze, identity, eval dropout; in PyTorch also transpose/expand/slice/split),
  // torchvision's in-place ReLU and residual add, Tensor.index_add_, and ORT's MayInplace activations.
  int32_t aliased_input(const FusedOp& op, const BufferView& view) const;

  // Whether output tensor `t` of `op` takes the aliased buffer (the first output, or a Split part).
  bool shares_alias(const FusedOp& op, int32_t t) const;

  // An output the runtime never creates: the mask a no-op dropout declares (PyTorch).
  bool output_absent(const FusedOp& op, int32_t t) const;

  // Records the layout of an output that shares its input's buffer (strided views are not contiguous).
  void note_alias(const FusedOp& op, int32_t t);

  // The operands a MatMul op copies before its GEMM (PyTorch: matmul_operand_copies, tensor_strides.h, on the
  // layouts recorded so far); none in another runtime or for another op.
  std::vector<MatmulCopy> matmul_copies(const FusedOp& op) const;

  // The one output loop of both cost models: each output of `op` the runtime creates (not a shape computation,
  // `shape`, nor absent) either shares the aliased input's buffer or gets a new activation buffer of `bytes(t)`
  // that step `st` writes; `set_buffer(t, b)` records where it lives.
  void emit_outputs(const FusedOp& op, const BufferView& view, const std::vector<bool>& shape, ProgramWriter& writer,
                    const std::function<uint64_t(int32_t)>& bytes,
                    const std::function<void(int32_t, int32_t)>& set_buffer, Step& st);

 private:
  bool in_place(const FusedOp& op, const BufferView& view) const;
  bool index_add_in_place(const FusedOp& op, const BufferView& view) const;

  const Graph& g_;
  Semantics semantics_;
  bool training_;
  const std::vector<DType>& dtype_;
  Strides strides_of(int32_t t) const;
  // Per tensor (PyTorch): the strides of a view's output; empty for a tensor written contiguous.
  std::vector<Strides> strides_;
};

// Precision: the storage type of parameters and of torch.autocast's low-precision ops.
bool is_amp(Precision p);
bool is_half(Precision p);  // fp16 or bf16 without autocast: model.half() / model.bfloat16()
DType low_precision_dtype(Precision p);  // float16 or bfloat16 (amp and pure half)
DType param_dtype(Precision p);          // float32 for fp32 and amp
// The type the parameters are stored in, and so their grads and optimizer states: param_dtype(precision), except
// under autocast, where it is --param-dtype (TrainingOptions::amp_param_dtype: float32 for plain PyTorch AMP, the
// checkpoint's half type for the Hugging Face Trainer's bf16=True over a model loaded as stored).
DType stored_param_dtype(const TrainingOptions& o);
// The type the step reads its parameters in: stored_param_dtype(o), except under autocast with a mixed-precision
// policy (--fsdp2-mp with --precision amp-*, accelerate's mixed_precision over FSDP), where the all-gather hands
// every op the policy's param_dtype, autocast's low type (report/option_checks.cc refuses any other pair).
DType compute_param_dtype(const TrainingOptions& o);

// The type torch.autocast casts input `t` of `op` to before the op runs (Undefined: no cast), for the
// storage types `dtype` under `precision` (aten/src/ATen/autocast_mode.cpp).
DType autocast_target(const Graph& g, const FusedOp& op, int32_t t, Precision precision, const std::vector<DType>& dtype);

}  // namespace memplan
