// PEFT's k-bit preparation over an NF4 base (--kbit-prep, cost_models/kbit_prep.h); bytes worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::buffer_ending;
using testing::step_reads;

// x[4,8] -> MatMul(x, Transpose(W1[16,8])) -> h[4,16] -> Relu -> r -> MatMul(r, Transpose(W2[2,16])) -> y[4,2] (the
// head), LoRA r 2 on W1, --precision bf16 --frozen-dtype nf4.
Graph two_linears() {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t w1t = b.node1("Transpose", {b.weight("W1", {16, 8})}, "W1_t", {8, 16}, {{"perm", testing::ints_attr({1, 0})}});
  const int32_t h = b.node1("MatMul", {x, w1t}, "h", {4, 16});
  const int32_t r = b.node1("Relu", {h}, "r", {4, 16});
  const int32_t w2t = b.node1("Transpose", {b.weight("W2", {2, 16})}, "W2_t", {16, 2}, {{"perm", testing::ints_attr({1, 0})}});
  b.output(b.node1("MatMul", {r, w2t}, "y", {4, 2}));
  return b.graph();
}

TrainingRun qlora_kbit_prep(bool kbit) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;
  o.loss = LossKind::CrossEntropy;
  o.precision = Precision::Bf16;
  o.lora_rank = 2;
  o.lora_targets = "W1";
  o.frozen_storage = FrozenStorage::Nf4;
  o.kbit_prep = kbit;
  return o;
}

// Without the preparation the model is bf16: x 4x8x2 = 64 bytes, h and r 128, the head W2 2x16x2 = 64.
// With it, what bitsandbytes left unquantized is float32: x 128, the head 2x16x4 = 128, r 256; W1's 4-bit layer
// copies x into bf16 (64, read by the GEMM, not kept: x needs no grad) and writes h in bf16 (128), which is
// copied back into float32 (256) for every reader (LoRA's sum); the dequantized weight is bf16 (16x8x2 = 256).
TEST(KbitPrep, EverythingButThe4BitGemmIsFloat32) {
  const Program plain = build_training_program(two_linears(), qlora_kbit_prep(false)).program;
  EXPECT_EQ(plain.buffers[buffer_named(plain, "x")].bytes, 64u);
  EXPECT_EQ(plain.buffers[buffer_named(plain, "r")].bytes, 128u);
  EXPECT_EQ(plain.buffers[buffer_named(plain, "W2")].bytes, 64u);

  const TrainingResult result = build_training_program(two_linears(), qlora_kbit_prep(true));
  const Program& p = result.program;
  EXPECT_EQ(p.buffers[buffer_named(p, "x")].bytes, 128u);
  EXPECT_EQ(p.buffers[buffer_named(p, "W2")].bytes, 128u);
  EXPECT_EQ(p.buffers[buffer_named(p, "r")].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "h")].bytes, 128u);
  const int32_t copy = buffer_ending(p, "/to_compute_dtype_output_0");
  const int32_t back = buffer_ending(p, "/to_input_dtype_output_0");
  ASSERT_GE(copy, 0);
  ASSERT_GE(back, 0);
  EXPECT_EQ(p.buffers[copy].bytes, 64u);
  EXPECT_EQ(p.buffers[back].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "W1:dequantized")].bytes, 256u);
  for (const Step& s : p.steps) {
    if (s.phase == Phase::Backward) {
      EXPECT_FALSE(step_reads(s, copy)) << s.name << " keeps the bf16 copy of x";
    }
  }
  EXPECT_NE(std::find_if(result.notes.begin(), result.notes.end(),
                         [](const std::string& s) { return s.find("1 4-bit layers") != std::string::npos; }),
            result.notes.end());
}

// bnb_4bit_compute_dtype float32, BitsAndBytesConfig's default (--precision fp32): x.to(float32) and out.to(float32)
// return their input, so no copy is made and the dequantized weight is float32 (16x8x4 = 512).
TEST(KbitPrep, Float32ComputeCopiesNothing) {
  TrainingRun o = qlora_kbit_prep(true);
  o.precision = Precision::Fp32;
  const Program p = build_training_program(two_linears(), o).program;
  EXPECT_EQ(buffer_ending(p, "/to_compute_dtype_output_0"), -1);
  EXPECT_EQ(buffer_ending(p, "/to_input_dtype_output_0"), -1);
  EXPECT_EQ(p.buffers[buffer_named(p, "h")].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "W1:dequantized")].bytes, 512u);
}

}  // namespace
}  // namespace memplan
