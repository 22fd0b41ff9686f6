// Errors that cross library boundaries. Each carries the exit code the CLI returns for it (docs/exit-codes.md).
#pragma once

#include <stdexcept>
#include <string>

#include "onnx_import/utf8.h"

namespace memplan {

enum ExitCode : int {
  kExitOk = 0,
  kExitLimitExceeded = 1,  // check: a budget or regression limit is broken; fit: nothing fits
  kExitBadInput = 2,       // bad usage, unreadable or invalid model, unbound dimension, overflow
  kExitInternal = 3,       // a bug in memplan: an invariant failed
};

// The message is valid UTF-8 whatever the names it quotes hold: invalid bytes become \xNN (onnx_import/utf8.h),
// here, where every message is built, so the CLI's stderr and Python's exceptions can always be decoded.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, int exit_code = kExitBadInput)
      : std::runtime_error(escape_invalid_utf8(msg)), code_(exit_code) {}
  int exit_code() const { return code_; }

 private:
  int code_;
};

// The model or the user's arguments are wrong (exit 2).
class InputError : public Error {
 public:
  explicit InputError(const std::string& msg) : Error(msg, kExitBadInput) {}
};

// A product of dimensions or bytes does not fit in 64 bits (exit 2).
class ShapeOverflow : public InputError {
 public:
  explicit ShapeOverflow(const std::string& msg) : InputError(msg) {}
};

// An internal invariant failed (exit 3).
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& msg) : Error(msg, kExitInternal) {}
};

// What a caller guarantees: options that report/option_checks.cc has already refused (a value out of range, a
// combination the matrix refuses) reaching a cost model are a bug, not bad input.
inline void precondition(bool holds, const std::string& what) {
  if (!holds) throw InternalError("options not validated before the cost model: " + what);
}

}  // namespace memplan
