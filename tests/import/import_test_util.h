// Helpers shared by the importer tests: ONNX text fixtures, temporary files, running the memplan binary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace memplan::testing {

// Parses a model in ONNX's text syntax (onnx/defs/parser.h); throws std::runtime_error when it does not parse.
onnx::ModelProto parse_text_model(const std::string& text);

// Parses tests/import/models/<file_name>.
onnx::ModelProto load_text_fixture(const std::string& file_name);

// A fresh directory under the system temp directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string write(const std::string& name, const std::string& bytes) const;   // returns the file's path
  std::string write(const std::string& name, const onnx::ModelProto& model) const;

 private:
  std::filesystem::path path_;
};

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs $MEMPLAN_BIN (set by tests/CMakeLists.txt's MEMPLAN_TEST_ENV) with `args`, capturing its output.
RunResult run_memplan(const std::vector<std::string>& args);

// True when `text` contains `part`; for readable EXPECT_TRUE(contains(...)) << text failures.
bool contains(const std::string& text, const std::string& part);

}  // namespace memplan::testing
