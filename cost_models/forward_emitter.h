// One forward op as a step of the memory program: the one emitter of inference and of training's forward and
// recomputation. What it writes, in the order the runtime allocates it:
//   open    the step: its name, kind, phase and FLOPs
//   inputs  each input's buffer, read; a hook lets training prepare an input first (autocast copies, ZeRO and
//           FSDP gathers, dequantized frozen weights: training_forward.cc), which inference never does
//   close   the outputs (ForwardAliasing: views, in-place updates, fresh buffers), the runtime's own buffers at
//           the op (forward_extras for PyTorch, ort_forward_extras for ONNX Runtime), the sequence-parallel
//           all-gather of the op's input, the cuBLAS workspace the op's handle creates at its first GEMM; then
//           the step is appended
// Two policies, the caller's, say what differs between the modes (ForwardPolicy):
//   save       whether autograd keeps the op's extra buffers for backward (training's forward and recomputation:
//              close returns them) or they die at the op (inference; a checkpointed segment's first pass)
//   workspace  the cuBLAS handle the op runs on: the calling thread's, or autograd's backward thread's when a
//              checkpointed segment is recomputed in backward (CublasHandlePool.cpp keeps one per thread);
//              no workspace at all where the runtime models none (RuntimeModel::library_workspaces)
// What an op reads, how big each tensor is and where each lives stay the caller's (BufferView, `bytes`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cost_models/eager_semantics.h"
#include "cost_models/program_writer.h"
#include "cost_models/runtime.h"
#include "cost_models/tensor_layout.h"

namespace memplan {

// The cuBLAS handles a step's GEMMs run on: one per thread, each with its own workspace.
enum class CublasHandle { Caller, Autograd };

struct ForwardPolicy {
  Phase phase = Phase::Forward;  // Backward for a recomputation
  const char* prefix = "";       // prefixed to the op's name ("recompute:")
  bool save_extras = false;      // save policy: the extras are kept for backward
  CublasHandle handle = CublasHandle::Caller;  // workspace policy
};

// What close() made beyond the outputs: each extra buffer the runtime allocated at the op, and of those the ones
// autograd keeps for backward (all of them under the save policy, none otherwise).
struct EmittedExtra {
  ForwardExtra extra;
  int32_t buffer = -1;
};
struct ClosedOp {
  std::vector<EmittedExtra> extras;
  std::vector<int32_t> saved;
};

class ForwardEmitter {
 public:
  // `training`: ops run in training mode (dropout masks, batch-norm statistics; forward_extras) and their
  // extras are results, counted as activations. `precision` says what autocast casts (the gathered input's type).
  ForwardEmitter(const Graph& g, const TensorLayout& layout, const RuntimeModel& runtime, const std::vector<bool>& shape,
                 bool training, Precision precision, int cuda_arch_major, ProgramWriter& writer);

  Step open(const FusedOp& op, uint64_t flops, const ForwardPolicy& policy) const;

  // Reads each input's buffer (view.buffer_of; -1: none, skipped), calling `prepare(t)` after the read when given.
  void read_inputs(const FusedOp& op, const BufferView& view, Step& st,
                   const std::function<void(int32_t)>& prepare = nullptr) const;

  // Input `t` of `op` as PyTorch's matmul copies it before its GEMM (ForwardAliasing::matmul_copies): a fresh
  // buffer of the copy's bytes (`t_bytes` per t's elements, times the broadcast), written by `st`, which the GEMM
  // reads and autograd keeps in t's place; -1 when the op reads t as it is.
  int32_t matmul_copy(const FusedOp& op, int32_t t, uint64_t t_bytes, Step& st);

  // Outputs, extras, gather, workspace, then `st` appended to the program.
  ClosedOp close(const FusedOp& op, const BufferView& view, const std::function<uint64_t(int32_t)>& bytes,
                 const std::function<void(int32_t, int32_t)>& set_buffer, Step st, const ForwardPolicy& policy);

  // --sequence-parallel: the sequence-sharded input the op's column-parallel GEMM all-gathers (-1: none), and its
  // full size as the op reads it (autocast's cast). add_gather adds that transient to `st` and returns the input.
  int32_t gathered_input(const FusedOp& op) const;
  uint64_t gathered_bytes(const FusedOp& op, int32_t x) const;
  int32_t add_gather(const FusedOp& op, Step& st);

  // The op's GEMMs create their handle's workspace at its first call (touch), kept to the end. A later
  // iteration holds both handles' workspaces from the start (hold_workspaces, when any op calls cuBLAS).
  void touch_workspace(const FusedOp& op, CublasHandle handle, Step& st);
  void hold_workspaces(const std::vector<FusedOp>& ops);
  bool workspace_created() const { return cublas_[0] >= 0 || cublas_[1] >= 0; }

  // An extra buffer of `op` shrinks with its output's tensor-parallel slice.
  uint64_t local_extra_bytes(const FusedOp& op, uint64_t bytes) const;

 private:
  const Graph& g_;
  const TensorLayout& layout_;
  const RuntimeModel runtime_;
  const std::vector<bool>& shape_;
  const bool training_;
  const Precision precision_;
  const uint64_t cublas_bytes_;
  ProgramWriter& writer_;
  ForwardAliasing aliasing_;
  int32_t cublas_[2] = {-1, -1};  // per CublasHandle
};

}  // namespace memplan
