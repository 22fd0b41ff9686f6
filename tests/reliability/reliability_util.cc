#include "tests/reliability/reliability_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

namespace memplan::reliability {

TempDir::TempDir() {
  std::string pattern = "/tmp/memplan-reliability-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

onnx::ValueInfoProto tensor_value(const std::string& name, const std::vector<int64_t>& shape, int32_t elem_type) {
  onnx::ValueInfoProto v;
  v.set_name(name);
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  auto* s = t->mutable_shape();
  for (int64_t d : shape) s->add_dim()->set_dim_value(d);
  return v;
}

onnx::ModelProto relu_chain(int nodes, const std::vector<int64_t>& shape) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("memplan-reliability");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("chain");
  *g->add_input() = tensor_value("x", shape);
  std::string prev = "x";
  for (int i = 0; i < nodes; ++i) {
    auto* n = g->add_node();
    n->set_op_type("Relu");
    n->set_name("relu" + std::to_string(i));
    n->add_input(prev);
    prev = i + 1 == nodes ? "y" : "t" + std::to_string(i);
    n->add_output(prev);
  }
  *g->add_output() = tensor_value("y", shape);
  return m;
}

std::string serialize(const onnx::ModelProto& model) {
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw std::runtime_error("cannot serialize the test model");
  return bytes;
}

std::string memplan_binary() {
  const char* bin = std::getenv("MEMPLAN_BIN");
  return bin ? bin : "";
}

bool sanitized() {
  const char* s = std::getenv("MEMPLAN_SANITIZED");
  return s && std::string(s) == "1";
}

ChildResult run_memplan(const std::vector<std::string>& args, double timeout_s) {
  ChildResult result;
  char out_path[] = "/tmp/memplan-child-out-XXXXXX";
  char err_path[] = "/tmp/memplan-child-err-XXXXXX";
  const int out_fd = ::mkstemp(out_path), err_fd = ::mkstemp(err_path);
  const std::string bin = memplan_binary();
  std::vector<std::string> argv_strings{bin};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  for (;;) {
    const pid_t done = ::wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      ::wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.max_rss_kib = usage.ru_maxrss;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  ::close(out_fd);
  ::close(err_fd);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  ::unlink(out_path);
  ::unlink(err_path);
  return result;
}

}  // namespace memplan::reliability
