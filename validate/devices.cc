#include "validate/devices.h"

#include "validate/cpu_device.h"
#if MEMPLAN_VALIDATE_CUDA
#include "validate/cuda_device.h"
#endif

namespace memplan::validate {

bool cuda_backend_built() { return MEMPLAN_VALIDATE_CUDA != 0; }

bool cuda_available() {
#if MEMPLAN_VALIDATE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Device> make_device(const std::string& kind) {
  if (kind == "cpu") return make_cpu_device();
  if (kind == "cuda") {
#if MEMPLAN_VALIDATE_CUDA
    return make_cuda_device();
#else
    throw InputError("this memplan-validate was built without CUDA (nvcc not found or MEMPLAN_CUDA=OFF)");
#endif
  }
  throw InputError("unknown device '" + kind + "' (expected cuda or cpu)");
}

}  // namespace memplan::validate
