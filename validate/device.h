// Where a plan is replayed: host memory or a CUDA device. The replay (replay.h) decides what to allocate,
// fill and verify when; a Device only does it and says how much memory is in use.
// Kept free of JSON and CLI headers so the CUDA backend compiles with nvcc alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "onnx_import/errors.h"

namespace memplan::validate {

// arena: one allocation of the planned arena, buffers placed at their offsets.
// malloc: one allocation per buffer from the system allocator (cudaMalloc / malloc), freed after its last step.
// pool: one allocation per buffer from an explicit stream-ordered pool (cudaMallocAsync); CUDA only.
enum class Mode { kArena, kMalloc, kPool };

const char* mode_name(Mode mode);

// The first byte of a verified region that does not hold its buffer's pattern.
struct Mismatch {
  uint64_t position = 0;          // pattern position (arena offset in arena mode) of the first bad byte
  uint64_t mismatched_bytes = 0;  // how many bytes of the region differ from the pattern
  std::vector<uint8_t> found;     // up to kFoundBytes bytes read from `position` on, clipped to the region
};
inline constexpr uint64_t kFoundBytes = 16;

// High-water marks a device keeps itself (the CUDA pool's attributes), reported beside our own sampling.
struct AllocatorHighWater {
  std::optional<uint64_t> used_high;
  std::optional<uint64_t> reserved_high;
};

// A device or driver call failed (exit 3): not the plan's fault and not an overlap.
class DeviceError : public Error {
 public:
  explicit DeviceError(const std::string& msg) : Error(msg, kExitInternal) {}
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string kind() const = 0;  // "cpu" or "cuda"
  // Name/value pairs that identify the hardware and software (GPU name, driver, runtime), in a fixed order.
  virtual std::vector<std::pair<std::string, std::string>> describe() const = 0;
  virtual bool supports(Mode mode) const = 0;

  // Bytes in use now, as the device reports them
  // (CUDA: cudaMemGetInfo's total - free; host: the usable size of the live mallocs).
  virtual uint64_t used_bytes() = 0;

  virtual void begin_mode(Mode mode) = 0;
  virtual AllocatorHighWater end_mode(Mode mode) = 0;  // after every allocation of the mode is released

  // `what` names the allocation in error messages. Zero-byte requests are never made.
  virtual void* allocate(uint64_t bytes, Mode mode, const std::string& what) = 0;
  virtual void release(void* ptr, Mode mode) = 0;

  // Writes pattern bytes for positions [position, position + bytes) of buffer `id` to ptr[0, bytes).
  // (ptr - position) must be 4-byte aligned: allocations start aligned and positions are arena offsets.
  virtual void fill(void* ptr, uint64_t position, uint64_t bytes, uint32_t id) = 0;
  virtual std::optional<Mismatch> verify(const void* ptr, uint64_t position, uint64_t bytes, uint32_t id) = 0;
};

}  // namespace memplan::validate
