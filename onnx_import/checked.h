// Overflow-checked unsigned byte arithmetic (as bloaty's CheckedAdd/CheckedMul, ORT's SafeInt).
#pragma once

#include <cstdint>
#include <string>

#include "onnx_import/errors.h"

namespace memplan {

inline uint64_t checked_add(uint64_t a, uint64_t b, const char* what = "byte count") {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw ShapeOverflow(std::string(what) + " overflows 64 bits");
  return r;
}

inline uint64_t checked_mul(uint64_t a, uint64_t b, const char* what = "byte count") {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw ShapeOverflow(std::string(what) + " overflows 64 bits");
  return r;
}

// Rounds n up to a multiple of m (m > 0), overflow-checked.
inline uint64_t round_up(uint64_t n, uint64_t m) {
  uint64_t r = n % m;
  return r == 0 ? n : checked_add(n, m - r);
}

}  // namespace memplan
