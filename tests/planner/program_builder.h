// Small programs for tests, written one line per buffer and per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/program.h"

namespace memplan::testing {

struct BufferSpec {
  bool resident = false;
  bool live_at_start = false;
  bool live_at_end = false;
  Category category = Category::Activation;
};

class ProgramBuilder {
 public:
  int32_t buffer(const std::string& name, uint64_t bytes, BufferSpec spec = {}) {
    Buffer b;
    b.name = name;
    b.bytes = bytes;
    b.resident = spec.resident;
    b.live_at_start = spec.live_at_start;
    b.live_at_end = spec.live_at_end;
    b.category = spec.category;
    program_.buffers.push_back(b);
    return static_cast<int32_t>(program_.buffers.size()) - 1;
  }
  int32_t step(const std::string& name, std::vector<int32_t> reads, std::vector<int32_t> writes) {
    Step s;
    s.name = name;
    s.op = "Op";
    s.reads = std::move(reads);
    s.writes = std::move(writes);
    program_.steps.push_back(s);
    return static_cast<int32_t>(program_.steps.size()) - 1;
  }
  const Program& program() const { return program_; }

 private:
  Program program_;
};

inline constexpr BufferSpec kResident{.resident = true, .category = Category::Weight};
inline constexpr BufferSpec kInput{.live_at_start = true};
inline constexpr BufferSpec kOutput{.live_at_end = true};

inline constexpr uint64_t KiB = 1024;
inline constexpr uint64_t MiB = 1024 * 1024;

}  // namespace memplan::testing
