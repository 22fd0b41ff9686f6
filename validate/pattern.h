// The fill pattern of the overlap check. Byte `position` of buffer `id` holds byte (position % 4) of
// pattern_word(id, position / 4). Positions are arena offsets in arena mode, so a byte read anywhere in the
// arena can be attributed to the buffer that wrote it: the buffer whose pattern matches the bytes found.
// Shared by the CPU loop and the CUDA kernels, hence host+device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MEMPLAN_HOST_DEVICE __host__ __device__
#else
#define MEMPLAN_HOST_DEVICE
#endif

namespace memplan::validate {

// MurmurHash3's 32-bit finalizer: every input bit flips each output bit with probability about 1/2, so two
// buffers agree on a given word with probability 2^-32.
MEMPLAN_HOST_DEVICE inline uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

MEMPLAN_HOST_DEVICE inline uint32_t pattern_word(uint32_t id, uint64_t word_index) {
  const uint32_t lo = static_cast<uint32_t>(word_index);
  const uint32_t hi = static_cast<uint32_t>(word_index >> 32);
  return mix32(mix32(id * 0x9e3779b9u + 0x7f4a7c15u) ^ mix32(lo) ^ mix32(hi + 0x165667b1u) * 3u);
}

MEMPLAN_HOST_DEVICE inline uint8_t pattern_byte(uint32_t id, uint64_t position) {
  return static_cast<uint8_t>(pattern_word(id, position / 4) >> (8 * (position % 4)));
}

}  // namespace memplan::validate
