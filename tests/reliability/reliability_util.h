// Shared by the reliability tests: temp dirs, small ONNX models built in code, and running the memplan
// binary as a child with a time limit while measuring its peak RSS.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace memplan::reliability {

// A fresh directory under /tmp, removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);

// A float32 value_info with a fixed shape.
onnx::ValueInfoProto tensor_value(const std::string& name, const std::vector<int64_t>& shape,
                                  int32_t elem_type = onnx::TensorProto::FLOAT);

// x -> Relu -> ... -> Relu -> y: `nodes` Relu nodes over a tensor of `shape`, opset 17.
onnx::ModelProto relu_chain(int nodes, const std::vector<int64_t>& shape);

// Serializes or fails the test's assumption loudly.
std::string serialize(const onnx::ModelProto& model);

struct ChildResult {
  int exit_code = -1;        // -1 when killed by a signal or the time limit
  int signal = 0;            // the signal that ended it, 0 if it exited
  bool timed_out = false;
  int64_t max_rss_kib = 0;   // the child's peak resident set (getrusage ru_maxrss)
  double seconds = 0;
  std::string out, err;
};

// Runs $MEMPLAN_BIN with `args`, killing it after `timeout_s`. Skips the calling test (GTEST_SKIP is not
// usable here, so callers check memplan_binary().empty()) when the binary is not known.
std::string memplan_binary();
ChildResult run_memplan(const std::vector<std::string>& args, double timeout_s);

// True under the ASan+UBSan run of scripts/test.sh (MEMPLAN_SANITIZED=1): time and RSS bounds are scaled.
bool sanitized();

}  // namespace memplan::reliability
