// Replays on a CUDA device: kernels fill and verify the patterns; cudaMalloc, cudaMallocAsync from an explicit
// pool, and cudaMemGetInfo give the allocations and the measurements. Built only when nvcc is found.
#pragma once

#include <memory>

#include "validate/device.h"

namespace memplan::validate {

// Number of CUDA devices, 0 when the driver or a device is missing (never throws).
int cuda_device_count();

// Uses device 0; throws DeviceError when there is none.
std::unique_ptr<Device> make_cuda_device();

}  // namespace memplan::validate
