// LoRA-style training over a GPTQ or AWQ 4-bit base (--frozen-dtype gptq-int4 / awq-int4, cost_models/
// training_packed.cc, frozen_storage.h); every figure worked out by hand in the comments.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"
#include "cost_models/packed_int_weights.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::last_reader;
using testing::step_reads;

// x[B,S,64] -> Linear Wa[64,64] (trains) -> a -> Linear W1[32,64] (frozen: 64 inputs, 32 outputs) -> h[B,S,32]
// -> Linear W2[8,32] (the head, trains) -> y. Each Linear is MatMul(x, Transpose(W)), nn.Linear's export.
Graph three_linears(int64_t batch, int64_t seq) {
  GraphBuilder b;
  auto linear = [&](int32_t in, const std::string& w, int64_t out_f, int64_t in_f, const std::string& y) {
    const int32_t wt = b.node1("Transpose", {b.weight(w, {out_f, in_f})}, w + "_t", {in_f, out_f},
                               {{"perm", testing::ints_attr({1, 0})}});
    return b.node1("MatMul", {in, wt}, y, {batch, seq, out_f});
  };
  const int32_t x = b.input("x", {batch, seq, 64});
  const int32_t a = linear(x, "Wa", 64, 64, "a");
  const int32_t h = linear(a, "W1", 32, 64, "h");
  b.output(linear(h, "W2", 8, 32, "y"));
  return b.graph();
}

TrainingRun packed(FrozenStorage s, Precision p) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;
  o.loss = LossKind::CrossEntropy;
  o.precision = p;
  o.trainable = "Wa|W2";
  o.frozen_storage = s;
  return o;
}

int count_packed(const Program& p, const std::string& name) {
  int n = 0;
  for (const Buffer& b : p.buffers) n += b.name == name;
  return n;
}

// The one packing rule (packed_int_weights.h), on a 4096 x 4096 layer in groups of 128 (32 groups), float16 scales:
//   GPTQ: qweight 4096 x 4 / 32 = 512 rows x 4096 x 4 B = 8,388,608; qzeros 32 x (4096 x 4 / 32 = 512) x 4 = 65,536;
//         scales 32 x 4096 x 2 = 262,144; g_idx 4096 x 4 = 16,384 (only when asked for).
//   AWQ:  qweight 4096 x (4096 / 8 = 512) x 4 = 8,388,608; qzeros 32 x 512 x 4 = 65,536; scales 262,144.
TEST(PackedInt, GptqAndAwqLayoutsByHand) {
  const PackedIntWeight g = gptq_packed(4096, 4096, 4, 32, 2, true);
  EXPECT_EQ(g.qweight, 8388608u);
  EXPECT_EQ(g.qzeros, 65536u);
  EXPECT_EQ(g.scales, 262144u);
  EXPECT_EQ(g.g_idx, 16384u);
  EXPECT_EQ(g.total(), 8732672u);
  EXPECT_EQ(gptq_packed(4096, 4096, 4, 32, 2, false).total(), 8716288u);
  const PackedIntWeight a = awq_packed(4096, 4096, 32, 2);
  EXPECT_EQ(a.qweight, 8388608u);
  EXPECT_EQ(a.qzeros, 65536u);
  EXPECT_EQ(a.scales, 262144u);
  EXPECT_EQ(a.g_idx, 0u);
  EXPECT_EQ(a.total(), 8716288u);
}

// W1 (64 inputs, 32 outputs) as gptqmodel registers it, with g_idx: qweight 64 x 4 / 32 = 8 rows x 32 x 4 = 1024;
// groups of 128: ceil(64 / 128) = 1 group, qzeros 1 x (32 x 4 / 32 = 4) x 4 = 16, scales 1 x 32 x 2 = 64; g_idx
// 64 x 4 = 256: 1360 bytes. Groups of 32: 2 groups, qzeros 32, scales 128: 1440. Wa and W2 train (bf16, stored
// as they are); W1 is the only re-stored weight.
TEST(PackedFrozen, GptqStoresTheLayerPacked) {
  TrainingRun o = packed(FrozenStorage::GptqInt4, Precision::Bf16);
  TrainingResult r = build_training_program(three_linears(2, 4), o);
  EXPECT_EQ(r.program.buffers[buffer_named(r.program, "W1")].bytes, 1360u);
  EXPECT_EQ(r.frozen_stored_bytes, 1360u);
  o.quant_group_size = 32;
  r = build_training_program(three_linears(2, 4), o);
  EXPECT_EQ(r.frozen_stored_bytes, 1440u);
}

// AWQ, W1 in groups of 32 (2 groups): qweight 64 x (32 / 8 = 4) x 4 = 1024, qzeros 2 x 4 x 4 = 32, scales
// 2 x 32 x 2 = 128: 1184. One group (-1): 1024 + 16 + 64 = 1104. Groups of 128 do not divide 64 inputs:
// WQLinear_GEMM's assert, an InputError naming the weight.
TEST(PackedFrozen, AwqStoresTheLayerPackedOrRefusesItsShape) {
  TrainingRun o = packed(FrozenStorage::AwqInt4, Precision::Fp16);
  o.quant_group_size = 32;
  EXPECT_EQ(build_training_program(three_linears(2, 4), o).frozen_stored_bytes, 1184u);
  o.quant_group_size = -1;
  EXPECT_EQ(build_training_program(three_linears(2, 4), o).frozen_stored_bytes, 1104u);
  o.quant_group_size = 128;
  try {
    build_training_program(three_linears(2, 4), o);
    ADD_FAILURE() << "64 inputs in groups of 128 were not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'W1'"), std::string::npos) << e.what();
  }
}

// GPTQ, bf16 model: TorchQuantLinear dequantizes W1 into float16 (64 x 32 x 2 = 4096 bytes), copies it into
// bfloat16 (4096) for torch.matmul, and mm keeps that copy for a's grad: it lives until W1's backward, which
// dequantizes nothing (one dequantization in the whole step). The float16 result dies with its step.
TEST(PackedFrozen, GptqKeepsTheDequantizedWeightForTheInputGrad) {
  const Program p = build_training_program(three_linears(2, 4), packed(FrozenStorage::GptqInt4, Precision::Bf16)).program;
  const int32_t fp16 = buffer_named(p, "W1:dequantized");
  const int32_t bf16 = buffer_named(p, "W1:dequantized:bfloat16");
  ASSERT_GE(fp16, 0);
  ASSERT_GE(bf16, 0);
  EXPECT_EQ(p.buffers[fp16].bytes, 4096u);
  EXPECT_EQ(p.buffers[bf16].bytes, 4096u);
  EXPECT_EQ(count_packed(p, "W1:dequantized"), 1);
  EXPECT_EQ(last_reader(p, fp16), -1);  // written, never read again: freed at its own step
  const int32_t reader = last_reader(p, bf16);
  ASSERT_GE(reader, 0);
  EXPECT_EQ(p.steps[reader].name, "backward:/MatMul_3");
  EXPECT_EQ(p.steps[reader].phase, Phase::Backward);

  // fp16 model: the float16 result is what mm keeps; no copy.
  const Program q = build_training_program(three_linears(2, 4), packed(FrozenStorage::GptqInt4, Precision::Fp16)).program;
  EXPECT_EQ(buffer_named(q, "W1:dequantized:float16"), -1);
  const int32_t kept = buffer_named(q, "W1:dequantized");
  ASSERT_GE(kept, 0);
  EXPECT_EQ(q.steps[last_reader(q, kept)].name, "backward:/MatMul_3");
}

// When W1's input needs no grad (only the head trains; Wa is then a frozen GPTQ layer too), mm keeps nothing:
// the bfloat16 copy dies with its forward step.
TEST(PackedFrozen, GptqKeepsNothingWhenTheInputNeedsNoGrad) {
  TrainingRun o = packed(FrozenStorage::GptqInt4, Precision::Bf16);
  o.trainable = "W2";
  const Program p = build_training_program(three_linears(2, 4), o).program;
  const int32_t bf16 = buffer_named(p, "W1:dequantized:bfloat16");
  ASSERT_GE(bf16, 0);
  EXPECT_EQ(last_reader(p, bf16), -1);
}

// AWQ, fp16, batch 2 x 4 tokens: x.shape[0] * x.shape[1] = 8 < 1024, so gemm_forward_cuda writes 8 split-K partial
// products of M = 8 rows x 32 outputs in float16: 8 x 8 x 32 x 2 = 4096 bytes, and no dequantized weight in
// forward. WQLinearMMFunction keeps its input a (2 x 4 x 64 x 2 = 1024 bytes) for backward, which dequantizes W1
// (64 x 32 x 2 = 4096) and repeats it per sequence, batch_size = 2: 8192 bytes, both in W1's backward step.
TEST(PackedFrozen, AwqSplitKForwardAndRepeatedWeightInBackward) {
  TrainingRun o = packed(FrozenStorage::AwqInt4, Precision::Fp16);
  o.quant_group_size = 32;
  const Program p = build_training_program(three_linears(2, 4), o).program;
  const int32_t split = buffer_named(p, "/MatMul_3:awq_split_k");
  ASSERT_GE(split, 0);
  EXPECT_EQ(p.buffers[split].bytes, 4096u);
  EXPECT_EQ(count_packed(p, "W1:dequantized"), 1);
  const int32_t backward = testing::step_named(p, "backward:/MatMul_3");
  ASSERT_GE(backward, 0);
  const int32_t w = buffer_named(p, "W1:dequantized");
  const int32_t rep = buffer_named(p, "W1:dequantized:repeat");
  ASSERT_GE(rep, 0);
  EXPECT_EQ(p.buffers[w].bytes, 4096u);
  EXPECT_EQ(p.buffers[rep].bytes, 8192u);
  const std::vector<int32_t>& writes = p.steps[backward].writes;
  EXPECT_NE(std::find(writes.begin(), writes.end(), w), writes.end());
  EXPECT_NE(std::find(writes.begin(), writes.end(), rep), writes.end());
  const int32_t a = buffer_named(p, "a");
  EXPECT_EQ(p.buffers[a].bytes, 1024u);
  EXPECT_TRUE(step_reads(p.steps[backward], a));
}

// AWQ at 4 x 256 = 1024 tokens: the forward dequantizes the whole weight (4096 bytes) for torch.matmul, and the
// backward again (two dequantizations), with the weight repeated for the 4 sequences: 4 x 4096 = 16384 bytes.
TEST(PackedFrozen, AwqDequantizesInForwardFrom1024Tokens) {
  TrainingRun o = packed(FrozenStorage::AwqInt4, Precision::Fp16);
  o.quant_group_size = 32;
  const Program p = build_training_program(three_linears(4, 256), o).program;
  EXPECT_EQ(buffer_named(p, "/MatMul_3:awq_split_k"), -1);
  EXPECT_EQ(count_packed(p, "W1:dequantized"), 2);
  EXPECT_EQ(p.buffers[buffer_named(p, "W1:dequantized:repeat")].bytes, 16384u);
}

}  // namespace
}  // namespace memplan
