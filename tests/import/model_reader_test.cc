// read_model_file(): weights are skipped without being read, everything else is kept, and bad files get
// one InputError naming the file.
#include "onnx_import/model_reader.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include "onnx_import/errors.h"
#include "tests/import/import_test_util.h"

namespace memplan {
namespace {

using testing::contains;
using testing::parse_text_model;
using testing::TempDir;

constexpr const char* kGemm = R"(
<ir_version: 8, opset_import: ["" : 17], producer_name: "memplan-tests">
gemm (float[N, 3] x) => (float[N, 4] y)
<float[3,4] w = {1,2,3,4,5,6,7,8,9,10,11,12}, float[4] b = {1,2,3,4}>
{
  y = Gemm(x, w, b)
}
)";

onnx::TensorProto* add_initializer(onnx::ModelProto& m, const std::string& name, int32_t data_type,
                                   std::vector<int64_t> dims) {
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(data_type);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

const onnx::TensorProto& initializer(const onnx::ModelProto& m, const std::string& name) {
  for (const onnx::TensorProto& t : m.graph().initializer())
    if (t.name() == name) return t;
  throw std::runtime_error("no initializer " + name);
}

// Expects read_model_file(path) to throw InputError whose message contains each of `parts`.
void expect_input_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    read_model_file(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const InputError& e) {
    for (const std::string& part : parts) EXPECT_TRUE(contains(e.what(), part)) << e.what() << "\n  lacks: " << part;
    EXPECT_EQ(e.exit_code(), kExitBadInput);
  }
}

TEST(ModelReader, DropsLargeFloatPayloadButKeepsDimsAndDtype) {
  TempDir dir;
  onnx::ModelProto m = parse_text_model(kGemm);
  // 256 x 1024 float32 = 1 MiB of raw_data.
  add_initializer(m, "big", onnx::TensorProto::FLOAT, {256, 1024})->set_raw_data(std::string(1 << 20, '\x01'));
  const std::string path = dir.write("big.onnx", m);

  const ReadModel r = read_model_file(path);
  EXPECT_EQ(r.file_bytes, m.ByteSizeLong());
  EXPECT_LT(r.proto.ByteSizeLong(), 4096u);  // the model without its megabyte
  EXPECT_GE(r.dropped_payload_bytes, 1u << 20);
  const onnx::TensorProto& big = initializer(r.proto, "big");
  EXPECT_EQ(big.data_type(), onnx::TensorProto::FLOAT);
  ASSERT_EQ(big.dims_size(), 2);
  EXPECT_EQ(big.dims(0), 256);
  EXPECT_EQ(big.dims(1), 1024);
  EXPECT_TRUE(big.raw_data().empty());
  EXPECT_EQ(big.data_location(), onnx::TensorProto::EXTERNAL);  // values unknown to later stages
  // The small float tensors (12 and 4 values, under 256 bytes) keep their values.
  EXPECT_EQ(initializer(r.proto, "w").float_data_size(), 12);
  EXPECT_EQ(initializer(r.proto, "b").float_data_size(), 4);
  EXPECT_EQ(initializer(r.proto, "b").data_location(), onnx::TensorProto::DEFAULT);
  EXPECT_EQ(r.proto.graph().node_size(), 1);
  EXPECT_EQ(r.proto.producer_name(), "memplan-tests");
}

TEST(ModelReader, KeepsPayloadsUpToTheDocumentedLimits) {
  TempDir dir;
  onnx::ModelProto m = parse_text_model(kGemm);
  // int64: 8192 values = 65536 bytes = kKeptIntegerPayloadBytes is kept; 8193 values are dropped.
  add_initializer(m, "int_kept", onnx::TensorProto::INT64, {8192})->set_raw_data(std::string(8192 * 8, '\0'));
  add_initializer(m, "int_dropped", onnx::TensorProto::INT64, {8193})->set_raw_data(std::string(8193 * 8, '\0'));
  // float: 64 values in packed float_data = 256 bytes = kKeptOtherPayloadBytes is kept; 65 are dropped.
  onnx::TensorProto* fk = add_initializer(m, "float_kept", onnx::TensorProto::FLOAT, {64});
  for (int i = 0; i < 64; ++i) fk->add_float_data(static_cast<float>(i));
  onnx::TensorProto* fd = add_initializer(m, "float_dropped", onnx::TensorProto::FLOAT, {65});
  for (int i = 0; i < 65; ++i) fd->add_float_data(static_cast<float>(i));
  const ReadModel r = read_model_file(dir.write("limits.onnx", m));

  EXPECT_EQ(initializer(r.proto, "int_kept").raw_data().size(), 8192u * 8);
  EXPECT_TRUE(initializer(r.proto, "int_dropped").raw_data().empty());
  EXPECT_EQ(initializer(r.proto, "int_dropped").data_location(), onnx::TensorProto::EXTERNAL);
  EXPECT_EQ(initializer(r.proto, "float_kept").float_data_size(), 64);
  EXPECT_EQ(initializer(r.proto, "float_dropped").float_data_size(), 0);
  EXPECT_EQ(initializer(r.proto, "float_dropped").dims(0), 65);
}

TEST(ModelReader, DropsPayloadsInConstantNodesAndSubgraphs) {
  TempDir dir;
  onnx::ModelProto m = parse_text_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (bool c) => (float[1000] y) {
  y = If(c) <then_branch = then () => (float[1000] a) { a = Constant<value = float[1000] {0}>() },
             else_branch = else () => (float[1000] b) { b = Constant<value = float[1000] {0}>() }>
}
)");
  // Fill the branches' Constant tensors with 4000 bytes each, and add a top-level Constant of 4000 bytes.
  for (auto* branch : {m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g(),
                       m.mutable_graph()->mutable_node(0)->mutable_attribute(1)->mutable_g()}) {
    onnx::TensorProto* t = branch->mutable_node(0)->mutable_attribute(0)->mutable_t();
    t->clear_float_data();
    t->set_raw_data(std::string(4000, '\x02'));
  }
  onnx::NodeProto* top = m.mutable_graph()->add_node();
  top->set_op_type("Constant");
  top->add_output("k");
  onnx::AttributeProto* value = top->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  value->mutable_t()->add_dims(1000);
  value->mutable_t()->set_raw_data(std::string(4000, '\x03'));

  const ReadModel r = read_model_file(dir.write("constants.onnx", m));
  EXPECT_EQ(r.dropped_payload_bytes, 3u * 4000);
  const onnx::GraphProto& then_branch = r.proto.graph().node(0).attribute(0).g();
  const onnx::TensorProto& t = then_branch.node(0).attribute(0).t();
  EXPECT_TRUE(t.raw_data().empty());
  EXPECT_EQ(t.dims(0), 1000);
  EXPECT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL);
  EXPECT_TRUE(r.proto.graph().node(1).attribute(0).t().raw_data().empty());
  EXPECT_LT(r.proto.ByteSizeLong(), 1024u);
}

TEST(ModelReader, ExternalDataLocationsAreKeptButNeverOpened) {
  TempDir dir;
  onnx::ModelProto m = parse_text_model(kGemm);
  // Hostile locations: if the reader opened them it would read a system file or fail on a missing one.
  for (const std::string& location : {std::string("../../etc/passwd"), std::string("/nonexistent-memplan/w.bin")}) {
    onnx::TensorProto* t = add_initializer(m, "ext" + std::to_string(m.graph().initializer_size()),
                                           onnx::TensorProto::FLOAT, {1024, 1024});
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    onnx::StringStringEntryProto* e = t->add_external_data();
    e->set_key("location");
    e->set_value(location);
  }
  const ReadModel r = read_model_file(dir.write("external.onnx", m));
  EXPECT_EQ(r.dropped_payload_bytes, 0u);
  EXPECT_EQ(initializer(r.proto, "ext2").external_data(0).value(), "../../etc/passwd");
  EXPECT_EQ(initializer(r.proto, "ext3").external_data(0).value(), "/nonexistent-memplan/w.bin");
  EXPECT_EQ(initializer(r.proto, "ext3").dims(0), 1024);
}

TEST(ModelReader, MissingFile) {
  expect_input_error("/nonexistent-memplan/model.onnx", {"/nonexistent-memplan/model.onnx", "No such file"});
}

TEST(ModelReader, Directory) {
  TempDir dir;
  expect_input_error(dir.path().string(), {dir.path().string(), "is a directory"});
}

TEST(ModelReader, EmptyFile) {
  TempDir dir;
  const std::string path = dir.write("empty.onnx", "");
  expect_input_error(path, {path, "empty"});
}

TEST(ModelReader, TruncatedFile) {
  TempDir dir;
  const std::string bytes = parse_text_model(kGemm).SerializeAsString();
  // protobuf writes fields in field-number order; the last is opset_import (a length-delimited field), so
  // dropping the last byte cuts inside it, and dropping half cuts inside the graph.
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2}) {
    const std::string path = dir.write("truncated" + std::to_string(keep) + ".onnx", bytes.substr(0, keep));
    expect_input_error(path, {path, "truncated or corrupt"});
  }
}

TEST(ModelReader, RandomBytes) {
  TempDir dir;
  std::mt19937 rng(20261130);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  const std::string path = dir.write("random.onnx", bytes);
  expect_input_error(path, {path, "not a valid ONNX file"});
}

TEST(ModelReader, ProtobufThatIsNotAModel) {
  TempDir dir;
  // An ONNX GraphProto on its own (a protobuf, but not a model): no ModelProto.graph field.
  const onnx::ModelProto m = parse_text_model(kGemm);
  const std::string path = dir.write("graph_only.pb", m.graph().SerializeAsString());
  expect_input_error(path, {path, "not an ONNX model"});
}

TEST(ModelReader, NegativeDimension) {
  TempDir dir;
  onnx::ModelProto m = parse_text_model(kGemm);
  add_initializer(m, "bad_dims", onnx::TensorProto::FLOAT, {4, -3});
  const std::string path = dir.write("negative.onnx", m);
  expect_input_error(path, {path, "'bad_dims'", "negative dimension (-3)"});
}

TEST(ModelReader, UnknownDtype) {
  TempDir dir;
  onnx::ModelProto m = parse_text_model(kGemm);
  add_initializer(m, "odd", 99, {2});
  const std::string path = dir.write("dtype.onnx", m);
  expect_input_error(path, {path, "'odd'", "unknown data type 99"});
}

TEST(ModelReader, NewerIrVersionIsReadWithAWarning) {
  TempDir dir;
  onnx::ModelProto m = parse_text_model(kGemm);
  m.set_ir_version(11);
  const std::string path = dir.write("ir11.onnx", m);
  const ReadModel r = read_model_file(path);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "IR version 11")) << r.warnings[0];
  EXPECT_EQ(r.proto.graph().node_size(), 1);
}

// Every prefix and many single-byte corruptions of a valid model either read or fail with InputError:
// never a crash, a hang or another exception (run under ASan/UBSan by scripts/test.sh).
TEST(ModelReader, PrefixesAndCorruptionsFailCleanly) {
  const std::string bytes = testing::load_text_fixture("conv_bn.txt").SerializeAsString();
  auto read_or_input_error = [](const std::string& b) {
    try {
      read_model_bytes("mutant.onnx", reinterpret_cast<const uint8_t*>(b.data()), b.size());
    } catch (const InputError& e) {
      EXPECT_TRUE(contains(e.what(), "mutant.onnx")) << e.what();
    }
  };
  for (size_t keep = 0; keep < bytes.size(); ++keep) read_or_input_error(bytes.substr(0, keep));
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string mutant = bytes;
    mutant[rng() % mutant.size()] = static_cast<char>(rng() & 0xff);
    read_or_input_error(mutant);
  }
}

// Builds a model whose If nodes nest `levels` deep (each then_branch holds the next If).
onnx::ModelProto nested_ifs(int levels) {
  onnx::ModelProto m = parse_text_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (bool c) => (float[1] y) { y = Constant<value = float[1] {0}>() }
)");
  onnx::GraphProto* g = m.mutable_graph();
  for (int i = 0; i < levels; ++i) {
    onnx::NodeProto* node = g->add_node();
    node->set_op_type("If");
    node->add_input("c");
    node->add_output("o" + std::to_string(i));
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    g = a->mutable_g();
  }
  return m;
}

TEST(ModelReader, NestingWithinTheBoundIsRead) {
  TempDir dir;
  // Model 1 + 3 per If level (node, attribute, graph) + graph 1 = 2 + 3 * 20 = 62 <= kMaxMessageDepth.
  EXPECT_NO_THROW(read_model_file(dir.write("nested20.onnx", nested_ifs(20))));
}

TEST(ModelReader, NestingPastTheBoundIsRefused) {
  TempDir dir;
  // 2 + 3 * 21 = 65 > 64.
  const std::string path = dir.write("nested21.onnx", nested_ifs(21));
  expect_input_error(path, {path, "nest deeper than 64"});
}

// Peak memory of reading must not grow with weight bytes: read a model with 64 MiB of inline weights in a
// child process and compare its resident-memory high-water mark before and after.
TEST(ModelReader, PeakMemoryDoesNotGrowWithWeights) {
  if (std::getenv("MEMPLAN_SANITIZED")) GTEST_SKIP() << "sanitizer shadow memory distorts resident-memory figures";
  TempDir dir;
  onnx::ModelProto m = parse_text_model(kGemm);
  constexpr int kTensors = 16;  // 16 x 4 MiB
  for (int i = 0; i < kTensors; ++i)
    add_initializer(m, "w" + std::to_string(i), onnx::TensorProto::FLOAT, {1024, 1024})
        ->set_raw_data(std::string(4 << 20, static_cast<char>(i)));
  const std::string path = dir.write("heavy.onnx", m);
  m.Clear();

  auto high_water_kib = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1L;
  };
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const long before = high_water_kib();
    const ReadModel r = read_model_file(path);
    const long grown = r.proto.has_graph() ? high_water_kib() - before : -1;
    ::write(fds[1], &grown, sizeof grown);
    ::_exit(0);
  }
  long grown_kib = -1;
  ASSERT_EQ(::read(fds[0], &grown_kib, sizeof grown_kib), static_cast<ssize_t>(sizeof grown_kib));
  ::waitpid(pid, nullptr, 0);
  ::close(fds[0]);
  ::close(fds[1]);
  // Reading the 64 MiB of weights would raise the high-water mark by 64 MiB; the structure alone is
  // a few KiB (plus pages mapped around each tensor header), so 8 MiB is a generous bound.
  EXPECT_LT(grown_kib, 8 * 1024) << "resident memory grew by " << grown_kib << " KiB reading a 64 MiB model";
}

}  // namespace
}  // namespace memplan
