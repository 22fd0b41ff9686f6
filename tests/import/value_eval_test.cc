// Unit tests of value evaluation (onnx_import/value_eval.h) through its one table (onnx_import/values/):
// each op is run on hand-made inputs and checked against the value ONNX's operator spec
// (onnx/docs/Operators.md) or ONNX Runtime's integer kernel gives, worked out by hand beside it.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "onnx_import/graph.h"
#include "onnx_import/value_eval.h"
#include "onnx_import/values/values.h"

namespace memplan::shape {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

Value ints(std::vector<int64_t> shape, std::vector<int64_t> xs, DType t = DType::Int64) {
  Value v;
  v.dtype = t;
  v.shape = std::move(shape);
  v.ints = std::move(xs);
  return v;
}

Value reals(std::vector<int64_t> shape, std::vector<double> xs, DType t = DType::Float32) {
  Value v;
  v.dtype = t;
  v.shape = std::move(shape);
  v.reals = std::move(xs);
  return v;
}

// A node of `op` in `domain` with integer attributes; the output is of `dtype` and `shape`, contents unknown.
struct Eval {
  onnx::NodeProto node;
  Value out;

  Eval(const std::string& op, DType dtype, std::vector<int64_t> shape, const std::string& domain = "") {
    node.set_op_type(op);
    node.set_domain(domain);
    out.dtype = dtype;
    out.shape = std::move(shape);
  }
  Eval& attr(const std::string& name, int64_t i) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(i);
    return *this;
  }
  Eval& ints_attr(const std::string& name, std::vector<int64_t> is) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t i : is) a->add_ints(i);
    return *this;
  }
  Value run(std::vector<const Value*> inputs, int opset = 17) {
    std::vector<Value> outputs{out};
    evaluate_values(node, opset, inputs, outputs);
    return outputs[0];
  }
};

TEST(DTypeHelpers, IntegerTypesAreTheEightIntegersAndBool) {
  // onnx.proto's integer element types whose contents memplan reads, and bool; int4/uint4 are packed.
  for (DType t : {DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8, DType::UInt16, DType::UInt32,
                  DType::UInt64, DType::Bool})
    EXPECT_TRUE(dtype_is_integer(t)) << dtype_name(t);
  for (DType t : {DType::Undefined, DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::String,
                  DType::Complex64, DType::Float8E4M3FN, DType::Int4, DType::UInt4})
    EXPECT_FALSE(dtype_is_integer(t)) << dtype_name(t);
}

TEST(DTypeHelpers, BytesPackFourBitTypesTwoPerByteAndRefuseOverflow) {
  EXPECT_EQ(dtype_bytes(DType::Float32, 3), 12u);
  EXPECT_EQ(dtype_bytes(DType::Bool, 3), 3u);
  // onnx.proto: INT4/UINT4 pack two values per byte; an odd count rounds up.
  EXPECT_EQ(dtype_bytes(DType::Int4, 5), 3u);
  EXPECT_EQ(dtype_bytes(DType::UInt4, 4), 2u);
  // 2^61 float64 values are 2^64 bytes: one past the largest uint64.
  EXPECT_EQ(dtype_bytes(DType::Float64, uint64_t{1} << 61), std::nullopt);
  // One fewer fits: 2^64 - 8 bytes.
  EXPECT_EQ(dtype_bytes(DType::Float64, (uint64_t{1} << 61) - 1), UINT64_MAX - 7);
}

TEST(DTypeHelpers, TheDefaultDomainHasTwoSpellings) {
  EXPECT_EQ(normalize_domain("ai.onnx"), "");
  EXPECT_EQ(normalize_domain(""), "");
  EXPECT_EQ(normalize_domain("com.microsoft"), "com.microsoft");
  EXPECT_EQ(normalize_domain("ai.onnx.ml"), "ai.onnx.ml");
}

TEST(ValueTable, EvaluatorsAreRegisteredForTheDefaultDomainOnly) {
  const auto& table = values::value_table();
  ASSERT_EQ(table.size(), 1u);
  const auto& ops = table.at("");
  for (const char* op : {"Shape", "Gather", "Concat", "Slice", "Add", "Mod", "Where", "ReduceProd", "Range"})
    EXPECT_TRUE(ops.count(op)) << op;
  // "ai.onnx" is the default domain too; a custom domain's Add is not ONNX's Add.
  const Value a = ints({2}, {3, 4}), b = ints({2}, {10, 20});
  EXPECT_THAT(*Eval("Add", DType::Int64, {2}, "ai.onnx").run({&a, &b}).ints, ElementsAre(13, 24));
  EXPECT_FALSE(Eval("Add", DType::Int64, {2}, "my.domain").run({&a, &b}).known());
}

TEST(ValueEval, IntegerDivTruncatesAndModFollowsTheDivisorUnlessFmod) {
  const Value a = ints({4}, {7, -7, 7, -7}), b = ints({4}, {2, 2, -2, -2});
  // C++ '/' (ONNX Runtime's Div kernel): 3, -3, -3, 3.
  EXPECT_THAT(*Eval("Div", DType::Int64, {4}).run({&a, &b}).ints, ElementsAre(3, -3, -3, 3));
  // Mod fmod=0 is Python's %: 7%2=1, -7%2=1, 7%-2=-1, -7%-2=-1.
  EXPECT_THAT(*Eval("Mod", DType::Int64, {4}).run({&a, &b}).ints, ElementsAre(1, 1, -1, -1));
  // fmod=1 is C's fmod, the sign of the dividend: 1, -1, 1, -1.
  EXPECT_THAT(*Eval("Mod", DType::Int64, {4}).attr("fmod", 1).run({&a, &b}).ints, ElementsAre(1, -1, 1, -1));
  // Division by zero leaves the value unknown instead of guessing.
  const Value zero = ints({}, {0});
  EXPECT_FALSE(Eval("Div", DType::Int64, {4}).run({&a, &zero}).known());
}

TEST(ValueEval, ComparisonsBroadcastAndGiveBool) {
  const Value a = ints({2, 1}, {1, 5}), b = ints({3}, {1, 3, 5});
  // [[1],[5]] < [1,3,5] -> [[0,1,1],[0,0,0]]
  EXPECT_THAT(*Eval("Less", DType::Bool, {2, 3}).run({&a, &b}).ints, ElementsAre(0, 1, 1, 0, 0, 0));
  EXPECT_THAT(*Eval("GreaterOrEqual", DType::Bool, {2, 3}).run({&a, &b}).ints, ElementsAre(1, 0, 0, 1, 1, 1));
}

TEST(ValueEval, FloatArithmeticIsRoundedToFloat32BeforeFloorAndCast) {
  // 0.1f + 0.2f in float32 is 0.3000000119..., so *10 then Floor gives 3 (in double 0.1+0.2 = 0.30000000000000004).
  const Value a = reals({}, {static_cast<float>(0.1)}), b = reals({}, {static_cast<float>(0.2)});
  const Value sum = Eval("Add", DType::Float32, {}).run({&a, &b});
  EXPECT_EQ((*sum.reals)[0], static_cast<double>(0.1f + 0.2f));
  const Value ten = reals({}, {10});
  const Value scaled = Eval("Mul", DType::Float32, {}).run({&sum, &ten});
  EXPECT_THAT(*Eval("Floor", DType::Float32, {}).run({&scaled}).reals, ElementsAre(3.0));
  // Cast to int64 truncates toward zero: -2.5 -> -2; to bool is "nonzero".
  const Value x = reals({3}, {-2.5, 0, 0.25});
  EXPECT_THAT(*Eval("Cast", DType::Int64, {3}).run({&x}).ints, ElementsAre(-2, 0, 0));
  EXPECT_THAT(*Eval("Cast", DType::Bool, {3}).run({&x}).ints, ElementsAre(1, 0, 1));
}

TEST(ValueEval, UnaryOpsOnIntegersStayExact) {
  const Value x = ints({4}, {-3, 0, 2, INT64_MIN + 1});
  EXPECT_THAT(*Eval("Neg", DType::Int64, {4}).run({&x}).ints, ElementsAre(3, 0, -2, INT64_MAX));
  EXPECT_THAT(*Eval("Sign", DType::Int64, {4}).run({&x}).ints, ElementsAre(-1, 0, 1, -1));
  EXPECT_THAT(*Eval("Relu", DType::Int64, {4}).run({&x}).ints, ElementsAre(0, 0, 2, 0));
  // -INT64_MIN does not fit: unknown.
  const Value min = ints({1}, {INT64_MIN});
  EXPECT_FALSE(Eval("Abs", DType::Int64, {1}).run({&min}).known());
  // Round is half to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0.
  const Value h = reals({4}, {0.5, 1.5, 2.5, -0.5});
  EXPECT_THAT(*Eval("Round", DType::Float32, {4}).run({&h}).reals, ElementsAre(0.0, 2.0, 2.0, -0.0));
}

TEST(ValueEval, SliceWithANegativeStepWalksBackwards) {
  // x = [10..15]; starts=-1, ends=-7 (clamped), step=-2 -> indices 5, 3, 1.
  const Value x = ints({6}, {10, 11, 12, 13, 14, 15});
  const Value starts = ints({1}, {-1}), ends = ints({1}, {-7}), axes = ints({1}, {0}), steps = ints({1}, {-2});
  EXPECT_THAT(*Eval("Slice", DType::Int64, {3}).run({&x, &starts, &ends, &axes, &steps}).ints, ElementsAre(15, 13, 11));
  // Opset 1 takes starts/ends as attributes: [1:3] of the same x.
  EXPECT_THAT(*Eval("Slice", DType::Int64, {2}).ints_attr("starts", {1}).ints_attr("ends", {3}).run({&x}, 1).ints,
              ElementsAre(11, 12));
}

TEST(ValueEval, TransposeTileExpandAndGatherMoveElements) {
  // [[1,2,3],[4,5,6]] transposed -> [[1,4],[2,5],[3,6]].
  const Value m = ints({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(*Eval("Transpose", DType::Int64, {3, 2}).run({&m}).ints, ElementsAre(1, 4, 2, 5, 3, 6));
  // Tile [[1,2]] by (2, 2) -> [[1,2,1,2],[1,2,1,2]].
  const Value row = ints({1, 2}, {1, 2}), reps = ints({2}, {2, 2});
  EXPECT_THAT(*Eval("Tile", DType::Int64, {2, 4}).run({&row, &reps}).ints, ElementsAre(1, 2, 1, 2, 1, 2, 1, 2));
  // Expand [[7],[8]] to [2, 3] -> [[7,7,7],[8,8,8]].
  const Value col = ints({2, 1}, {7, 8}), shape = ints({2}, {2, 3});
  EXPECT_THAT(*Eval("Expand", DType::Int64, {2, 3}).run({&col, &shape}).ints, ElementsAre(7, 7, 7, 8, 8, 8));
  // Gather axis 1 with indices [-1, 0] -> columns 2 and 0: [[3,1],[6,4]].
  const Value idx = ints({2}, {-1, 0});
  EXPECT_THAT(*Eval("Gather", DType::Int64, {2, 2}).attr("axis", 1).run({&m, &idx}).ints, ElementsAre(3, 1, 6, 4));
}

TEST(ValueEval, ReductionsHonourAxesAndKeepdimsShapes) {
  const Value m = ints({2, 3}, {1, 2, 3, 4, 5, 6});
  // Axes as attribute (opset 17 ReduceProd): over axis 1 -> [6, 120].
  EXPECT_THAT(*Eval("ReduceProd", DType::Int64, {2, 1}).ints_attr("axes", {1}).run({&m}).ints, ElementsAre(6, 120));
  // Axes as input from opset 13 for ReduceSum: over axis 0 -> [5, 7, 9].
  const Value axis0 = ints({1}, {0});
  EXPECT_THAT(*Eval("ReduceSum", DType::Int64, {1, 3}).run({&m, &axis0}, 13).ints, ElementsAre(5, 7, 9));
  // No axes: all of them. Mean of 1..6 is 3.5.
  const Value r = reals({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(*Eval("ReduceMean", DType::Float32, {1, 1}).run({&r}).reals, ElementsAre(3.5));
  // noop_with_empty_axes=1 and no axes: the input unchanged.
  EXPECT_THAT(*Eval("ReduceMax", DType::Int64, {2, 3}).attr("noop_with_empty_axes", 1).run({&m}, 18).ints,
              ElementsAreArray({1, 2, 3, 4, 5, 6}));
}

TEST(ValueEval, ShapeRangeConstantOfShapeAndWhereBuildMasks) {
  const Value x = ints({2, 5, 7}, std::vector<int64_t>(70, 0));
  // Shape with start=-2: [5, 7].
  EXPECT_THAT(*Eval("Shape", DType::Int64, {2}).attr("start", -2).run({&x}, 15).ints, ElementsAre(5, 7));
  // Range(2, 11, 3) -> 2, 5, 8.
  const Value start = ints({}, {2}), limit = ints({}, {11}), delta = ints({}, {3});
  EXPECT_THAT(*Eval("Range", DType::Int64, {3}).run({&start, &limit, &delta}).ints, ElementsAre(2, 5, 8));
  // ConstantOfShape without a value: float32 zeros.
  const Value s = ints({1}, {3});
  EXPECT_THAT(*Eval("ConstantOfShape", DType::Float32, {3}).run({&s}).reals, ElementsAre(0.0, 0.0, 0.0));
  // Where(cond, x, y) with a broadcast scalar y.
  const Value c = ints({3}, {1, 0, 1}, DType::Bool), a = ints({3}, {4, 5, 6}), y = ints({}, {-1});
  EXPECT_THAT(*Eval("Where", DType::Int64, {3}).run({&c, &a, &y}).ints, ElementsAre(4, -1, 6));
  // Max over three inputs, one broadcast: max([1,9],[5,5],[7]) = [7, 9].
  const Value p = ints({2}, {1, 9}), q = ints({2}, {5, 5}), r = ints({1}, {7});
  EXPECT_THAT(*Eval("Max", DType::Int64, {2}).run({&p, &q, &r}).ints, ElementsAre(7, 9));
}

}  // namespace
}  // namespace memplan::shape
