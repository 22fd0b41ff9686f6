#include "tests/import/import_test_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "onnx/defs/parser.h"

namespace memplan::testing {
namespace fs = std::filesystem;

onnx::ModelProto parse_text_model(const std::string& text) {
  onnx::ModelProto model;
  const onnx::Status status = onnx::OnnxParser::Parse(model, text.c_str());
  if (!status.IsOK()) throw std::runtime_error("ONNX text does not parse: " + status.ErrorMessage());
  return model;
}

onnx::ModelProto load_text_fixture(const std::string& file_name) {
  const fs::path path = fs::path(MEMPLAN_IMPORT_MODELS_DIR) / file_name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  return parse_text_model(text.str());
}

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "memplan-import-test-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

std::string TempDir::write(const std::string& name, const std::string& bytes) const {
  const fs::path p = path_ / name;
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
  return p.string();
}

std::string TempDir::write(const std::string& name, const onnx::ModelProto& model) const {
  return write(name, model.SerializeAsString());
}

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

RunResult run_memplan(const std::vector<std::string>& args) {
  const char* bin = std::getenv("MEMPLAN_BIN");
  if (!bin || !*bin) throw std::runtime_error("MEMPLAN_BIN is not set (tests/CMakeLists.txt sets it under ctest)");
  TempDir capture;
  const std::string out_path = (capture.path() / "stdout").string();
  const std::string err_path = (capture.path() / "stderr").string();
  std::vector<std::string> argv_storage = {bin};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(127);
    ::execv(bin, argv.data());
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) throw std::runtime_error("waitpid failed");
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_all(out_path);
  r.err = read_all(err_path);
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace memplan::testing
