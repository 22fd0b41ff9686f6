// Resource bounds (docs/limits.md): hostile or huge models end in bounded time and memory with a correct
// result or an InputError (exit 2), never an abort, a stack overflow or an out-of-memory kill.
// Inputs are built here at run time in a temp dir; the 2 GB file is sparse, so it costs no disk.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "onnx_import/import.h"
#include "onnx_import/model_reader.h"
#include "report/estimate.h"
#include "tests/reliability/reliability_util.h"

namespace memplan::reliability {
namespace {

// ---- protobuf wire format, for inputs the protobuf API cannot write (lying lengths, deep nesting) ----

std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}
std::string tag(uint32_t field, uint32_t wire) { return varint((uint64_t{field} << 3) | wire); }
std::string bytes_field(uint32_t field, const std::string& body) { return tag(field, 2) + varint(body.size()) + body; }
std::string varint_field(uint32_t field, uint64_t v) { return tag(field, 0) + varint(v); }

// ModelProto fields (onnx-ml.proto): ir_version 1, graph 7, opset_import 8 {domain 1, version 2}.
std::string model_header() { return varint_field(1, 8) + bytes_field(8, varint_field(2, 17)); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Wall-time bound for work that takes milliseconds natively: generous, since CI machines are shared and
// the sanitized build is several times slower, but far below what a quadratic pass would take.
double time_bound(double native_seconds) { return sanitized() ? native_seconds * 10 : native_seconds; }

// Peak RSS bound for a child memplan process. Native: issue 2's 100 MB. ASan's shadow memory and
// quarantine (256 MiB by default) add a fixed cost that does not grow with the input.
int64_t rss_bound_kib() { return sanitized() ? 1024 * 1024 : 100 * 1024; }

void expect_input_error(const std::string& bytes, const std::string& message_part) {
  const auto start = std::chrono::steady_clock::now();
  try {
    read_model_bytes("hostile.onnx", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ADD_FAILURE() << "expected InputError containing '" << message_part << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(start), time_bound(1.0));
}

// ---- a model that claims a billion nodes ----
// Protobuf has no element counts: a repeated field's size is claimed by the length prefixes around it.
// Each lie below claims far more bytes than the file has; the reader must notice without allocating them.

TEST(BillionNodeClaim, GraphLengthPrefixLies) {
  // graph (field 7) claims 2^40 bytes (a billion 1 KiB nodes); 12 bytes follow.
  expect_input_error(model_header() + tag(7, 2) + varint(uint64_t{1} << 40) + std::string(12, '\x0a'), "");
}

TEST(BillionNodeClaim, NodeLengthPrefixLies) {
  // A well-formed graph whose one node (field 1) claims 10^9 bytes.
  const std::string node = tag(1, 2) + varint(1000000000) + bytes_field(4, "Relu");
  expect_input_error(model_header() + bytes_field(7, node), "");
}

TEST(BillionNodeClaim, PackedDimsLie) {
  // An initializer (graph field 5) whose packed dims (field 1) claim 2^62 bytes of varints.
  const std::string tensor = tag(1, 2) + varint(uint64_t{1} << 62) + "\x01\x02";
  expect_input_error(model_header() + bytes_field(7, bytes_field(5, tensor)), "");
}

TEST(BillionNodeClaim, CliExitsTwoWithSmallRss) {
  if (memplan_binary().empty()) GTEST_SKIP() << "MEMPLAN_BIN not set";
  TempDir dir;
  write_file(dir.file("billion.onnx"),
             model_header() + tag(7, 2) + varint(uint64_t{1} << 40) + std::string(12, '\x0a'));
  const ChildResult r = run_memplan({"inspect", dir.file("billion.onnx")}, 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("billion.onnx"), std::string::npos) << r.err;  // the message names the model
  EXPECT_LT(r.max_rss_kib, rss_bound_kib());
}

// ---- a tensor of 2^50 elements ----

TEST(HugeTensor, TwoToTheFiftyElementsGiveExactBytesWithoutAllocating) {
  TempDir dir;
  // x: float32 [2^25, 2^25] = 2^50 elements = 2^52 bytes (4 PiB); y = Relu(x) is as large.
  write_file(dir.file("huge.onnx"), serialize(relu_chain(1, {int64_t{1} << 25, int64_t{1} << 25})));
  const auto start = std::chrono::steady_clock::now();
  const Graph g = import_model(dir.file("huge.onnx"), {});
  const Tensor& x = g.tensors[static_cast<size_t>(g.inputs.at(0))];
  EXPECT_EQ(x.elements(), uint64_t{1} << 50);
  EXPECT_EQ(x.bytes(), uint64_t{1} << 52);
  EstimateOptions options;  // ideal runtime: exact sizes, one arena
  const Estimate e = estimate_graph(g, options);
  // One step, Relu reads x and writes y: both live there, 2 * 2^52 = 2^53 bytes.
  EXPECT_EQ(e.lower_bound_bytes, uint64_t{1} << 53);
  EXPECT_EQ(e.arena_bytes, uint64_t{1} << 53);
  EXPECT_LT(seconds_since(start), time_bound(2.0));
}

TEST(HugeTensor, PyTorchRuntimeSimulatesPetabytesWithoutAllocating) {
  TempDir dir;
  write_file(dir.file("huge.onnx"), serialize(relu_chain(1, {int64_t{1} << 25, int64_t{1} << 25})));
  EstimateOptions options;
  options.execution.runtime = Runtime::PyTorch;
  const Estimate e = estimate_graph(import_model(dir.file("huge.onnx"), {}), options);
  // 2^52 is a multiple of 2 MiB, so the caching allocator rounds nothing: x and y are allocated exactly.
  EXPECT_GE(e.allocated_bytes, uint64_t{1} << 53);
  EXPECT_GE(e.reserved_bytes, e.allocated_bytes);
}

TEST(HugeTensor, ByteCountPast64BitsIsShapeOverflow) {
  TempDir dir;
  // [2^40, 2^40] float32: 2^80 elements, past 64 bits.
  write_file(dir.file("overflow.onnx"), serialize(relu_chain(1, {int64_t{1} << 40, int64_t{1} << 40})));
  EXPECT_THROW(import_model(dir.file("overflow.onnx"), {}), ShapeOverflow);
}

TEST(HugeTensor, CliExitsTwoOnOverflow) {
  if (memplan_binary().empty()) GTEST_SKIP() << "MEMPLAN_BIN not set";
  TempDir dir;
  write_file(dir.file("overflow.onnx"), serialize(relu_chain(1, {int64_t{1} << 40, int64_t{1} << 40})));
  const ChildResult r = run_memplan({"estimate", dir.file("overflow.onnx")}, 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

// ---- subgraphs nested a thousand deep ----

// If(c) whose then branch holds the next If, `depth` levels down; every else branch and the innermost
// then branch pass the outer x through an Identity.
onnx::ModelProto nested_ifs(int depth) {
  onnx::ModelProto m = relu_chain(0, {});
  auto* g = m.mutable_graph();
  g->clear_output();
  g->clear_input();
  *g->add_input() = tensor_value("c", {}, onnx::TensorProto::BOOL);
  *g->add_input() = tensor_value("x", {4});
  onnx::GraphProto body;  // innermost: y = Identity(x)
  body.set_name("inner");
  auto* id = body.add_node();
  id->set_op_type("Identity");
  id->add_input("x");
  id->add_output("y0");
  *body.add_output() = tensor_value("y0", {4});
  const onnx::GraphProto leaf = body;
  for (int level = 1; level <= depth; ++level) {
    onnx::GraphProto outer;
    outer.set_name("level" + std::to_string(level));
    auto* node = outer.add_node();
    node->set_op_type("If");
    node->add_input("c");
    node->add_output("y" + std::to_string(level));
    // then_branch nests further; else_branch is a leaf (copying the body into both would double the model
    // at every level).
    auto* then_branch = node->add_attribute();
    then_branch->set_name("then_branch");
    then_branch->set_type(onnx::AttributeProto::GRAPH);
    *then_branch->mutable_g() = body;
    auto* else_branch = node->add_attribute();
    else_branch->set_name("else_branch");
    else_branch->set_type(onnx::AttributeProto::GRAPH);
    *else_branch->mutable_g() = leaf;
    *outer.add_output() = tensor_value("y" + std::to_string(level), {4});
    body = std::move(outer);
  }
  // The top graph is the outermost level itself.
  *g->mutable_node() = body.node();
  *g->mutable_output() = body.output();
  return m;
}

TEST(NestedSubgraphs, AThousandDeepIsRefusedQuickly) {
  // Each level doubles the branches, so 1000 levels cannot be built whole: nest through then_branch only.
  onnx::ModelProto m = nested_ifs(1);
  onnx::NodeProto* node = m.mutable_graph()->mutable_node(0);
  for (int level = 0; level < 1000; ++level) {
    onnx::GraphProto* then_graph = node->mutable_attribute(0)->mutable_g();
    then_graph->mutable_node(0)->set_op_type("If");
    onnx::NodeProto* inner = then_graph->mutable_node(0);
    inner->clear_input();
    inner->add_input("c");
    auto* a = inner->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = nested_ifs(1).graph().node(0).attribute(0).g();
    node = inner;
  }
  std::string bytes;
  // Protobuf's own serializer walks the nesting recursively; 1000 levels of 3 messages is ~3000 frames.
  ASSERT_TRUE(m.SerializeToString(&bytes));
  TempDir dir;
  write_file(dir.file("deep.onnx"), bytes);
  const auto start = std::chrono::steady_clock::now();
  try {
    import_model(dir.file("deep.onnx"), {});
    ADD_FAILURE() << "a model nested 1000 deep was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nest deeper than " + std::to_string(kMaxMessageDepth)), std::string::npos)
        << e.what();
  }
  EXPECT_LT(seconds_since(start), time_bound(2.0));
}

TEST(NestedSubgraphs, TwentyDeepWithinTheLimitImports) {
  // Depth in messages: ModelProto 1 + graph 1 + 20 levels of (node, attribute, graph) = 62 <= 64.
  onnx::ModelProto m = nested_ifs(20);
  TempDir dir;
  write_file(dir.file("nested20.onnx"), serialize(m));
  const Graph g = import_model(dir.file("nested20.onnx"), {});
  ASSERT_EQ(g.outputs.size(), 1u);
  const Tensor& y = g.tensors[static_cast<size_t>(g.outputs[0])];
  EXPECT_EQ(y.shape, std::vector<int64_t>{4});  // Identity of x [4], through every level
  EXPECT_EQ(y.dtype, DType::Float32);
}

// ---- a 100,000-node chain ----

TEST(LongChain, HundredThousandNodesImportAndEstimateInSeconds) {
  TempDir dir;
  write_file(dir.file("chain.onnx"), serialize(relu_chain(100000, {1, 1024})));
  const auto start = std::chrono::steady_clock::now();
  const Graph g = import_model(dir.file("chain.onnx"), {});
  ASSERT_EQ(g.nodes.size(), 100000u);
  EstimateOptions ideal;
  const Estimate e = estimate_graph(g, ideal);
  // Every tensor is 1 x 1024 float32 = 4096 bytes. Step i reads t(i-1) (its last use) and writes t(i):
  // two tensors live at every step, so the lower bound and the best arena are 8192 bytes.
  EXPECT_EQ(e.lower_bound_bytes, 8192u);
  EXPECT_EQ(e.arena_bytes, 8192u);
  EstimateOptions pytorch;
  pytorch.execution.runtime = Runtime::PyTorch;
  pytorch.memory_schedule = true;
  estimate_graph(g, pytorch);
  EXPECT_LT(seconds_since(start), time_bound(10.0));
}

// ---- deeply nested protobuf messages ----

// `depth` levels of TypeProto.sequence_type (field 4) -> TypeProto.Sequence.elem_type (field 1), written
// front to back from precomputed lengths (prepending would copy quadratically).
std::string nested_sequence_type(int depth) {
  std::vector<uint64_t> inner(static_cast<size_t>(2 * depth + 1), 0);  // body length at each level, inside out
  for (size_t i = 1; i < inner.size(); ++i) inner[i] = 1 + varint(inner[i - 1]).size() + inner[i - 1];
  std::string out;
  for (size_t i = inner.size() - 1; i > 0; --i) {
    out += tag(i % 2 == 0 ? 4 : 1, 2);  // outermost is a TypeProto: its field 4 holds a Sequence
    out += varint(inner[i - 1]);
  }
  return out;
}

TEST(DeepProtobuf, HundredThousandNestedTypesAreRefused) {
  // graph.value_info (field 13) { name (1) "v", type (2) { sequence_type { elem_type { ... } } } }
  const std::string type = nested_sequence_type(100000);
  const std::string value_info = bytes_field(1, "v") + bytes_field(2, type);
  const std::string graph = bytes_field(13, value_info);
  expect_input_error(model_header() + bytes_field(7, graph), "");
}

TEST(DeepProtobuf, HundredThousandNestedGroupsAreRefused) {
  // Unknown field 99 as start-group (wire type 3) 100,000 times: groups nest without length prefixes.
  std::string groups;
  for (int i = 0; i < 100000; ++i) groups += tag(99, 3);
  expect_input_error(model_header() + groups, "");
}

TEST(DeepProtobuf, HundredThousandNestedGraphsInAttributesAreRefused) {
  // node.attribute.g.node.attribute.g ... by hand: lengths precomputed, written front to back.
  const int depth = 100000;
  // Levels inside out: Attribute{g (6): Graph{node (1): Node{attribute (5): ...}}}.
  const uint32_t fields[3] = {1, 6, 5};  // by level mod 3, outermost first: Graph.node, Attribute.g, Node.attribute
  std::vector<uint64_t> inner(static_cast<size_t>(3 * depth + 1), 0);
  for (size_t i = 1; i < inner.size(); ++i) inner[i] = 1 + varint(inner[i - 1]).size() + inner[i - 1];
  std::string body;
  for (size_t i = inner.size() - 1; i > 0; --i) body += tag(fields[i % 3], 2) + varint(inner[i - 1]);
  // body starts with the field of level inner.size()-1; wrap it in a graph's node list.
  expect_input_error(model_header() + tag(7, 2) + varint(body.size()) + body, "nest deeper");
}

// ---- a 2 GB file ----

// A valid model whose one initializer w (float32 [2^29]) holds 2 GiB of inline raw_data, followed by
// y = Relu(w). The payload is a hole in a sparse file: it reads as zeros and takes no disk.
void write_two_gib_model(const std::string& path) {
  const uint64_t payload = uint64_t{1} << 31;
  const std::string tensor_head = varint_field(1, uint64_t{1} << 29) + varint_field(2, 1) + bytes_field(8, "w") +
                                  tag(9, 2) + varint(payload);
  const uint64_t tensor_size = tensor_head.size() + payload;
  onnx::GraphProto trailer_graph;  // the node and the output, after the initializer
  auto* n = trailer_graph.add_node();
  n->set_op_type("Relu");
  n->add_input("w");
  n->add_output("y");
  *trailer_graph.add_output() = tensor_value("y", {int64_t{1} << 29});
  std::string trailer;
  ASSERT_TRUE(trailer_graph.SerializeToString(&trailer));
  const std::string init_head = tag(5, 2) + varint(tensor_size);
  const uint64_t graph_size = init_head.size() + tensor_size + trailer.size();
  const std::string head = model_header() + tag(7, 2) + varint(graph_size) + init_head + tensor_head;

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  ASSERT_EQ(::pwrite(fd, trailer.data(), trailer.size(), static_cast<off_t>(head.size() + payload)),
            static_cast<ssize_t>(trailer.size()));
  ::close(fd);
}

TEST(TwoGigabyteFile, InspectReadsStructureOnlyWithSmallRss) {
  if (memplan_binary().empty()) GTEST_SKIP() << "MEMPLAN_BIN not set";
  TempDir dir;
  const std::string path = dir.file("two_gib.onnx");
  write_two_gib_model(path);
  if (HasFatalFailure()) return;
  // The same command on a tiny model: what the binary takes anyway (ASan's shadow and quarantine included).
  write_file(dir.file("tiny.onnx"), serialize(relu_chain(1, {4})));
  const ChildResult tiny = run_memplan({"inspect", dir.file("tiny.onnx"), "--json"}, 60);
  ASSERT_EQ(tiny.exit_code, 0) << tiny.err;
  const ChildResult r = run_memplan({"inspect", path, "--json"}, 60);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  // w: 2^29 float32 elements = 2^31 bytes, a trainable parameter, counted from its dims.
  EXPECT_EQ(json["parameters"]["count"].get<uint64_t>(), uint64_t{1} << 29);
  EXPECT_EQ(json["parameters"]["bytes"].get<uint64_t>(), uint64_t{1} << 31);
  EXPECT_LT(r.max_rss_kib, rss_bound_kib());
  EXPECT_LT(r.max_rss_kib, tiny.max_rss_kib + 50 * 1024) << "peak RSS grew with the 2 GiB payload";
  EXPECT_LT(r.seconds, time_bound(5.0));
}

TEST(TwoGigabyteFile, ReaderDropsThePayloadUnread) {
  TempDir dir;
  const std::string path = dir.file("two_gib.onnx");
  write_two_gib_model(path);
  if (HasFatalFailure()) return;
  const ReadModel m = read_model_file(path);
  EXPECT_EQ(m.dropped_payload_bytes, uint64_t{1} << 31);
  EXPECT_GT(m.file_bytes, uint64_t{1} << 31);
  ASSERT_EQ(m.proto.graph().initializer_size(), 1);
  EXPECT_EQ(m.proto.graph().initializer(0).raw_data().size(), 0u);  // never materialized
}

}  // namespace
}  // namespace memplan::reliability
