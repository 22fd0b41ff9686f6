// import_model(): tensors, kinds, producers and consumers of the top-level graph, parameter and buffer
// tallies checked against hand counts, and structural errors named.
#include "onnx_import/import.h"

#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "onnx_import/model_overview.h"
#include "tests/import/import_test_util.h"

namespace memplan {
namespace {

using testing::contains;
using testing::load_text_fixture;
using testing::TempDir;

const Tensor& tensor(const Graph& g, const std::string& name) {
  const std::optional<int32_t> id = g.find_tensor(name);
  if (!id) throw std::runtime_error("no tensor " + name);
  return g.tensors[static_cast<size_t>(*id)];
}

Bindings batch(int64_t n) {
  Bindings b;
  b.batch = n;
  return b;
}

// Expects import_model to throw InputError whose message contains each of `parts`.
void expect_input_error(const std::string& path, const Bindings& b, const std::vector<std::string>& parts) {
  try {
    import_model(path, b);
    ADD_FAILURE() << "no error for " << path;
  } catch (const InputError& e) {
    for (const std::string& part : parts) EXPECT_TRUE(contains(e.what(), part)) << e.what() << "\n  lacks: " << part;
  }
}

TEST(ImportModel, GemmTensorsKindsAndLinks) {
  TempDir dir;
  const std::string path = dir.write("gemm.onnx", load_text_fixture("gemm.txt"));
  const Graph g = import_model(path, batch(5));

  EXPECT_EQ(g.model_path, path);
  EXPECT_EQ(g.producer, "memplan-tests 1.0");
  EXPECT_EQ(g.ir_version, 8);
  EXPECT_EQ(g.opsets.at(""), 17);
  ASSERT_EQ(g.tensors.size(), 4u);  // x, w, b, y
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& gemm = g.nodes[0];
  EXPECT_EQ(gemm.name, "Gemm_0");  // unnamed in the model
  EXPECT_EQ(gemm.op_type, "Gemm");
  EXPECT_EQ(gemm.domain, "");
  EXPECT_EQ(gemm.opset, 17);

  const Tensor& x = tensor(g, "x");
  EXPECT_EQ(x.kind, TensorKind::Input);
  EXPECT_EQ(x.shape, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(x.producer, -1);
  EXPECT_EQ(x.consumers, (std::vector<int32_t>{0}));
  const Tensor& w = tensor(g, "w");
  EXPECT_EQ(w.kind, TensorKind::Weight);
  EXPECT_TRUE(w.trainable);
  EXPECT_EQ(w.dtype, DType::Float32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{3, 4}));
  const Tensor& y = tensor(g, "y");
  EXPECT_EQ(y.kind, TensorKind::Output);
  EXPECT_EQ(y.shape, (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(y.producer, 0);
  EXPECT_EQ(gemm.inputs, (std::vector<int32_t>{*g.find_tensor("x"), *g.find_tensor("w"), *g.find_tensor("b")}));
  EXPECT_EQ(gemm.outputs, (std::vector<int32_t>{*g.find_tensor("y")}));
  EXPECT_EQ(g.inputs, (std::vector<int32_t>{*g.find_tensor("x")}));
  EXPECT_EQ(g.outputs, (std::vector<int32_t>{*g.find_tensor("y")}));
  EXPECT_EQ(g.initializers.size(), 2u);
  EXPECT_EQ(g.bound_dims.at("N"), 5);
}

TEST(ImportModel, GemmParameterCount) {
  TempDir dir;
  ModelOverview o;
  import_model(dir.write("gemm.onnx", load_text_fixture("gemm.txt")), batch(1), o);
  const StoredSummary s = summarize_stored(o);
  // Hand count: weight 3x4 = 12 + bias 4 = 16 float32 elements = 64 bytes; nothing else is stored.
  EXPECT_EQ(s.parameters.total.elements, 16u);
  EXPECT_EQ(s.parameters.total.bytes, 64u);
  EXPECT_EQ(s.parameters.total.tensors, 2u);
  EXPECT_EQ(s.buffers.total.elements, 0u);
}

TEST(ImportModel, BatchNormStatisticsAreBuffers) {
  TempDir dir;
  ModelOverview o;
  const Graph g = import_model(dir.write("conv_bn.onnx", load_text_fixture("conv_bn.txt")), batch(2), o);
  const StoredSummary s = summarize_stored(o);
  // Parameters (hand count): conv weight 4x2x3x3 = 72, conv bias 4, BN scale 4, BN bias 4 = 84 float32
  // elements = 336 bytes, in 4 tensors.
  EXPECT_EQ(s.parameters.total.elements, 84u);
  EXPECT_EQ(s.parameters.total.bytes, 336u);
  EXPECT_EQ(s.parameters.total.tensors, 4u);
  // Buffers: BN running mean 4 + var 4 (float32, 32 bytes), the int64[2] Reshape target (16 bytes) and the
  // Constant node's float[1] (4 bytes) = 11 elements, 52 bytes, in 4 tensors.
  EXPECT_EQ(s.buffers.total.elements, 11u);
  EXPECT_EQ(s.buffers.total.bytes, 52u);
  EXPECT_EQ(s.buffers.total.tensors, 4u);
  EXPECT_EQ(s.buffers.by_dtype.at(DType::Int64).bytes, 16u);
  EXPECT_EQ(s.constant_values.total.elements, 1u);

  EXPECT_EQ(tensor(g, "bn_mean").kind, TensorKind::Weight);
  EXPECT_FALSE(tensor(g, "bn_mean").trainable);
  EXPECT_FALSE(tensor(g, "bn_var").trainable);
  EXPECT_TRUE(tensor(g, "bn_scale").trainable);
  EXPECT_EQ(tensor(g, "new_shape").kind, TensorKind::Constant);
  EXPECT_EQ(tensor(g, "half").kind, TensorKind::Constant);
  EXPECT_EQ(tensor(g, "c").kind, TensorKind::Activation);
  // Conv without padding: 5 - 3 + 1 = 3, so c is [2, 4, 3, 3] and y = [2, 4 * 3 * 3] = [2, 36].
  EXPECT_EQ(tensor(g, "c").shape, (std::vector<int64_t>{2, 4, 3, 3}));
  EXPECT_EQ(tensor(g, "y").shape, (std::vector<int64_t>{2, 36}));
  EXPECT_EQ(g.tensors.size(), 14u);  // x, 7 initializers, c, n, r, half, s, y
  EXPECT_EQ(g.bound_dims.at("batch"), 2);
}

TEST(ImportModel, NodesFollowATopologicalOrder) {
  TempDir dir;
  const Graph g = import_model(dir.write("unsorted.onnx", load_text_fixture("unsorted.txt")), Bindings{});
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op_type, "Neg");
  EXPECT_EQ(g.nodes[1].op_type, "Relu");
  EXPECT_EQ(g.nodes[0].name, "Neg_0");
  EXPECT_EQ(g.nodes[1].name, "Relu_1");
  EXPECT_EQ(tensor(g, "t").producer, 0);
  EXPECT_EQ(tensor(g, "t").consumers, (std::vector<int32_t>{1}));
}

TEST(ImportModel, TwoProducersOfOneTensor) {
  TempDir dir;
  const std::string path = dir.write("dup.onnx", load_text_fixture("duplicate_output.txt"));
  expect_input_error(path, Bindings{}, {path, "'t'"});
}

TEST(ImportModel, InitializerAlsoProducedByANode) {
  TempDir dir;
  const std::string path = dir.write("overwritten.onnx", load_text_fixture("initializer_overwritten.txt"));
  expect_input_error(path, Bindings{}, {path, "'w'"});
}

TEST(ImportModel, DuplicateInitializerNames) {
  TempDir dir;
  onnx::ModelProto m = load_text_fixture("gemm.txt");
  *m.mutable_graph()->add_initializer() = m.graph().initializer(0);
  const std::string path = dir.write("dup_init.onnx", m);
  expect_input_error(path, batch(1), {path, "'w'", "twice"});
}

TEST(ImportModel, HostileExternalDataIsNeverOpened) {
  TempDir dir;
  onnx::ModelProto m = load_text_fixture("gemm.txt");
  // Move w's values "to external data" at locations that would leak a system file or fail if opened.
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* location = w->add_external_data();
  location->set_key("location");
  location->set_value("../../etc/passwd");
  onnx::TensorProto* b = m.mutable_graph()->mutable_initializer(1);
  b->clear_float_data();
  b->set_data_location(onnx::TensorProto::EXTERNAL);
  location = b->add_external_data();
  location->set_key("location");
  location->set_value("/nonexistent-memplan/weights.bin");
  const Graph g = import_model(dir.write("external.onnx", m), batch(3));
  EXPECT_EQ(tensor(g, "w").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(tensor(g, "b").shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(tensor(g, "y").shape, (std::vector<int64_t>{3, 4}));
}

TEST(ImportModel, ByteSizePastSixtyFourBitsIsAnInputError) {
  TempDir dir;
  onnx::ModelProto m = load_text_fixture("gemm.txt");
  onnx::TensorProto* huge = m.mutable_graph()->add_initializer();
  huge->set_name("huge");
  huge->set_data_type(onnx::TensorProto::FLOAT);
  huge->add_dims(int64_t{1} << 31);  // 2^31 * 2^31 elements * 4 bytes = 2^64 bytes
  huge->add_dims(int64_t{1} << 31);
  const std::string path = dir.write("huge.onnx", m);
  try {
    import_model(path, batch(1));
    ADD_FAILURE() << "no error";
  } catch (const ShapeOverflow& e) {
    EXPECT_TRUE(contains(e.what(), "'huge'")) << e.what();
    EXPECT_EQ(e.exit_code(), kExitBadInput);
  }
}

TEST(ImportModel, NewerIrVersionWarns) {
  TempDir dir;
  onnx::ModelProto m = load_text_fixture("gemm.txt");
  m.set_ir_version(10);
  const Graph g = import_model(dir.write("ir10.onnx", m), batch(1));
  ASSERT_FALSE(g.warnings.empty());
  EXPECT_TRUE(contains(g.warnings[0], "IR version 10")) << g.warnings[0];
}

TEST(ImportModel, NodeNamesAreUnique) {
  TempDir dir;
  onnx::ModelProto m = testing::parse_text_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
names (float[2] x) => (float[2] y)
{
  a = Neg(x)
  b = Neg(a)
  c = Neg(b)
  y = Neg(c)
}
)");
  // Node 0 named "Neg_1" (the name node 1 would be given), nodes 2 and 3 both named "dup".
  m.mutable_graph()->mutable_node(0)->set_name("Neg_1");
  m.mutable_graph()->mutable_node(2)->set_name("dup");
  m.mutable_graph()->mutable_node(3)->set_name("dup");
  const Graph g = import_model(dir.write("names.onnx", m), Bindings{});
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.nodes[0].name, "Neg_1");
  EXPECT_EQ(g.nodes[1].name, "Neg_1_1");
  EXPECT_EQ(g.nodes[2].name, "dup");
  EXPECT_EQ(g.nodes[3].name, "dup_3");
}

TEST(ImportModel, MissingFileNamesIt) {
  expect_input_error("/nonexistent-memplan/m.onnx", Bindings{}, {"/nonexistent-memplan/m.onnx"});
}

}  // namespace
}  // namespace memplan
