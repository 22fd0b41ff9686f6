// Hostile paths and names (docs/limits.md): external-data locations are never opened, whatever they name
// (../../etc/passwd, an absolute path, a FIFO that would block whoever opens it), nothing memplan reads is
// written to, and names that are not UTF-8 do not turn a model into an internal error.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "onnx_import/utf8.h"
#include "tests/reliability/reliability_util.h"

namespace memplan::reliability {
namespace {

// y = Add(x, w) where w (float32 [4]) lives in external data at `location`.
onnx::ModelProto external_weight_model(const std::string& location) {
  onnx::ModelProto m = relu_chain(0, {});
  auto* g = m.mutable_graph();
  g->clear_input();
  g->clear_output();
  *g->add_input() = tensor_value("x", {4});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* entry = w->add_external_data();
  entry->set_key("location");
  entry->set_value(location);
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input("w");
  add->add_output("y");
  *g->add_output() = tensor_value("y", {4});
  return m;
}

bool strace_works() {
  return std::system("strace -f -o /dev/null true >/dev/null 2>&1") == 0;
}

// The files a memplan command opens, as strace sees them ("" when strace is unavailable).
std::string opened_files(const std::vector<std::string>& args) {
  TempDir dir;
  std::string cmd = "strace -f -qq -e trace=open,openat,openat2,creat -o " + dir.file("trace") + " " + memplan_binary();
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) == -1) return "";
  return read_file(dir.file("trace"));
}

class HostileExternalData : public ::testing::TestWithParam<std::string> {};

TEST_P(HostileExternalData, LocationIsNeverOpened) {
  if (memplan_binary().empty()) GTEST_SKIP() << "MEMPLAN_BIN not set";
  TempDir dir;
  // A FIFO blocks open() until a writer comes: a memplan that followed the location would hang here.
  const std::string fifo = dir.file("weights.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string location = GetParam();
  if (location == "<absolute fifo>") location = fifo;
  const std::string model = dir.file("model.onnx");
  write_file(model, serialize(external_weight_model(location)));

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", model, "--json"}, std::vector<std::string>{"estimate", model}}) {
    const ChildResult r = run_memplan(args, 30);
    EXPECT_FALSE(r.timed_out) << args[0] << " blocked: it opened the FIFO named by the external-data location";
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
  }
  if (!strace_works()) GTEST_SKIP() << "strace unavailable: checked by the FIFO only";
  const std::string trace = opened_files({"inspect", model});
  ASSERT_NE(trace.find("model.onnx"), std::string::npos) << "strace saw no open of the model itself:\n" << trace;
  EXPECT_EQ(trace.find("passwd"), std::string::npos) << trace;
  EXPECT_EQ(trace.find("weights."), std::string::npos) << trace;
}

INSTANTIATE_TEST_SUITE_P(Locations, HostileExternalData,
                         ::testing::Values("../../etc/passwd", "/etc/passwd", "<absolute fifo>", "weights.fifo",
                                           "../../../../../../../../../../etc/passwd"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return "case" + std::to_string(info.index);
                         });

struct FileState {
  std::string bytes;
  int64_t mtime_ns = 0;
  bool operator==(const FileState&) const = default;
};

FileState state_of(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return {read_file(path), static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

TEST(ReadOnly, NothingMemplanReadsIsWritten) {
  if (memplan_binary().empty()) GTEST_SKIP() << "MEMPLAN_BIN not set";
  TempDir dir;
  const std::string model = dir.file("model.onnx");
  const std::string data = dir.file("weights.bin");
  write_file(model, serialize(external_weight_model("weights.bin")));
  write_file(data, std::string(16, '\x01'));  // 4 float32 values
  ::chmod(model.c_str(), 0644);
  const FileState model_before = state_of(model), data_before = state_of(data);
  std::filesystem::create_directory(dir.file("out"));
  const std::string plan = dir.file("out/plan.json");

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", model}, std::vector<std::string>{"inspect", model, "--json"},
        std::vector<std::string>{"estimate", model, "--runtime", "pytorch"},
        std::vector<std::string>{"plan", model, "-o", plan}}) {
    const ChildResult r = run_memplan(args, 30);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
  }
  EXPECT_TRUE(state_of(model) == model_before) << "the model file changed";
  EXPECT_TRUE(state_of(data) == data_before) << "the external data file changed";
  // The only new file is the plan that was asked for.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path()))
    names.push_back(e.path().lexically_relative(dir.path()).string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"model.onnx", "out", "out/plan.json", "weights.bin"}));
}

// DISABLED: open finding. nlohmann::json::dump throws type_error 316 on these names, so inspect --json,
// estimate --json and plan exit 3 ("internal error"). Fix: dump with error_handler_t::replace in
// cli/inspect.cc, cli/estimate.cc and planner/plan_json.cc (bench/fuzz.md), then enable this test.
TEST(HostileNames, NamesThatAreNotUtf8AreNotInternalErrors) {
  if (memplan_binary().empty()) GTEST_SKIP() << "MEMPLAN_BIN not set";
  TempDir dir;
  // ONNX strings are proto2 `string`s, which protobuf does not check for UTF-8; JSON output must still be
  // produced (or the model refused with exit 2), never a crash or exit 3.
  onnx::ModelProto m = relu_chain(2, {1, 4});
  m.mutable_graph()->mutable_node(0)->set_output(0, "t\xff\xfe");
  m.mutable_graph()->mutable_node(1)->set_input(0, "t\xff\xfe");
  m.mutable_graph()->mutable_node(1)->set_name("relu\xc3");
  m.set_producer_name("\xe2\x82");
  const std::string model = dir.file("names.onnx");
  write_file(model, serialize(m));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", model, "--json"}, std::vector<std::string>{"inspect", model},
        std::vector<std::string>{"estimate", model, "--json"},
        std::vector<std::string>{"plan", model, "-o", dir.file("plan.json")}}) {
    const ChildResult r = run_memplan(args, 30);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 2) << args[0] << " exited " << r.exit_code << ": " << r.err;
  }
}

// Expected strings written by hand from RFC 3629's table of well-formed byte sequences (section 4).
TEST(HostileNames, InvalidUtf8BytesAreEscapedAndValidTextIsKept) {
  EXPECT_EQ(escape_invalid_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(escape_invalid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(escape_invalid_utf8("t\xff\xfe"), "t\\xff\\xfe");
  EXPECT_EQ(escape_invalid_utf8("relu\xc3"), "relu\\xc3");                 // cut short at the end
  EXPECT_EQ(escape_invalid_utf8("\xe2\x82"), "\\xe2\\x82");                 // cut short: both bytes
  EXPECT_EQ(escape_invalid_utf8("\xc0\xaf"), "\\xc0\\xaf");                 // overlong '/'
  EXPECT_EQ(escape_invalid_utf8("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");        // overlong, 3 bytes
  EXPECT_EQ(escape_invalid_utf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");        // U+D800, a surrogate
  EXPECT_EQ(escape_invalid_utf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(escape_invalid_utf8("\xc3(a"), "\\xc3(a");                      // a lead byte, then no continuation
  EXPECT_EQ(InputError("tensor 'x\xff'").what(), std::string("tensor 'x\\xff'"));  // every message is escaped
}

// A model error that quotes a name holding invalid UTF-8: the CLI's message names it with the bad bytes escaped,
// and what the CLI prints (the error, an estimate table) holds no invalid byte.
TEST(HostileNames, MessagesAndTablesQuoteInvalidNamesEscaped) {
  if (memplan_binary().empty()) GTEST_SKIP() << "MEMPLAN_BIN not set";
  TempDir dir;
  onnx::ModelProto m = relu_chain(2, {1, 4});
  m.mutable_graph()->mutable_node(1)->set_input(0, "t\xff\xfe");  // produced by nothing
  const std::string model = dir.file("dangling.onnx");
  write_file(model, serialize(m));
  const ChildResult r = run_memplan({"estimate", model}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("t\\xff\\xfe"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("\xff"), std::string::npos) << "a raw invalid byte reached stderr";

  onnx::ModelProto names = relu_chain(2, {1, 4});
  names.mutable_graph()->mutable_node(0)->set_output(0, "t\xff\xfe");
  names.mutable_graph()->mutable_node(1)->set_input(0, "t\xff\xfe");
  const std::string named = dir.file("names.onnx");
  write_file(named, serialize(names));
  const ChildResult t = run_memplan({"estimate", named}, 30);  // the table lists the tensors live at the peak
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("t\\xff\\xfe"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("\xff"), std::string::npos) << "a raw invalid byte reached stdout";
}

}  // namespace
}  // namespace memplan::reliability
