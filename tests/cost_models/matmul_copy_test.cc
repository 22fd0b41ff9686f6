// PyTorch's matmul copies an operand whose batch dimensions no view can merge (tensor_strides.h), and autograd keeps
// that copy in the operand's place. Figures by hand; the copies as torch 1.13 makes them on the CPU (measured with
// torch.profiler: probs @ v of a transposed [2, 64, 4, 16] value allocates one 32,768-byte tensor in matmul,
// q @ k.transpose(2, 3) none).
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "cost_models/tensor_strides.h"
#include "graph_builder.h"
#include "run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::GraphBuilder;
using testing::ints_attr;
using testing::last_reader;
using testing::step_named;

TEST(TensorStrides, ViewsMergeOnlyDimensionsThatChain) {
  // A contiguous [2, 3, 4] viewed as [6, 4]: strides (4, 1).
  EXPECT_EQ(view_strides({2, 3, 4}, {12, 4, 1}, {6, 4}), (Strides{4, 1}));
  // Its transpose [2, 4, 3] (strides 12, 1, 4) as [8, 3]: the 4 and 3 do not chain (1 != 3 x 4): no view.
  EXPECT_FALSE(view_strides({2, 4, 3}, {12, 1, 4}, {8, 3}));
  // Keys [2, 4, 64, 16] transposed to [2, 4, 16, 64] (strides 4096, 1024, 1, 16) as bmm's [8, 16, 64]: batch and
  // heads chain (4096 = 4 x 1024): strides (1024, 1, 16).
  EXPECT_EQ(view_strides({2, 4, 16, 64}, {4096, 1024, 1, 16}, {8, 16, 64}), (Strides{1024, 1, 16}));
  // Values [2, 64, 4, 16] transposed to [2, 4, 64, 16] (strides 4096, 16, 64, 1): 4096 != 4 x 16: no view.
  EXPECT_FALSE(view_strides({2, 4, 64, 16}, {4096, 16, 64, 1}, {8, 64, 16}));
  // Size-1 dimensions never break a run.
  EXPECT_EQ(view_strides({1, 4, 1, 5}, {99, 5, 7, 1}, {20}), (Strides{1}));
  EXPECT_TRUE(is_contiguous_layout({2, 1, 3}, {3, 99, 1}));
  EXPECT_FALSE(is_contiguous_layout({2, 3}, {1, 2}));
}

// DeepSeek's attention tail: kv[2, 8, 64] (b, s, heads 2 x (nope 16 + v 16)) -> Reshape [2, 8, 2, 32] (a view) ->
// Transpose(0, 2, 1, 3) -> Split [16, 16] on the last axis -> k_pass, value; probs[2, 2, 8, 8] @ value -> out
// [2, 2, 8, 16]; the keys cat(k_pass, k_rot), contiguous [2, 2, 8, 32]: q[2, 2, 8, 32] @ Transpose(keys, 0, 1, 3, 2)
// -> scores [2, 2, 8, 8] (needs no copy).
Graph mla_tail() {
  GraphBuilder b;
  const int32_t kv = b.input("kv", {2, 8, 64});
  const int32_t q = b.input("q", {2, 2, 8, 32});
  const int32_t k_rot = b.input("k_rot", {2, 2, 8, 16});
  const int32_t probs = b.input("probs", {2, 2, 8, 8});
  const int32_t kv4 = b.node1("Reshape", {kv, b.int_constant("shape", {2, 8, 2, 32})}, "kv4", {2, 8, 2, 32});
  const int32_t kvt = b.node1("Transpose", {kv4}, "kvt", {2, 2, 8, 32}, {{"perm", ints_attr({0, 2, 1, 3})}});
  const int32_t k_pass = b.node("Split", {kvt, b.int_constant("split", {16, 16})},
                                {{"k_pass", {2, 2, 8, 16}}, {"value", {2, 2, 8, 16}}}, {{"axis", testing::int_attr(-1)}});
  const int32_t value = k_pass + 1;
  const int32_t keys = b.node1("Concat", {k_pass, k_rot}, "keys", {2, 2, 8, 32}, {{"axis", testing::int_attr(-1)}});
  const int32_t kt = b.node1("Transpose", {keys}, "kt", {2, 2, 32, 8}, {{"perm", ints_attr({0, 1, 3, 2})}});
  const int32_t scores = b.node1("MatMul", {q, kt}, "scores", {2, 2, 8, 8});
  const int32_t out = b.node1("MatMul", {probs, value}, "out", {2, 2, 8, 16});
  b.output(scores);
  b.output(out);
  return b.graph();
}

TEST(MatmulCopy, PyTorchCopiesAValueNoViewCanBatch) {
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const Program p = build_inference_program(mla_tail(), o).program;
  // value: 2 x 2 x 8 x 16 float32 = 2,048 B, copied once, at the matmul that reads it; the transposed keys are
  // read as a view (bmm takes [4, 32, 8] with strides (256, 1, 32)).
  const int32_t copy = buffer_named(p, "value:matmul_copy");
  ASSERT_GE(copy, 0);
  EXPECT_EQ(p.buffers[copy].bytes, 2048u);
  EXPECT_EQ(buffer_named(p, "kt:matmul_copy"), -1);
  EXPECT_EQ(buffer_named(p, "q:matmul_copy"), -1);
  // Keys transposed straight from the split would not batch either (strides 512, 32, 1, 64: 512 != 2 x 32).
  EXPECT_FALSE(view_strides({2, 2, 16, 8}, {512, 32, 1, 64}, {4, 16, 8}));
  EXPECT_EQ(buffer_named(p, "probs:matmul_copy"), -1);
  // ONNX Runtime's Transpose and Split write contiguous outputs: no copy.
  o.runtime = Runtime::OnnxRuntime;
  EXPECT_EQ(buffer_named(build_inference_program(mla_tail(), o).program, "value:matmul_copy"), -1);
}

TEST(MatmulCopy, AutogradKeepsTheCopyNotTheTensorItViews) {
  GraphBuilder b;
  const int32_t kv = b.weight("kv_w", {2, 8, 64});  // stands for kv_b_proj's output: a tensor that needs a grad
  const int32_t probs = b.weight("probs_w", {2, 2, 8, 8});
  const int32_t kv2 = b.node1("Relu", {kv}, "kv", {2, 8, 64});
  const int32_t p2 = b.node1("Relu", {probs}, "probs", {2, 2, 8, 8});
  const int32_t kv4 = b.node1("Reshape", {kv2, b.int_constant("shape", {2, 8, 2, 32})}, "kv4", {2, 8, 2, 32});
  const int32_t kvt = b.node1("Transpose", {kv4}, "kvt", {2, 2, 8, 32}, {{"perm", ints_attr({0, 2, 1, 3})}});
  const int32_t k_pass = b.node("Split", {kvt, b.int_constant("split", {16, 16})},
                                {{"k_pass", {2, 2, 8, 16}}, {"value", {2, 2, 8, 16}}}, {{"axis", testing::int_attr(-1)}});
  const int32_t out = b.node1("MatMul", {p2, k_pass + 1}, "out", {2, 2, 8, 16});
  b.output(out);
  TrainingRun o;
  o.runtime = Runtime::PyTorch;
  const Program p = build_training_program(b.graph(), o).program;
  const int32_t copy = buffer_named(p, "value:matmul_copy");
  ASSERT_GE(copy, 0);
  EXPECT_EQ(p.buffers[copy].bytes, 2048u);
  // BmmBackward0 keeps the copy (probs needs a grad), read by the MatMul's backward; kv's 4,096-byte output is
  // then kept only by Relu's backward (its result), not by the matmul's.
  const int32_t copy_reader = last_reader(p, copy);
  ASSERT_GE(copy_reader, 0);
  EXPECT_EQ(p.steps[copy_reader].phase, Phase::Backward);
  EXPECT_LT(step_named(p, "out"), copy_reader);
}

}  // namespace
}  // namespace memplan
