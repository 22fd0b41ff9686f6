// The one way a cost model adds buffers to the program it emits (the planner measures the program; the
// cost model never does).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "planner/program.h"

namespace memplan {

class ProgramWriter {
 public:
  explicit ProgramWriter(Program& program) : program_(program) {}

  int32_t new_buffer(std::string name, uint64_t bytes, Category category) {
    Buffer b;
    b.name = std::move(name);
    b.bytes = bytes;
    b.category = category;
    program_.buffers.push_back(std::move(b));
    return static_cast<int32_t>(program_.buffers.size() - 1);
  }

  // A library workspace created at its first use and kept to the end (PyTorch's per-handle cuBLAS
  // workspace, CublasHandlePool.cpp): `workspace` is -1 until then.
  void touch_workspace(int32_t& workspace, std::string name, uint64_t bytes, Step& step) {
    if (workspace >= 0) return;
    workspace = new_buffer(std::move(name), bytes, Category::Workspace);
    program_.buffers[workspace].live_at_end = true;
    step.writes.push_back(workspace);
  }

  Buffer& buffer(int32_t b) { return program_.buffers[b]; }
  Program& program() { return program_; }
  const Program& program() const { return program_; }

 private:
  Program& program_;
};

// Appends buffer `b` unless it is -1 or already listed.
inline void add_unique(std::vector<int32_t>& v, int32_t b) {
  if (b >= 0 && std::find(v.begin(), v.end(), b) == v.end()) v.push_back(b);
}

}  // namespace memplan
