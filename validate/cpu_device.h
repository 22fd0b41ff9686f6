// Replays on host memory, so every CI run exercises the replay and the overlap check without a GPU.
#pragma once

#include <memory>

#include "validate/device.h"

namespace memplan::validate {

std::unique_ptr<Device> make_cpu_device();

}  // namespace memplan::validate
