// FSDP2 over torchao's NF4 bases (--shard fsdp2 --frozen-dtype nf4 --lora-rank R: torchtune's distributed QLoRA),
// on a tiny graph and 2 ranks; every expected number is worked out by hand below from torchao's NF4Tensor layout
// (to_nf4, block 64, scaler block 256) and fully_shard's rules (cost_models/training_fsdp2.cc), never read back
// from the code.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "planner/liveness.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::int_attr;
using testing::step_named;
using testing::two_fc_blocks;
using testing::bytes_of;

// x[4,256] -> MatMul(layers.0.fc.w [256,128]) -> Relu -> MatMul(layers.1.fc.w [128,256]) -> Relu
//   -> Gemm(head.w [2,256] transposed, head.b [2]) -> y[4,2]; units root {head.w, head.b}, layers.0, layers.1.
Graph qlora_blocks() { return two_fc_blocks(256, 128); }

// torchtune's run: the model in bf16 (no autocast, no MixedPrecisionPolicy), adapters in bf16, Adam; a qlora_* model.
TrainingRun qlora(int gpus) { return fsdp2_qlora(gpus, /*torchao=*/true); }

// Each fc.w: 32,768 values in bf16. torchao's NF4Tensor: quantized_data 32,768 / 2 = 16,384 B (uint8);
// quantized_scalers 32,768 / 64 = 512 blocks, 512 B (int8); quantization_factor 512 / 256 = 2 values x 2 B = 4 B;
// these three are sharded and all-gathered: 16,900 B, 8,450 B a rank. scaler_mean (1 value) and the nf4 table
// (16 values), 17 x 2 = 34 B, every rank whole: the NF4 shard is 8,450 + 34 = 8,484 B a rank.
// Adapters (bf16, rank 2; lora_A [2, in], lora_B [out, 2]), each sharded on dim 0 (ceil(dim0 / 2) rows):
//  layers.0 (in 256, out 128): lora_A 1 row x 256 = 512 B, lora_B 64 rows x 2 = 256 B: 768 B;
//  layers.1 (in 128, out 256): lora_A 1 row x 128 = 256 B, lora_B 128 rows x 2 = 512 B: 768 B.
// A layer unit: resident 8,484 + 768 = 9,252 B; all-gathered 16,900 + 2 x 768 = 18,436 B (NF4-sized: the bf16
// weight alone would be 65,536 B). The root (frozen head, not NF4: the layer writing the graph's output stays
// nn.Linear): head.w 1 row x 256 x 2 = 512 B, head.b 1 x 2 = 2 B: 514 B, gathered 1,028 B.
// Per rank: parameters 2 x 9,252 + 514 = 19,018 B, of which NF4 2 x 8,484 = 16,968 B; grads only the adapters'
// shards 2 x 768 = 1,536 B (bf16); Adam's two states on them 3,072 B. The reduce-scatter input of a layer: its
// adapters' grads padded on dim 0, 2 x 768 = 1,536 B. linear_nf4 dequantizes the weight to bf16 for each matmul,
// 32,768 x 2 = 65,536 B, in forward and again in backward.
TEST(Fsdp2Nf4, ShardGatherAndDequantizeByHand) {
  const TrainingResult r = build_training_program(qlora_blocks(), qlora(2));
  const Program& p = r.program;
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.0"), 9252u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.1"), 9252u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:root"), 514u);
  EXPECT_EQ(r.param_bytes, 19018u);
  EXPECT_EQ(r.frozen_stored_bytes, 16968u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_output:layers.0"), 18436u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.0"), 18436u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.1:backward"), 18436u);
  EXPECT_EQ(r.grad_bytes, 1536u);
  EXPECT_EQ(r.optimizer_state_bytes, 3072u);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:layers.0"), 1536u);
  EXPECT_EQ(bytes_of(p, "fsdp2_grad_shard:layers.0"), 768u);
  EXPECT_EQ(buffer_named(p, "grad:layers.0.fc.w:view"), -1);  // the NF4 base gets no grad
  int dequantized = 0;
  for (const Buffer& b : p.buffers)
    if (b.name == "layers.1.fc.w:dequantized") {
      EXPECT_EQ(b.bytes, 65536u);
      ++dequantized;
    }
  // layers.1's: forward and the input grad's backward (r0 needs a grad: layers.0's adapters train). layers.0's
  // input x needs none, so its backward dequantizes nothing.
  EXPECT_EQ(dequantized, 2);
}

// The gathered weights alive at layers.1's forward matmul (/MatMul_2; the Weight category, resident shards apart):
// the root's unsharded parameters 1,028 (the root is not resharded after forward; its all-gather output was freed
// by layers.0's all-gather), layers.1's all-gather output, kept until the root's post-forward, and its unsharded
// NF4 (18,436 + 18,436; layers.0's output was freed by this all-gather, layers.0 resharded after its forward), and
// the bf16 dequantized weight 65,536: 1,028 + 36,872 + 65,536 = 103,436 B.
TEST(Fsdp2Nf4, PeakWeightsAtTheNf4MatmulByHand) {
  const Program p = build_training_program(qlora_blocks(), qlora(2)).program;
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  const int32_t s = step_named(p, "/MatMul_2");
  ASSERT_GE(s, 0);
  EXPECT_EQ(live.per_step_by_category[s][static_cast<int>(Category::Weight)], 103436u);
}

// NF4Tensor.get_original_weight, the step before each linear_nf4 matmul, for a 32,768-value bf16 weight: two int64
// index tensors 2 x 16,384 x 8 = 262,144 B, the looked-up and the scaled halves 4 x 16,384 x 2 = 131,072 B, the
// dequantized scalers 512 x 2 = 1,024 B: 394,240 B of intermediates, all live at its torch.stack beside the
// 65,536 B result, and freed when it returns (the matmul then sees the result alone). Forward and backward for
// layers.1 (whose input needs a grad), forward only for layers.0.
TEST(Fsdp2Nf4, GetOriginalWeightsIntermediatesByHand) {
  const Program p = build_training_program(qlora_blocks(), qlora(2)).program;
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  int steps = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i].name != "linear_nf4:get_original_weight:layers.1.fc.w") continue;
    ++steps;
    EXPECT_EQ(live.per_step_by_category[i][static_cast<int>(Category::Workspace)], 394240u) << i;
  }
  EXPECT_EQ(steps, 2);
  int scratch = 0;
  for (const Buffer& b : p.buffers)
    if (b.name == "layers.0.fc.w:get_original_weight" || b.name == "layers.1.fc.w:get_original_weight") {
      EXPECT_EQ(b.bytes, 394240u);
      ++scratch;
    }
  EXPECT_EQ(scratch, 3);
  const int32_t matmul = step_named(p, "/MatMul_2");
  ASSERT_GE(matmul, 0);
  EXPECT_EQ(live.per_step_by_category[matmul][static_cast<int>(Category::Workspace)], 0u);
}

// The step's peak (the planner's lower bound over non-resident buffers) is layers.1's get_original_weight in
// backward, for the input grad of its base matmul. Live there, bf16 throughout:
//  x [4,256] 2,048 (lora_A of layers.0 keeps it for its weight's grad); the root's unsharded parameters 1,028;
//  layers.0's lora_A output [4,2] 16 (kept by lora_B); the [4,128] tensor layers.0's Relu keeps, 1,024; the
//  output y [4,2] 16 (it seeds backward); layers.1's unsharded NF4 unit 18,436 and layers.0's all-gather output,
//  prefetched by layers.1's pre-backward, 18,436; the grad of layers.1's output [4,256] 2,048; the unsharded
//  adapter grads waiting for layers.1's reduce-scatter, lora_B [256,2] 1,024 and lora_A [2,128] 512; the grad of
//  r0 [4,128] so far (lora_A's part) 1,024; the dequantized weight 65,536 and get_original_weight's intermediates
//  394,240. Sum: 505,388 B. Resident beside it: the shards 19,018 and Adam's states 3,072 = 22,090 B.
TEST(Fsdp2Nf4, PeakStepByHand) {
  const Program p = build_training_program(qlora_blocks(), qlora(2)).program;
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  EXPECT_EQ(live.peak_bytes, 505388u);
  EXPECT_EQ(live.resident_bytes, 22090u);
  EXPECT_EQ(p.steps[live.peak_step].name, "linear_nf4:get_original_weight:layers.1.fc.w");
  EXPECT_EQ(p.steps[live.peak_step].phase, Phase::Backward);
}

// What autograd keeps of an NF4 layer's input. x[4,256] -> MatMul(layers.0.up.w [256,256], LoRA) -> h0 [4,256] (the
// adapter's Add) -> MatMul(layers.0.gate.w [256,128], NF4, no adapter) + gate.b (one Linear) -> Gemm(head) -> y.
// h0 needs a grad (the up adapters train) but no op's backward needs h0 itself: the gate layer's input grad needs
// only its weight.
// torchao's LinearNF4 saves the NF4 weight alone, so h0 dies in forward at the gate matmul; bitsandbytes'
// MatMul4Bit (the FSDP1 run: PEFT's Linear4bit) keeps ctx.tensors = (A, B), so h0 lives to the gate's backward.
TEST(Fsdp2Nf4, Nf4LinearSavesItsWeightNotItsInput) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 256});
  const int32_t h0 = b.node1("MatMul", {x, b.weight("layers.0.up.w", {256, 256})}, "h0", {4, 256});
  const int32_t m = b.node1("MatMul", {h0, b.weight("layers.0.gate.w", {256, 128})}, "m", {4, 128});
  const int32_t g = b.node1("Add", {m, b.weight("layers.0.gate.b", {128})}, "g", {4, 128});
  const int32_t y = b.node1("Gemm", {g, b.weight("head.w", {2, 128}), b.weight("head.b", {2})}, "y", {4, 2},
                            {{"transB", int_attr(1)}});
  b.output(y);
  TrainingRun o = qlora(2);
  o.lora_targets = "up";
  auto last_phase = [&](const TrainingRun& run) {
    const Program p = build_training_program(b.graph(), run).program;
    const int32_t h = buffer_named(p, "/layers.0.up.w/lora/Add_output_0");
    EXPECT_GE(h, 0);
    return h < 0 ? Phase::Forward : p.steps[compute_liveness(p)[h].last].phase;
  };
  EXPECT_EQ(last_phase(o), Phase::Forward);
  o.shard = Sharding::Fsdp;
  o.nf4_torchao = false;  // PEFT's Linear4bit under FSDP1
  EXPECT_EQ(last_phase(o), Phase::Backward);
}

// torchao's constraints, refused naming the weight: to_nf4 needs whole blocks of 64 x 256 values; nf4_split needs
// dim 0 and the scaler blocks to divide by the ranks (32,768 values are 2 blocks: 4 ranks cannot split them).
TEST(Fsdp2Nf4, TorchaosDivisibilityIsRefused) {
  try {
    build_training_program(qlora_blocks(), qlora(4));
    ADD_FAILURE() << "4 ranks over 2 scaler blocks: not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.fc.w"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nf4_split"), std::string::npos) << e.what();
  }
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 64});
  const int32_t h = b.node1("MatMul", {x, b.weight("layers.0.fc.w", {64, 64})}, "h", {4, 64});
  const int32_t y = b.node1("Gemm", {h, b.weight("head.w", {2, 64}), b.weight("head.b", {2})}, "y", {4, 2},
                            {{"transB", int_attr(1)}});
  b.output(y);
  try {
    build_training_program(b.graph(), qlora(2));
    ADD_FAILURE() << "4,096 values: not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("16384"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memplan
