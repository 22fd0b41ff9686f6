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

// ceil(a / b) for b > 0, which cannot overflow (triton.cdiv; torch's c10::ceil_div rounds the same way).
inline uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// A size the importer has checked is not negative, as an operand of the unsigned byte arithmetic above.
inline uint64_t u64(int64_t v) { return static_cast<uint64_t>(v); }

// The least power of two not below v (1 for 0 and 1): triton.next_power_of_2.
inline uint64_t next_power_of_2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Rounds n up to a multiple of m (m > 0), overflow-checked.
inline uint64_t round_up(uint64_t n, uint64_t m) {
  uint64_t r = n % m;
  return r == 0 ? n : checked_add(n, m - r);
}

}  // namespace memplan
