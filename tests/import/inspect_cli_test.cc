// `memplan inspect`, run as a user runs it: exit codes, the human report, the JSON keys and values
// (docs/inspect-json.md), deterministic output, and the model file left untouched.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/import/import_test_util.h"

namespace memplan {
namespace {

using testing::contains;
using testing::load_text_fixture;
using testing::run_memplan;
using testing::RunResult;
using testing::TempDir;
using Json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Expects a clean bad-input failure: exit 2, one "memplan: error:" message containing each of `parts`.
void expect_bad_input(const RunResult& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "memplan: error:") || contains(r.err, "--")) << r.err;
  EXPECT_FALSE(contains(r.err, "internal error")) << r.err;
  for (const std::string& part : parts) EXPECT_TRUE(contains(r.err, part)) << r.err << "\n  lacks: " << part;
}

TEST(InspectCli, HelpExitsZero) {
  const RunResult r = run_memplan({"inspect", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "--batch")) << r.out;
  EXPECT_TRUE(contains(r.out, "--json")) << r.out;
}

TEST(InspectCli, JsonKeysAndValues) {
  TempDir dir;
  const std::string path = dir.write("conv_bn.onnx", load_text_fixture("conv_bn.txt"));
  const RunResult r = run_memplan({"inspect", path, "--batch", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);

  EXPECT_EQ(j["schema"], "memplan.inspect/1");
  for (const char* key : {"model", "producer", "ir_version", "opsets", "node_count", "op_histogram", "parameters",
                          "buffers", "inputs", "outputs", "tensors", "warnings"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["model"], path);
  EXPECT_EQ(j["producer"], "memplan-tests 1.0");
  EXPECT_EQ(j["ir_version"], 8);
  EXPECT_EQ(j["opsets"]["ai.onnx"], 17);
  EXPECT_EQ(j["node_count"], 6);
  EXPECT_EQ(j["op_histogram"]["Conv"], 1);
  EXPECT_EQ(j["op_histogram"]["Constant"], 1);
  // Hand counts (see import_model_test.cc): 84 trainable elements in 336 bytes; buffers are BN mean/var,
  // the int64[2] Reshape target and the Constant's float[1]: 11 elements in 52 bytes.
  EXPECT_EQ(j["parameters"]["count"], 84);
  EXPECT_EQ(j["parameters"]["bytes"], 336);
  EXPECT_EQ(j["buffers"]["count"], 11);
  EXPECT_EQ(j["buffers"]["bytes"], 52);
  EXPECT_EQ(j["bound_dims"]["batch"], 2);

  ASSERT_EQ(j["inputs"].size(), 1u);
  EXPECT_EQ(j["inputs"][0]["name"], "x");
  EXPECT_EQ(j["inputs"][0]["shape"], Json::parse("[2, 2, 5, 5]"));
  EXPECT_EQ(j["outputs"][0]["shape"], Json::parse("[2, 36]"));

  std::map<std::string, Json> tensors;
  for (const Json& t : j["tensors"]) {
    for (const char* key : {"name", "dtype", "shape", "kind"}) EXPECT_TRUE(t.contains(key)) << t.dump();
    tensors[t["name"]] = t;
  }
  EXPECT_EQ(tensors.size(), 14u);  // x, 7 initializers, c, n, r, half, s, y
  EXPECT_EQ(tensors["x"]["kind"], "input");
  EXPECT_EQ(tensors["conv_w"]["kind"], "weight");
  EXPECT_EQ(tensors["conv_w"]["dtype"], "float32");
  EXPECT_EQ(tensors["conv_w"]["shape"], Json::parse("[4, 2, 3, 3]"));
  EXPECT_EQ(tensors["bn_mean"]["kind"], "weight");
  EXPECT_EQ(tensors["new_shape"]["kind"], "constant");
  EXPECT_EQ(tensors["new_shape"]["dtype"], "int64");
  EXPECT_EQ(tensors["half"]["kind"], "constant");
  EXPECT_EQ(tensors["c"]["kind"], "activation");
  EXPECT_EQ(tensors["c"]["shape"], Json::parse("[2, 4, 3, 3]"));
  EXPECT_EQ(tensors["y"]["kind"], "output");
}

TEST(InspectCli, JsonIsDeterministic) {
  TempDir dir;
  const std::string path = dir.write("conv_bn.onnx", load_text_fixture("conv_bn.txt"));
  const RunResult a = run_memplan({"inspect", path, "--batch", "3", "--json"});
  const RunResult b = run_memplan({"inspect", path, "--batch", "3", "--json"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(InspectCli, HumanReport) {
  TempDir dir;
  const std::string path = dir.write("conv_bn.onnx", load_text_fixture("conv_bn.txt"));
  const RunResult r = run_memplan({"inspect", path, "--dim", "batch=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"memplan-tests 1.0", "IR version", "ai.onnx 17", "BatchNormalization", "Parameters",
                           "84 elements", "336 B", "Buffers", "11 elements", "in Constant nodes", "[4, 2, 5, 5]",
                           "[4, 36]", "batch=4"})
    EXPECT_TRUE(contains(r.out, part)) << r.out << "\n  lacks: " << part;
}

TEST(InspectCli, InputFlagFixesAWholeShape) {
  TempDir dir;
  const std::string path = dir.write("gemm.onnx", load_text_fixture("gemm.txt"));
  const RunResult r = run_memplan({"inspect", path, "--input", "x=7x3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["outputs"][0]["shape"], Json::parse("[7, 4]"));
}

TEST(InspectCli, UnboundDimensionShowsWhatIsKnownThenFails) {
  TempDir dir;
  const std::string path = dir.write("conv_bn.onnx", load_text_fixture("conv_bn.txt"));
  const RunResult r = run_memplan({"inspect", path});
  expect_bad_input(r, {path, "batch", "--dim"});
  // What the file declares is still shown: producer, op counts, parameters, the symbolic input shape.
  for (const char* part : {"memplan-tests 1.0", "Conv", "84 elements", "[batch, 2, 5, 5]"})
    EXPECT_TRUE(contains(r.out, part)) << r.out << "\n  lacks: " << part;
}

TEST(InspectCli, UnboundDimensionWithJsonPrintsNoPartialDocument) {
  TempDir dir;
  const RunResult r = run_memplan({"inspect", dir.write("gemm.onnx", load_text_fixture("gemm.txt")), "--json"});
  expect_bad_input(r, {"N"});
  EXPECT_EQ(r.out, "");
}

TEST(InspectCli, MalformedFlagValues) {
  TempDir dir;
  const std::string path = dir.write("gemm.onnx", load_text_fixture("gemm.txt"));
  expect_bad_input(run_memplan({"inspect", path, "--input", "x=2xa"}), {"--input", "x=2xa"});
  expect_bad_input(run_memplan({"inspect", path, "--dim", "N"}), {"--dim"});
  expect_bad_input(run_memplan({"inspect", path, "--dim", "N=-1"}), {"--dim"});
  EXPECT_EQ(run_memplan({"inspect", path, "--batch", "-4"}).exit_code, 2);
  EXPECT_EQ(run_memplan({"inspect"}).exit_code, 2);  // MODEL is required
}

TEST(InspectCli, BadFilesExitTwo) {
  TempDir dir;
  expect_bad_input(run_memplan({"inspect", "/nonexistent-memplan/m.onnx"}), {"/nonexistent-memplan/m.onnx"});
  expect_bad_input(run_memplan({"inspect", dir.path().string()}), {"is a directory"});
  expect_bad_input(run_memplan({"inspect", dir.write("empty.onnx", "")}), {"empty"});
  expect_bad_input(run_memplan({"inspect", dir.write("text.onnx", "this is not a model\n")}), {"text.onnx"});
  const std::string dup = dir.write("dup.onnx", load_text_fixture("duplicate_output.txt"));
  expect_bad_input(run_memplan({"inspect", dup}), {dup, "'t'"});
}

TEST(InspectCli, ModelFileIsLeftUntouched) {
  TempDir dir;
  const std::string path = dir.write("conv_bn.onnx", load_text_fixture("conv_bn.txt"));
  struct stat before {}, after {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  const std::string bytes_before = read_file(path);
  ASSERT_EQ(run_memplan({"inspect", path, "--batch", "2", "--json"}).exit_code, 0);
  ASSERT_EQ(run_memplan({"inspect", path}).exit_code, 2);
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(read_file(path), bytes_before);
  EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  EXPECT_EQ(before.st_size, after.st_size);
}

}  // namespace
}  // namespace memplan
