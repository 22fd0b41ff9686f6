// Chooses the replay device by name; the only file that knows whether the CUDA backend was built.
#pragma once

#include <memory>
#include <string>

#include "validate/device.h"

namespace memplan::validate {

bool cuda_backend_built();
// True when the CUDA backend was built and a device is present.
bool cuda_available();

// "cpu" or "cuda"; throws InputError for "cuda" when the backend was not built, DeviceError when no GPU.
std::unique_ptr<Device> make_device(const std::string& kind);

}  // namespace memplan::validate
