// The one forward emitter (forward_emitter.h).
#include "cost_models/forward_emitter.h"

#include "cost_models/runtime_constants.h"
#include "onnx_import/checked.h"

namespace memplan {

ForwardEmitter::ForwardEmitter(const Graph& g, const TensorLayout& layout, const RuntimeModel& runtime,
                               const std::vector<bool>& shape, bool training, Precision precision, int cuda_arch_major,
                               ProgramWriter& writer)
    : g_(g), layout_(layout), runtime_(runtime), shape_(shape), training_(training), precision_(precision),
      cublas_bytes_(cublas_workspace_bytes(cuda_arch_major)), writer_(writer),
      aliasing_(g, runtime.semantics, training, layout.dtype) {}

Step ForwardEmitter::open(const FusedOp& op, uint64_t flops, const ForwardPolicy& policy) const {
  Step st;
  st.name = policy.prefix + op.name;
  st.op = op.op;
  st.phase = policy.phase;
  st.flops = flops;
  return st;
}

void ForwardEmitter::read_inputs(const FusedOp& op, const BufferView& view, Step& st,
                                 const std::function<void(int32_t)>& prepare) const {
  for (int32_t t : op.inputs) {
    const int32_t b = view.buffer_of(t);
    if (b < 0) continue;
    add_unique(st.reads, b);
    if (prepare) prepare(t);
  }
}

int32_t ForwardEmitter::matmul_copy(const FusedOp& op, int32_t t, uint64_t t_bytes, Step& st) {
  const uint64_t elements = g_.tensors[t].elements();
  for (const MatmulCopy& c : aliasing_.matmul_copies(op)) {
    if (c.tensor != t || elements == 0) continue;
    // t's bytes scaled by the broadcast: multiplied first, as t_bytes may be a tensor-parallel slice (below a byte
    // an element at --tp 4 in 16-bit).
    const uint64_t bytes = c.elements == elements ? t_bytes : checked_mul(t_bytes, c.elements, "matmul copy bytes") / elements;
    const int32_t b = writer_.new_buffer(g_.tensors[t].name + ":matmul_copy", bytes, Category::Activation);
    st.writes.push_back(b);
    return b;
  }
  return -1;
}

uint64_t ForwardEmitter::local_extra_bytes(const FusedOp& op, uint64_t bytes) const {
  return op.outputs.empty() ? bytes : layout_.tp.local_bytes(g_, op.outputs[0], bytes);
}

ClosedOp ForwardEmitter::close(const FusedOp& op, const BufferView& view, const std::function<uint64_t(int32_t)>& bytes,
                               const std::function<void(int32_t, int32_t)>& set_buffer, Step st,
                               const ForwardPolicy& policy) {
  aliasing_.emit_outputs(op, view, shape_, writer_, bytes, set_buffer, st);
  std::vector<ForwardExtra> extras;
  if (runtime_.semantics == Semantics::PyTorchEager) extras = forward_extras(g_, op, training_);
  if (runtime_.semantics == Semantics::OrtCuda) extras = ort_forward_extras(g_, op, layout_.dtype);
  ClosedOp made;
  for (ForwardExtra& e : extras) {
    // In training mode the kernel returns them as results (native_layer_norm's mean and rstd, the dropout mask):
    // activations; in inference each is reported as what it is (a second result, or a kernel's own workspace).
    const Category category = training_ ? Category::Activation : e.category;
    const int32_t b = writer_.new_buffer(op.name + e.suffix, local_extra_bytes(op, e.bytes), category);
    st.writes.push_back(b);
    made.extras.push_back({std::move(e), b});
    if (policy.save_extras) made.saved.push_back(b);
  }
  add_gather(op, st);
  touch_workspace(op, policy.handle, st);
  writer_.program().steps.push_back(std::move(st));
  return made;
}

int32_t ForwardEmitter::gathered_input(const FusedOp& op) const {
  int32_t x = -1;
  if (layout_.tp.gathered_input.empty()) return x;
  for (int32_t n : op.nodes)
    if (layout_.tp.gathered_input[n] >= 0) x = layout_.tp.gathered_input[n];
  return x;
}

uint64_t ForwardEmitter::gathered_bytes(const FusedOp& op, int32_t x) const {
  return layout_.gathered_bytes(g_, x, autocast_target(g_, op, x, precision_, layout_.dtype));
}

int32_t ForwardEmitter::add_gather(const FusedOp& op, Step& st) {
  const int32_t x = gathered_input(op);
  if (x >= 0)
    st.writes.push_back(writer_.new_buffer(g_.tensors[x].name + ":all_gather", gathered_bytes(op, x), Category::Activation));
  return x;
}

// One workspace per (handle, stream), allocated through the caching allocator at the handle's first cuBLAS call
// and kept (aten/src/ATen/cuda/CublasHandlePool.cpp, getCurrentCUDABlasHandle / getCUDABlasLtWorkspace); autograd
// runs CUDA backward on its own device thread (torch/csrc/autograd/engine.cpp), so it has a handle of its own.
void ForwardEmitter::touch_workspace(const FusedOp& op, CublasHandle handle, Step& st) {
  if (!runtime_.library_workspaces || !uses_cublas(op)) return;
  const bool autograd = handle == CublasHandle::Autograd;
  writer_.touch_workspace(cublas_[autograd], autograd ? "cublas_workspace:autograd" : "cublas_workspace", cublas_bytes_, st);
}

void ForwardEmitter::hold_workspaces(const std::vector<FusedOp>& ops) {
  if (!runtime_.library_workspaces) return;
  bool any = false;
  for (const FusedOp& op : ops) any = any || uses_cublas(op);
  if (!any) return;
  for (int h = 0; h < 2; ++h) {
    cublas_[h] = writer_.new_buffer(h == 0 ? "cublas_workspace" : "cublas_workspace:autograd", cublas_bytes_,
                                    Category::Workspace);
    writer_.buffer(cublas_[h]).resident = true;
  }
}

}  // namespace memplan
