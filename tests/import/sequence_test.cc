// Sequence and optional values (onnx_import/rules/sequences.cc): shapes per tensor, sizes for memory, and the
// errors for ops given the wrong kind of value or a position out of range. ONNX's own test models for these
// ops run in conformance_test.cc; these cover what they do not. Expected shapes are worked out by hand in
// the comments, from the op definitions in onnx/docs/Operators.md.
#include <gtest/gtest.h>

#include <string>

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
using Shapes = std::vector<Shape>;

InferenceResult infer(const std::string& text, const Bindings& b = {}) { return infer_shapes(parse_text_model(text), b); }

std::string error_of(const std::string& text, const Bindings& b = {}) {
  try {
    infer(text, b);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return {};
}

TEST(Sequences, ConstructInsertEraseAtAndLength) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, float[3, 4] y) => (float[A, B] at, int64 n, float[C, D] cat, float[E, F, G] stack) {
      s = SequenceConstruct(x, y)
      zero = Constant<value = int64 {0}>()
      s2 = SequenceInsert(s, y, zero)
      minus1 = Constant<value = int64 {-1}>()
      s3 = SequenceErase(s2, minus1)
      at = SequenceAt(s3, minus1)
      n = SequenceLength(s3)
      cat = ConcatFromSequence<axis = 0>(s3)
      s4 = SequenceConstruct(x, x, x)
      stack = ConcatFromSequence<axis = -1, new_axis = 1>(s4)
    })");
  // s = [x[2,4], y[3,4]]; insert y at 0 -> [y, x, y]; erase the last -> [y[3,4], x[2,4]].
  EXPECT_EQ(r.values.at("s").value_type, ValueType::Sequence);
  EXPECT_EQ(r.values.at("s").element_shapes, (Shapes{{2, 4}, {3, 4}}));
  EXPECT_EQ(r.values.at("s2").element_shapes, (Shapes{{3, 4}, {2, 4}, {3, 4}}));
  EXPECT_EQ(r.values.at("s3").element_shapes, (Shapes{{3, 4}, {2, 4}}));
  EXPECT_EQ(r.values.at("at").shape, Shape({2, 4}));  // position -1: the last, x
  EXPECT_EQ(r.values.at("n").int_value, std::vector<int64_t>{2});
  EXPECT_EQ(r.values.at("cat").shape, Shape({5, 4}));  // 3 + 2 rows
  // Three [2, 4] stacked along a new last axis (axis -1 of rank 3): [2, 4, 3].
  EXPECT_EQ(r.values.at("stack").shape, Shape({2, 4, 3}));
}

TEST(Sequences, SplitToSequenceAllThreeForms) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[7, 4] x) => (int64 a, int64 b, int64 c) {
      ones = SplitToSequence<axis = 0, keepdims = 0>(x)
      three = Constant<value = int64 {3}>()
      chunks = SplitToSequence<axis = 0>(x, three)
      lens = Constant<value = int64[2] {1, 3}>()
      parts = SplitToSequence<axis = 1>(x, lens)
      a = SequenceLength(ones)
      b = SequenceLength(chunks)
      c = SequenceLength(parts)
    })");
  // No split: 7 slices of 1 row, squeezed (keepdims 0) -> seven [4].
  EXPECT_EQ(r.values.at("ones").element_shapes, Shapes(7, Shape{4}));
  // Scalar 3: rows 3, 3, 1 (the last smaller).
  EXPECT_EQ(r.values.at("chunks").element_shapes, (Shapes{{3, 4}, {3, 4}, {1, 4}}));
  // [1, 3] along axis 1: [7, 1] and [7, 3].
  EXPECT_EQ(r.values.at("parts").element_shapes, (Shapes{{7, 1}, {7, 3}}));
  EXPECT_EQ(r.values.at("b").int_value, std::vector<int64_t>{3});
}

TEST(Sequences, ALoopOverSequenceLengthIsUnrolledAndASequenceCostsItsTensors) {
  // SequenceLength gives the trip count (3); the body appends a [1, i + 1] slice of a [1, 8] tensor each
  // iteration: [1, 1], [1, 2], [1, 3] (float32: 4 + 8 + 12 = 24 bytes).
  const auto proto = parse_text_model(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 8] x, float[2] a, float[2] b, float[2] c) => (float[M, N] y) {
      s = SequenceConstruct(a, b, c)
      n = SequenceLength(s)
      t = Constant<value = bool {1}>()
      empty = SequenceEmpty()
      grown = Loop(n, t, empty) <body = body (int64 i, bool cond, seq_in) => (bool cond_out, seq_out) {
          cond_out = Identity(cond)
          one = Constant<value = int64 {1}>()
          end = Add(i, one)
          ax = Constant<value = int64[1] {0}>()
          end1 = Unsqueeze(end, ax)
          start = Constant<value = int64[1] {0}>()
          ax1 = Constant<value = int64[1] {1}>()
          piece = Slice(x, start, end1, ax1)
          seq_out = SequenceInsert(seq_in, piece)
        }>
      y = ConcatFromSequence<axis = 1>(grown)
    })");
  const auto r = infer_shapes(proto, {});
  EXPECT_EQ(r.values.at("grown").element_shapes, (Shapes{{1, 1}, {1, 2}, {1, 3}}));
  EXPECT_EQ(r.values.at("y").shape, Shape({1, 6}));  // 1 + 2 + 3 columns
  std::string bytes;
  proto.SerializeToString(&bytes);
  const ReadModel read = read_model_bytes("seq.onnx", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const Graph g = import_model(read, "seq.onnx", {});
  const Tensor& grown = g.tensors[static_cast<size_t>(*g.find_tensor("grown"))];
  EXPECT_EQ(grown.value_type, ValueType::Sequence);
  EXPECT_EQ(grown.bytes(), 24u);
  EXPECT_EQ(g.tensors[static_cast<size_t>(*g.find_tensor("s"))].bytes(), 24u);  // three float[2]
  EXPECT_EQ(g.tensors[static_cast<size_t>(*g.find_tensor("empty"))].bytes(), 0u);
}

TEST(Optionals, OptionalGetAndHasElement) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 15]>
    g (float[3, 5] x) => (float[A, B] y, bool h) {
      o = Optional(x)
      y = OptionalGetElement(o)
      h = OptionalHasElement(o)
    })");
  EXPECT_EQ(r.values.at("o").value_type, ValueType::Optional);
  EXPECT_EQ(r.values.at("o").element_shapes, (Shapes{{3, 5}}));
  EXPECT_EQ(r.values.at("y").shape, Shape({3, 5}));
  EXPECT_EQ(r.values.at("h").int_value, std::vector<int64_t>{1});
}

TEST(Sequences, WrongKindsAndPositionsAreErrorsNamingTheNode) {
  // A sequence op given a tensor.
  std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x) => (int64 n) { n = SequenceLength(x) })");
  EXPECT_TRUE(contains(msg, "node 'SequenceLength_0' (SequenceLength): input 0 ('x') is a tensor; SequenceLength takes a sequence there")) << msg;
  // A tensor op given a sequence.
  msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x) => (float[2, 4] y) { s = SequenceConstruct(x)
                                           y = Relu(s) })");
  EXPECT_TRUE(contains(msg, "node 'Relu_1' (Relu): input 0 ('s') is a sequence; Relu takes a tensor there")) << msg;
  // SequenceAt out of range: two tensors, position 2.
  msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x) => (float[2, 4] y) { s = SequenceConstruct(x, x)
                                           p = Constant<value = int64 {2}>()
                                           y = SequenceAt(s, p) })");
  EXPECT_TRUE(contains(msg, "node 'SequenceAt_2' (SequenceAt): position 2 is out of range for a sequence of 2 tensors (valid: -2 to 1)")) << msg;
  // A position that is not known statically.
  msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, int64 p) => (float[2, 4] y) { s = SequenceConstruct(x, x)
                                                    y = SequenceAt(s, p) })");
  EXPECT_TRUE(contains(msg, "the position (input 1, 'p') is not known statically")) << msg;
  Bindings b;
  b.input_values["p"] = {{1}, false, "1"};
  EXPECT_EQ(infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, float[3, 4] z, int64 p) => (float[A, B] y) { s = SequenceConstruct(x, z)
                                                                    y = SequenceAt(s, p) })", b).values.at("y").shape,
            Shape({3, 4}));  // --value p=1: the second tensor
  // Mixed element types, an empty concat, an empty optional read, split lengths that do not sum.
  msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, int64[2] i) => (int64 n) { s = SequenceConstruct(x, i)
                                               n = SequenceLength(s) })");
  EXPECT_TRUE(contains(msg, "a sequence holds one element type")) << msg;
  msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[A] y) { s = SequenceEmpty()
                                     y = ConcatFromSequence<axis = 0>(s) })");
  EXPECT_TRUE(contains(msg, "node 'ConcatFromSequence_1' (ConcatFromSequence): the sequence is empty")) << msg;
  msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[7, 4] x) => (int64 n) { lens = Constant<value = int64[2] {1, 3}>()
                                     s = SplitToSequence(x, lens)
                                     n = SequenceLength(s) })");
  EXPECT_TRUE(contains(msg, "the split lengths sum to 4, but axis 0 has 7")) << msg;
}

TEST(Sequences, SplitToSequenceIsBoundedAtTwoToTheSixteenTensors) {
  // Without `split`, one tensor per element along the axis: 65,536 elements make 65,536 tensors (the bound),
  // 65,537 are refused; a scalar split of 2 over 131,073 makes ceil(131,073 / 2) = 65,537 (refused).
  const auto ones = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[65536] x) => (int64 n) { s = SplitToSequence<keepdims = 0>(x)
                                      n = SequenceLength(s) })");
  EXPECT_EQ(ones.values.at("n").int_value, std::vector<int64_t>{65536});
  std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[65537] x) => (int64 n) { s = SplitToSequence(x)
                                      n = SequenceLength(s) })");
  EXPECT_TRUE(contains(msg, "node 'SplitToSequence_0' (SplitToSequence): would make a sequence of 65537 tensors "
                            "(axis 0 has 65537); memplan follows sequences of up to 65536 tensors")) << msg;
  msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[131073] x) => (int64 n) { two = Constant<value = int64 {2}>()
                                       s = SplitToSequence(x, two)
                                       n = SequenceLength(s) })");
  EXPECT_TRUE(contains(msg, "would make a sequence of 65537 tensors (axis 0 has 131073)")) << msg;
  // The sweep's case (tests/reliability/schema_rank_sweep_test.cc): a [2^31] input, split omitted, took over
  // 2 GiB before the bound. From the command line: exit 2 and the message.
  TempDir dir;
  const std::string path = dir.write("split.onnx", parse_text_model(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2147483648] x) => (int64 n) { s = SplitToSequence(x)
                                           n = SequenceLength(s) })"));
  const RunResult r = run_memplan({"inspect", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "would make a sequence of 2147483648 tensors")) << r.err;
}

TEST(Optionals, AnEmptyOptionalReadIsAnErrorAndBindingsGiveContainerInputs) {
  onnx::ModelProto m = parse_text_model(R"(<ir_version: 8, opset_import: ["" : 15]>
    g (float[2] x) => (float[A] y, bool h) { y = OptionalGetElement(x)
                                              h = OptionalHasElement(x) })");
  // Make x an optional(tensor(float)) and a second input a sequence(tensor(float)) (the text syntax has no
  // such types).
  auto* xt = m.mutable_graph()->mutable_input(0)->mutable_type();
  onnx::TypeProto held = *xt;
  xt->Clear();
  *xt->mutable_optional_type()->mutable_elem_type() = held;
  Bindings none;
  none.optional_inputs["x"] = std::nullopt;
  std::string msg;
  try {
    infer_shapes(m, none);
  } catch (const InputError& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "node 'OptionalGetElement_0' (OptionalGetElement): the optional 'x' holds no value")) << msg;
  Bindings some;
  some.optional_inputs["x"] = Shapes{{6}};
  const auto r = infer_shapes(m, some);
  EXPECT_EQ(r.values.at("y").shape, Shape({6}));
  EXPECT_EQ(r.values.at("h").int_value, std::vector<int64_t>{1});
  // Unbound: the error names the input.
  try {
    infer_shapes(m, {});
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "graph input 'x' is an optional")) << e.what();
  }
}

TEST(Sequences, TheCliBindsSequenceAndOptionalInputs) {
  // s: sequence(tensor(float)); o: optional(tensor(float)); y = Concat of s's tensors, z = o's tensor.
  onnx::ModelProto m = parse_text_model(R"(<ir_version: 8, opset_import: ["" : 15]>
    g (float[2] s, float[2] o) => (float[A, B] y, bool h) { y = ConcatFromSequence<axis = 0>(s)
                                                           h = OptionalHasElement(o) })");
  auto* g = m.mutable_graph();
  onnx::TypeProto tensor = g->input(0).type();
  tensor.mutable_tensor_type()->clear_shape();
  g->mutable_input(0)->mutable_type()->Clear();
  *g->mutable_input(0)->mutable_type()->mutable_sequence_type()->mutable_elem_type() = tensor;
  g->mutable_input(1)->mutable_type()->Clear();
  *g->mutable_input(1)->mutable_type()->mutable_optional_type()->mutable_elem_type() = tensor;
  TempDir dir;
  const std::string path = dir.write("seq.onnx", m);
  // s = [2, 3] and [4, 3] concatenated along 0: [6, 3], float32 = 72 bytes; o holds nothing.
  RunResult r = run_memplan({"inspect", path, "--input", "s=seq(2x3,4x3)", "--input", "o=none", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "\"name\": \"y\",\n      \"dtype\": \"float32\",\n      \"shape\": [\n        6,\n        3\n      ]")) << r.out;
  r = run_memplan({"estimate", path, "--input", "s=seq(2x3,4x3)", "--input", "o=5", "--runtime", "ideal"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Unbound, or bound as the wrong kind: exit 2 naming the input and the flag.
  r = run_memplan({"inspect", path, "--input", "o=none"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "graph input 's' is a sequence: give the shape of each of its tensors with --input s=seq(2x3,4x3)")) << r.err;
  r = run_memplan({"inspect", path, "--input", "s=seq(2x3)"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "graph input 'o' is an optional tensor: say what it holds with --input o=none")) << r.err;
  r = run_memplan({"inspect", path, "--input", "s=seq(2xq)", "--input", "o=none"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "'q' is not a non-negative integer")) << r.err;
}

}  // namespace
}  // namespace memplan
