// Constants that model a runtime, each with the source it comes from.
#pragma once

#include <cstdint>

namespace memplan {

// PyTorch's cuBLAS workspace, one per (cuBLAS handle, stream), allocated through the caching allocator
// at the first cuBLAS call on that handle and kept (aten/src/ATen/cuda/CublasHandlePool.cpp,
// parseChosenWorkspaceSize / setWorkspaceForHandle): ":4096:8" = 32 MiB on compute capability
// 9.x, 10.x and 12.x ("32MiB for Hopper and Blackwell"), else ":4096:2:16:8" = 4096 KiB * 2 + 16 KiB * 8.
// The rule moved between releases of that file: earlier ones gave 32 MiB to sm_90 only (major 9 and
// minor 0: "32MiB for Hopper"), so B200 (10.0) and RTX 5090 (12.0) got 8 MiB + 128 KiB there; the newest
// adds major 11. ROCm builds use another rule (32 MiB, 128 MiB on gfx942/gfx950, plus a separate hipBLASLt
// workspace) that is not modelled. CUBLAS_WORKSPACE_CONFIG=:SIZE:COUNT overrides all of these.
// One per thread in every release read: keyed by (handle, stream) with a handle per thread, or by (device,
// stream) in a thread_local map; so the forward's thread and autograd's device thread hold one each. The newest
// file adds TORCH_CUBLAS_WORKSPACE_CACHE, off by default on CUDA, which leaves cuBLAS its own default workspace
// outside the caching allocator; not modelled (no release with it was identified).
inline constexpr uint64_t kCublasWorkspaceHopper = 4096ull * 1024 * 8;             // 33,554,432
inline constexpr uint64_t kCublasWorkspaceDefault = 4096ull * 1024 * 2 + 16ull * 1024 * 8;  // 8,519,680

inline uint64_t cublas_workspace_bytes(int cuda_arch_major) {
  const bool use32mb = cuda_arch_major == 9 || cuda_arch_major == 10 || cuda_arch_major == 12;
  return use32mb ? kCublasWorkspaceHopper : kCublasWorkspaceDefault;
}
// cuBLASLt (used by addmm with bias, i.e. nn.Linear): CublasHandlePool.cpp getCUDABlasLtWorkspace()
// shares the cuBLAS workspace of the same stream when TORCH_CUBLASLT_UNIFIED_WORKSPACE is unset (the
// default of the releases with the 9/10/12 rule: unified_cublas_and_lt_workspaces()), so it adds no bytes.
// (Older releases allocated a separate CUBLASLT_WORKSPACE_SIZE = 1024 KiB per handle and stream unless that
// variable was set to 1, pytorch#73328.)

// CUDA max_pool{1,2,3}d: aten/src/ATen/native/MaxPooling.cpp routes any non-CPU input to
// max_poolNd_with_indices, which writes int64 indices (one per output element, int64_t* in
// aten/src/ATen/native/cuda/DilatedMaxPool2d.cu) even when no grad is needed.
inline constexpr uint64_t kMaxPoolIndexBytes = 8;

// CUDA native_layer_norm always allocates mean and rstd, M = prod(shape[:axis]) values each in the
// accumulate type (float for half/bfloat16/float inputs): aten/src/ATen/native/cuda/layer_norm_kernel.cu
// layer_norm_cuda. at::layer_norm discards them in inference, autograd saves them in training.
inline constexpr uint64_t kLayerNormStatBytes = 4;

// cudnn batch_norm training saves save_mean and save_invstd per channel in float
// (aten/src/ATen/native/cudnn/BatchNorm.cpp); the native CUDA kernel does the same.
inline constexpr uint64_t kBatchNormStatBytes = 4;

// scaled_dot_product_attention (flash / memory-efficient) saves logsumexp, float, [batch, heads, seq_q]
// (aten/src/ATen/native/transformers/cuda/attention.cu, _flash_attention_forward).
inline constexpr uint64_t kLogsumexpBytes = 4;

// Dropout's mask: a bool tensor, 1 byte per element (aten/src/ATen/native/cuda/Dropout.cu,
// fused_dropout / native_dropout return a Bool mask).
inline constexpr uint64_t kDropoutMaskBytes = 1;

// DDP gradient bucket cap: bucket_cap_mb=25 (torch/nn/parallel/distributed.py).
inline constexpr uint64_t kDdpBucketBytes = 25ull * 1024 * 1024;

}  // namespace memplan
