// If conditions and shapes that depend on a graph input's value (--value, Bindings::input_values), If
// branches that cannot be shaped at the given inputs, and the inlining of the branch taken
// (onnx_import/inline_branches.h). Models are written in ONNX's text syntax; every expected shape is worked
// out by hand in the comment beside it.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "onnx_import/errors.h"
#include "onnx_import/import.h"
#include "onnx_import/model_reader.h"
#include "onnx_import/shape_inference.h"
#include "tests/import/import_test_util.h"

namespace memplan {
namespace {

using testing::contains;
using testing::parse_text_model;
using testing::run_memplan;
using testing::RunResult;
using testing::TempDir;

using Shape = std::vector<int64_t>;

InferenceResult infer(const std::string& text, const Bindings& b = {}) { return infer_shapes(parse_text_model(text), b); }

Bindings value(const std::string& name, std::vector<double> numbers, bool list = false, const std::string& text = "v") {
  Bindings b;
  b.input_values[name] = {std::move(numbers), list, text};
  return b;
}

std::string error_of(const std::string& text, const Bindings& b) {
  try {
    infer(text, b);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return {};
}

// --- --value -------------------------------------------------------------------------------------

const char* kReshapeByValue = R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[12] x, int64[K] s) => (float[A, B] y) {
      y = Reshape(x, s)
    })";

TEST(ValueBinding, AOneDimensionalValueIsAReshapeTargetAndBindsItsLength) {
  // s = [3, 4]: Reshape(x[12], [3, 4]) = [3, 4]; s's symbolic length K = 2 elements.
  const auto r = infer(kReshapeByValue, value("s", {3, 4}, true));
  EXPECT_EQ(r.values.at("y").shape, Shape({3, 4}));
  EXPECT_EQ(r.values.at("s").shape, Shape({2}));
  EXPECT_EQ(r.bound_dims.at("K"), 2);
  EXPECT_EQ(r.bound_values, std::vector<std::string>{"s"});
  // Without the value the target is unknown: the error says what cannot be inferred.
  Bindings k;
  k.dims["K"] = 2;
  EXPECT_THROW(infer(kReshapeByValue, k), InputError);
}

const char* kIfOverScalar = R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, int64 k) => (float[M, N] y) {
      one = Constant<value = int64 {1}>()
      c = Equal(k, one)
      y = If(c) <then_branch = g1 () => (float[2, 4] t) { t = Identity(x) },
                 else_branch = g2 () => (float[2, 8] e) { e = Concat<axis = 1>(x, x) }>
    })";

TEST(ValueBinding, AScalarValueDecidesAnIfWithoutWarning) {
  // k = 1: Equal(k, 1) is true -> then branch, y = x [2, 4] (the smaller branch, so not the unknown-condition pick).
  auto r = infer(kIfOverScalar, value("k", {1}));
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 4}));
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.values.at("k").int_value, std::vector<int64_t>{1});
  // k = 7: else branch, Concat(x, x) along axis 1 = [2, 8].
  r = infer(kIfOverScalar, value("k", {7}));
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 8}));
  EXPECT_TRUE(r.warnings.empty());
  // Unbound: both shape, the larger (else, 64 bytes > 32) is assumed with a warning naming the node.
  r = infer(kIfOverScalar);
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 8}));
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "If_2")) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[0], "else branch")) << r.warnings[0];
}

TEST(ValueBinding, BoolAndFloatValuesKeepTheirDtype) {
  const char* model = R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, bool c, float f) => (float[M, N] y, float z) {
      y = If(c) <then_branch = g1 () => (float[2, 4] t) { t = Identity(x) },
                 else_branch = g2 () => (float[2, 8] e) { e = Concat<axis = 1>(x, x) }>
      z = Identity(f)
    })";
  Bindings b = value("c", {1});
  b.input_values["f"] = {{0.1}, false, "0.1"};
  const auto r = infer(model, b);
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 4}));  // c true -> then
  ASSERT_TRUE(r.values.at("z").real_value);
  // 0.1 rounded to float32, as the runtime holds it: 0.100000001490116...
  EXPECT_EQ(r.values.at("z").real_value->at(0), static_cast<double>(0.1f));
}

TEST(ValueBinding, ValuesThatDoNotMatchTheInputAreErrors) {
  EXPECT_TRUE(contains(error_of(kIfOverScalar, value("q", {1})), "--value q: the model has no graph input named 'q'"));
  EXPECT_TRUE(contains(error_of(kIfOverScalar, value("k", {1.5}, false, "1.5")), "is int64, but '1.5' is not an integer"));
  EXPECT_TRUE(contains(error_of(kIfOverScalar, value("k", {1, 2}, true, "1,2")), "'k' is a scalar, but 2 values are given"));
  EXPECT_TRUE(contains(error_of(kIfOverScalar, value("x", {1})), "has rank 2; --value binds scalars and 1-D tensors"));
  const char* fixed = R"(<ir_version: 8, opset_import: ["" : 17]>
    g (int64[3] s, bool c, uint8 u) => (int64[3] y) { y = Identity(s) })";
  EXPECT_TRUE(contains(error_of(fixed, value("s", {1, 2}, true, "1,2")), "has 3 elements, but 2 values are given"));
  EXPECT_TRUE(contains(error_of(fixed, value("c", {2})), "is bool; expected 0, 1, true or false"));
  EXPECT_TRUE(contains(error_of(fixed, value("u", {256})), "256 does not fit graph input 'u' (uint8)"));
  EXPECT_TRUE(contains(error_of(fixed, value("u", {-1})), "-1 does not fit graph input 'u' (uint8)"));
}

TEST(ValueBinding, TheCliParsesValuesAndRefusesBadOnesWithExit2) {
  TempDir dir;
  const std::string path = dir.write("if.onnx", parse_text_model(kIfOverScalar));
  RunResult r = run_memplan({"inspect", path, "--value", "k=7", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bound_values"], nlohmann::json({{"k", 7}}));
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json({2, 8})) << r.out;  // y, the else branch
  for (const auto& [arg, message] : std::vector<std::pair<std::string, std::string>>{
           {"k=abc", "--value k=abc: 'abc' is not a number, true or false"},
           {"k=", "expected NAME=V"},
           {"k=1,", "expected a number, true/false, or a comma list"},
           {"nope=1", "no graph input named 'nope'"},
           {"k=2.5", "is not an integer"}}) {
    r = run_memplan({"estimate", path, "--value", arg});
    EXPECT_EQ(r.exit_code, 2) << arg << ": " << r.err;
    EXPECT_TRUE(contains(r.err, message)) << arg << ": " << r.err;
  }
  r = run_memplan({"estimate", path, "--value", "k=1", "--value", "k=2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--value k is given twice")) << r.err;
}

// --- If branches that cannot be shaped ---------------------------------------------------------

TEST(IfBranches, ABranchThatCannotBeShapedLeavesTheOther) {
  // then: Reshape(x[2, 4], [3, 5]) needs 15 elements, x has 8: no shape. else: Identity -> [2, 4].
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, bool c) => (float[M, N] y) {
      y = If(c) <then_branch = g1 () => (float[3, 5] t) { s = Constant<value = int64[2] {3, 5}>()
                                                             t = Reshape(x, s) },
                 else_branch = g2 () => (float[2, 4] e) { e = Identity(x) }>
    })");
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 4}));
  ASSERT_EQ(r.warnings.size(), 1u) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[0], "node 'If_0' (If)")) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[0], "the then branch cannot be shaped at these inputs (")) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[0], "If_0/then_branch/Reshape_1")) << r.warnings[0];  // why
  EXPECT_TRUE(contains(r.warnings[0], "so the else branch is assumed")) << r.warnings[0];
  EXPECT_EQ(r.if_branches.at("If_0"), false);
}

const char* kNested = R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, bool c, bool d) => (float[M, N] y) {
      y = If(c) <then_branch = g1 () => (float[A, B] t) {
                   t = If(d) <then_branch = g3 () => (float[3, 5] u) { s = Constant<value = int64[2] {3, 5}>()
                                                                      u = Reshape(x, s) },
                              else_branch = g4 () => (float[2, 8] v) { v = Concat<axis = 1>(x, x) }> },
                 else_branch = g2 () => (float[1, 1, 8] e) { ax = Constant<value = int64[2] {0, 1}>()
                                                            xx = Unsqueeze(x, ax)
                                                            e = Squeeze(xx, ax) }>
    })";

TEST(IfBranches, NestedIfsFallBackInsideOut) {
  // c, d unknown. Outer then: inner then fails (Reshape 8 -> 15), inner else = Concat [2, 8] is assumed.
  // Outer else: Squeeze(Unsqueeze(x)) = [2, 4] (32 bytes) shapes too; then's [2, 8] (64 bytes) is larger.
  auto r = infer(kNested);
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 8}));
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_TRUE(contains(r.warnings[0], "node 'If_0/then_branch/If_0' (If)")) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[0], "so the else branch is assumed")) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[1], "node 'If_0' (If)")) << r.warnings[1];
  EXPECT_TRUE(contains(r.warnings[1], "both branches were analysed and the then branch")) << r.warnings[1];
  // d = true: the inner If takes its then branch, which cannot be shaped, so the outer then fails as a whole
  // and the outer else, [2, 4], is assumed; the inner If's failure is the reason given.
  r = infer(kNested, value("d", {1}));
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 4}));
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "the then branch cannot be shaped")) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[0], "If_0/then_branch/If_0/then_branch/Reshape_1")) << r.warnings[0];
}

TEST(IfBranches, WhenNeitherBranchShapesTheErrorNamesTheNodeAndBothReasons) {
  // then: Reshape 8 elements -> 15 fails; else: MatMul [2, 4] x [2, 4] (4 != 2) fails.
  const std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, bool c) => (float[M, N] y) {
      y = If(c) <then_branch = g1 () => (float[3, 5] t) { s = Constant<value = int64[2] {3, 5}>()
                                                             t = Reshape(x, s) },
                 else_branch = g2 () => (float[2, 4] e) { e = MatMul(x, x) }>
    })", {});
  EXPECT_TRUE(contains(msg, "node 'If_0' (If)")) << msg;
  EXPECT_TRUE(contains(msg, "neither branch can be shaped at these inputs")) << msg;
  EXPECT_TRUE(contains(msg, "then_branch: node 'If_0/then_branch/Reshape_1'")) << msg;
  EXPECT_TRUE(contains(msg, "else_branch: node 'If_0/else_branch/MatMul_0'")) << msg;
}

// --- the branch taken is inlined into the Graph the cost models read -----------------------------

TEST(IfBranches, TheBranchTakenIsInlinedWithItsWeights) {
  // The then branch holds a float[4, 16] weight (256 bytes) and a MatMul: x[2, 4] @ w = [2, 16].
  const auto proto = parse_text_model(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, int64 k) => (float[M, N] y) {
      one = Constant<value = int64 {1}>()
      c = Equal(k, one)
      y = If(c) <then_branch = g1 () => (float[2, 16] t) { w = Constant<value = float[4, 16] {0}>()
                                                              t = MatMul(x, w) },
                 else_branch = g2 () => (float[2, 4] e) { e = Identity(x) }>
    })");
  std::string bytes;
  proto.SerializeToString(&bytes);
  const ReadModel read = read_model_bytes("if.onnx", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const Graph g = import_model(read, "if.onnx", value("k", {1}));
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op_type + " " + n.name);
  // Constant, Equal, then the branch's Constant and MatMul and the Identity to y; no If.
  EXPECT_EQ(ops, (std::vector<std::string>{"Constant Constant_0", "Equal Equal_1", "Constant If_2/then_branch/Constant_0",
                                           "MatMul If_2/then_branch/MatMul_1", "Identity If_2/then_branch/output_0"}));
  const Tensor& y = g.tensors[static_cast<size_t>(*g.find_tensor("y"))];
  EXPECT_EQ(y.shape, Shape({2, 16}));
  EXPECT_EQ(g.tensors[static_cast<size_t>(*g.find_tensor("w"))].bytes(), 256u);
  // The other value: the else branch, one Identity.
  const Graph e = import_model(read, "if.onnx", value("k", {0}));
  EXPECT_EQ(e.nodes.back().name, "If_2/else_branch/output_0");
  EXPECT_EQ(e.tensors[static_cast<size_t>(*e.find_tensor("y"))].shape, Shape({2, 4}));
}

}  // namespace
}  // namespace memplan
