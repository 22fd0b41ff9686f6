// How a model runs, for either mode: the runtime and the options that decide how its ops run and what one GPU
// holds of each tensor. One struct, read by the inference and the training cost model alike; the name a user
// picks (--runtime) is split here, once, into what the cost models and the planner act on: how the ops run
// (Semantics), whether library workspaces are modelled, and the allocator the program is measured on.
#pragma once

#include "planner/measure.h"

namespace memplan {

// --runtime: ideal (the graph's own semantics on an exact allocator), pytorch (eager PyTorch on a CUDA GPU),
// onnxruntime (ONNX Runtime's CUDA execution provider).
enum class Runtime { Ideal, PyTorch, OnnxRuntime };

// How the ops of the graph run:
//  - AsWritten: every node as the file writes it, every constant on the device (the ideal inference runtime);
//  - PyTorchEager: eager PyTorch, as the module ran before export (views, in-place ops, fused GELU/LayerNorm/
//    linear, shape math as Python ints); training always runs this way, on a GPU or on the CPU;
//  - OrtCuda: ONNX Runtime's CUDA EP (copying Transpose/Slice, MayInplace activations, shape math on the CPU).
enum class Semantics { AsWritten, PyTorchEager, OrtCuda };

// How attention (MatMul, scale, optional mask, Softmax, optional Dropout, MatMul) runs in PyTorch:
// as the exported graph (eager), or as torch's fused scaled_dot_product_attention (never materialises
// the seq x seq matrices; saves q, k, v, out and an fp32 logsumexp for backward).
// Eager: the exported ops; Sdpa: torch's scaled_dot_product_attention (no score matrix); EngineKernel: a serving
// engine's attention kernel (serve --engine vllm: its backends also take a soft-cap, logits_soft_cap).
enum class AttentionImpl { Eager, Sdpa, EngineKernel };

struct ExecutionOptions {
  Runtime runtime = Runtime::PyTorch;  // what most users run
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (--expandable-segments): the pytorch runtime's allocator maps
  // pages into one range per pool (planner/alloc_pytorch_expandable.h).
  bool expandable_segments = false;
  AttentionImpl attention = AttentionImpl::Eager;  // pytorch semantics only
  // CUDA compute capability major of the target GPU (9 = H100/H200). Decides PyTorch's cuBLAS
  // workspace size (aten/src/ATen/cuda/CublasHandlePool.cpp: 32 MiB on majors 9, 10 and 12).
  int cuda_arch_major = 9;
  // The target GPU's multiprocessor count (the catalog's; 0: not known). vLLM's Triton sampler sizes its scratch
  // buffer by it (cost_models/vllm_engine.h vllm_triton_sampler_buffer_rows).
  int multiprocessors = 0;
  // --tied-embeddings shape: a head weight shaped as the embedding's transpose is taken for its tied copy
  // (graph_facts.h tied_embedding_copies). False (auto, no): only a tie the file proves is held once, a
  // head that reads the embedding's own initializer; a head with its own initializer is counted.
  bool tied_embeddings_by_shape = false;
  // --tp N / --sequence-parallel: Megatron-style tensor parallelism (cost_models/tensor_parallel.h); the program
  // is rank 0's, the busiest GPU of the group.
  int tp = 1;
  bool sequence_parallel = false;
  // With more GPUs than key/value heads, each holds one head, replicated (a serving engine's tensor parallelism,
  // vLLM's); false: refused, as Megatron-LM refuses it (cost_models/tensor_parallel.h).
  bool replicate_kv_heads = false;
};

// What a runtime means to a cost model in one mode.
struct RuntimeModel {
  Semantics semantics = Semantics::PyTorchEager;
  // PyTorch's library workspaces (cuBLAS's, allocated through the caching allocator and kept): pytorch only.
  // ideal training is eager PyTorch without them (what a CPU run under torch.profiler measures); ORT's cuBLAS
  // and cuDNN workspaces are not modelled.
  bool library_workspaces = false;
  // The allocator the program is served by, on which whether it fits is measured (planner/measure.h): ideal,
  // exact sizes in one packed arena; pytorch, the caching allocator (with expandable segments when
  // PYTORCH_CUDA_ALLOC_CONF says so); onnxruntime, the BFC arena with the memory pattern.
  RuntimeAllocator allocator;
};

// The one mapping from --runtime to semantics, workspaces and allocator. `training`: ideal runs eager PyTorch
// (autograd is PyTorch's), where inference's ideal runs the graph as written.
inline RuntimeModel runtime_model(const ExecutionOptions& e, bool training) {
  switch (e.runtime) {
    case Runtime::Ideal:
      return {training ? Semantics::PyTorchEager : Semantics::AsWritten, false, {AllocatorKind::Exact, false}};
    case Runtime::PyTorch:
      return {Semantics::PyTorchEager, true, {AllocatorKind::PytorchCaching, e.expandable_segments}};
    case Runtime::OnnxRuntime:
      return {Semantics::OrtCuda, false, {AllocatorKind::OrtMemoryPattern, false}};
  }
  return {};
}

}  // namespace memplan
