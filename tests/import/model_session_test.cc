// ModelSession: one read of the file, one import per binding; and the summed dimensions every import binds from
// their terms (summed_dim_terms).
#include "onnx_import/model_session.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>

#include "onnx_import/errors.h"
#include "onnx_import/shape_inference.h"
#include "tests/import/import_test_util.h"

namespace memplan {
namespace {

using testing::contains;
using testing::parse_text_model;
using testing::TempDir;

const std::string kKvTiny = std::string(MEMPLAN_SOURCE_DIR) + "/tests/models/serve/kv_tiny.onnx";

Bindings step(int64_t batch, int64_t past, int64_t fresh) {
  Bindings b;
  b.batch = batch;
  b.dims = {{"past_sequence_length", past}, {"sequence_length", fresh}};
  return b;
}

std::vector<int64_t> shape_of(const Graph& g, const std::string& name) { return g.tensors[*g.find_tensor(name)].shape; }

TEST(ModelSession, ReadsTheFileOnceAndShapesEachBindingOnce) {
  TempDir dir;
  const std::string path = (dir.path() / "kv_tiny.onnx").string();
  std::filesystem::copy_file(kKvTiny, path);
  ModelSession session(path);
  EXPECT_EQ(session.files_read(), 0);
  const auto first = session.shape(step(3, 99, 16));
  EXPECT_EQ(session.files_read(), 1);
  EXPECT_EQ(session.graphs_shaped(), 1);
  EXPECT_EQ(session.shape(step(3, 99, 16)), first);  // the same graph, not shaped again
  EXPECT_EQ(session.graphs_shaped(), 1);
  // Gone from the disk, the model is still shaped at new bindings: it is never read again.
  std::filesystem::remove(path);
  const auto other = session.shape(step(2, 5, 1));
  EXPECT_EQ(session.files_read(), 1);
  EXPECT_EQ(session.graphs_shaped(), 2);
  // past_key_values.0.key [batch, 2 heads, past, 4]; present.0.key one new token longer.
  EXPECT_EQ(shape_of(*first, "past_key_values.0.key"), (std::vector<int64_t>{3, 2, 99, 4}));
  EXPECT_EQ(shape_of(*other, "present.0.key"), (std::vector<int64_t>{2, 2, 6, 4}));
  // The same graph a fresh import of the file gives.
  const Graph fresh = import_model(kKvTiny, step(2, 5, 1));
  ASSERT_EQ(other->tensors.size(), fresh.tensors.size());
  for (size_t i = 0; i < fresh.tensors.size(); ++i) {
    EXPECT_EQ(other->tensors[i].name, fresh.tensors[i].name);
    EXPECT_EQ(other->tensors[i].shape, fresh.tensors[i].shape);
  }
}

TEST(ModelSession, AFailedBindingIsNotKept) {
  ModelSession session(kKvTiny);
  Bindings no_past;
  no_past.batch = 1;
  no_past.dims = {{"sequence_length", 4}};
  for (int i = 0; i < 2; ++i) EXPECT_THROW(session.shape(no_past), InputError);
  EXPECT_EQ(session.graphs_shaped(), 0);
  EXPECT_EQ(session.files_read(), 1);
}

TEST(ModelSession, AMissingFileIsNamed) {
  ModelSession session("/nonexistent/model.onnx");
  try {
    session.shape({});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "/nonexistent/model.onnx")) << e.what();
  }
}

TEST(SummedDims, TermsOfASum) {
  EXPECT_EQ(summed_dim_terms("past_sequence_length + sequence_length"),
            (std::vector<std::string>{"past_sequence_length", "sequence_length"}));
  EXPECT_EQ(summed_dim_terms("a + b + 1"), (std::vector<std::string>{"a", "b", "1"}));
  EXPECT_TRUE(summed_dim_terms("sequence_length").empty());
  EXPECT_TRUE(summed_dim_terms("a+b").empty());  // not written as exporters write a sum
}

// x [B, S] and m [B, "S + 1"], m's length one more than x's: Concat(x, pad) along axis 1 gives [B, S + 1] = m's.
onnx::ModelProto summed_model() {
  onnx::ModelProto m = parse_text_model(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[B, S] x, float[B, T] m) => (float[B, T] y) {
      y = Add(m, m)
    })");
  m.mutable_graph()->mutable_input(1)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_param(
      "S + 1");
  return m;
}

TEST(SummedDims, BoundFromTheirTermsUnlessBoundByHand) {
  Bindings b;
  b.batch = 2;
  b.dims = {{"S", 5}};
  InferenceResult r = infer_shapes(summed_model(), b);
  EXPECT_EQ(r.values.at("m").shape, (std::vector<int64_t>{2, 6}));  // 5 + 1
  EXPECT_EQ(r.bound_dims.at("S + 1"), 6);
  b.dims["S + 1"] = 9;  // by hand: the hand's value stands
  r = infer_shapes(summed_model(), b);
  EXPECT_EQ(r.values.at("m").shape, (std::vector<int64_t>{2, 9}));
}

TEST(SummedDims, AFreeTermIsNamed) {
  Bindings b;
  b.batch = 2;
  try {
    infer_shapes(summed_model(), b);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "input 'm' axis 1 ('S + 1', the sum of its terms): bind S with --dim NAME=N")) << e.what();
  }
}

TEST(SummedDims, ASumPastSixtyFourBitsIsAShapeOverflow) {
  Bindings b;
  b.batch = 2;
  b.dims = {{"S", INT64_MAX}};
  try {
    infer_shapes(summed_model(), b);
    ADD_FAILURE() << "no error";
  } catch (const ShapeOverflow& e) {
    EXPECT_TRUE(contains(e.what(), "dimension 'S + 1': the sum of its terms overflows 64 bits")) << e.what();
  }
}

// A config.json's graphs state their attention mask's length as the tokens it covers (config_dim_sums): bound from
// them when the user binds those and not the sum, and never over a sum the user binds.
TEST(ModelSession, AConfigsMaskLengthIsBoundFromTheTokens) {
  const std::string config = std::string(MEMPLAN_SOURCE_DIR) + "/tests/models/hf_configs/Llama-3.2-1B.json";
  ModelSession decode(config, "decode");
  const auto g = decode.shape(step(2, 7, 3));
  EXPECT_EQ(shape_of(*g, "attention_mask"), (std::vector<int64_t>{2, 10}));  // 7 cached + 3 new
  EXPECT_EQ(shape_of(*g, "present.15.value"), (std::vector<int64_t>{2, 8, 10, 64}));
  Bindings prefill;
  prefill.batch = 1;
  prefill.dims = {{"sequence_length", 5}};
  EXPECT_EQ(shape_of(*ModelSession(config, "prefill").shape(prefill), "attention_mask"), (std::vector<int64_t>{1, 5}));
  Bindings given = step(1, 7, 3);
  given.dims["total_sequence_length"] = 10;
  EXPECT_EQ(shape_of(*decode.shape(given), "attention_mask"), (std::vector<int64_t>{1, 10}));
  Bindings past_only;  // a term unbound: the mask stays unbound, and says so
  past_only.batch = 1;
  past_only.dims = {{"past_sequence_length", 7}};
  try {
    decode.shape(past_only);
    ADD_FAILURE() << "shaped without sequence_length";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "('total_sequence_length')")) << e.what();
  }
}

}  // namespace
}  // namespace memplan
