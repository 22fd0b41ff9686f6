// DeepSpeed ZeRO-1/2 (--deepspeed): DeepSpeedZeroOptimizer's buffers on small graphs, every figure by hand from
// deepspeed/runtime/zero/stage_1_and_2.py (DeepSpeed edaa722; the rules: cost_models/deepspeed_zero.h).
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "cost_models/deepspeed_zero.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;
using testing::GraphBuilder;
using testing::int_attr;
using testing::peak_live_bytes;
using testing::resident_bytes;

// x[4,8] -> Gemm(W1[16,8], b1[16]) -> h -> Relu -> r -> Gemm(W2[2,16], b2[2]) -> y[4,2], float32.
// P = 128 + 16 + 32 + 2 = 178 elements (712 bytes).
Graph zero_mlp() {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h = b.node1("Gemm", {x, b.weight("W1", {16, 8}), b.weight("b1", {16})}, "h", {4, 16}, {{"transB", int_attr(1)}});
  const int32_t r = b.node1("Relu", {h}, "r", {4, 16});
  const int32_t y = b.node1("Gemm", {r, b.weight("W2", {2, 16}), b.weight("b2", {2})}, "y", {4, 2}, {{"transB", int_attr(1)}});
  b.output(y);
  return b.graph();
}

TrainingRun zero(int stage, uint64_t bucket, bool overlap) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::CrossEntropy;
  o.gpus = 2;
  o.shard = stage == 1 ? Sharding::Zero1 : Sharding::Zero2;
  o.deepspeed.enabled = true;
  o.deepspeed.stage = stage;
  o.deepspeed.reduce_bucket_size = bucket;
  o.deepspeed.overlap_comm = overlap;
  return o;
}

// The flat group: 178 elements padded to a multiple of 2 x 2 = 180; partition 180 / 2 = 90. Rank 0's partition is
// [0, 90): W1 starts at 0 (in), b1 at 128, W2 at 144, b2 at 176 (out): grads_in_partition = W1's 128 whole elements.
// With 4 GPUs: a multiple of 8, 184, partition 46, again only W1.
TEST(DeepSpeedZero, PartitionOfTheFlatGroupByHand) {
  const ZeroPartition p = zero_partition({128, 16, 32, 2}, 2, false);
  EXPECT_EQ(p.params, 178u);
  EXPECT_EQ(p.aligned, 180u);
  EXPECT_EQ(p.partition, 90u);
  EXPECT_EQ(p.grads_in_partition, 128u);
  EXPECT_EQ(p.largest_param, 128u);
  EXPECT_EQ(p.in_partition, (std::vector<bool>{true, false, false, false}));
  const ZeroPartition four = zero_partition({128, 16, 32, 2}, 4, false);
  EXPECT_EQ(four.aligned, 184u);
  EXPECT_EQ(four.partition, 46u);
  // {1, 30, 1, 1} on 2 GPUs: 33 padded to 36, partition 18. In order: p0 at 0 and p1 at 1 are in (31 elements).
  // round_robin_gradients (_round_robin_reorder): p0, p2 (i % 2 == 0), then p1, p3: p0 at 0, p2 at 1, p1 at 2 in,
  // p3 at 32 out: 32 elements.
  const ZeroPartition plain = zero_partition({1, 30, 1, 1}, 2, false);
  EXPECT_EQ(plain.partition, 18u);
  EXPECT_EQ(plain.grads_in_partition, 31u);
  const ZeroPartition rr = zero_partition({1, 30, 1, 1}, 2, true);
  EXPECT_EQ(rr.grads_in_partition, 32u);
  EXPECT_EQ(rr.in_partition, (std::vector<bool>{true, true, true, false}));
}

// ZeRO-2, 2 GPUs, reduce_bucket_size 100 elements, overlap_comm: two float32 buckets of 400 bytes.
// Resident: parameters 712 + the group's padding 2 x 4 = 8 + the float32 partition 90 x 4 = 360 + exp_avg and
// exp_avg_sq on it, 360 each = 1800.
// Hooks in backward order: W2 (32) and b2 (2) fit the bucket, their grads freed at the hook; W1 (128 > 100) is
// extra large: 34 + 128 > 100 reduces [W2, b2] (not in rank 0's partition), and W1's own grad stays; b1's hook
// reduces [W1], which is in the partition: grads_in_partition (128 x 4 = 512) is allocated while W1's grad (512),
// b1's grad (64), both buckets (800), the output y 32 + loss 4 and the batch the loop holds to the step's end (x 128
// + targets 4 int64 = 32: 160) are alive: 2084, the peak. Elsewhere (36 + 160 = 196 is y, loss and the batch):
//   Gemm1's backward: 196 + grad:h 256 + grad:W1 512 + grad:b1 64 + buckets 800 = 1828
//   the epilogue: 196 + grads_in_partition 512 + buckets 800 = 1508
//   the cast: 196 + grads_in_partition 512 + flat bit16 copy 360 + float32 grad 360 = 1428
//   the Adam step (foreach): 196 + float32 grad 360 + sqrt temporaries 360 = 916
// Without DeepSpeed (plain DDP-like grads) this step peaks at the optimizer: 1620 (training_test.cc).
TEST(DeepSpeedZero, Stage2BucketsMoveThePeakIntoBackward) {
  const TrainingResult r = build_training_program(zero_mlp(), zero(2, 100, true));
  const Program& p = r.program;
  EXPECT_EQ(bytes_named(p, "deepspeed:ipg_buffer_0"), 400u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ipg_buffer_1"), 400u);
  EXPECT_EQ(bytes_named(p, "deepspeed:grads_in_partition"), 512u);
  EXPECT_EQ(bytes_named(p, "deepspeed:single_partition_of_fp32_groups"), 360u);
  EXPECT_EQ(bytes_named(p, "deepspeed:flat_group_padding"), 8u);
  EXPECT_EQ(bytes_named(p, "deepspeed:flat_grad_partition"), 360u);
  EXPECT_EQ(bytes_named(p, "deepspeed:single_grad_partition"), 360u);
  EXPECT_EQ(bytes_named(p, "exp_avg:deepspeed:fp32_partition"), 360u);
  EXPECT_EQ(resident_bytes(p), 1800u);
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 2084u);
  EXPECT_EQ(p.steps[peak.step].name, "deepspeed:grad_hook:b1");
  EXPECT_EQ(r.optimizer_state_bytes, 360u + 720u);
  // step's scaled_global_norm: W1's 90-element slice in float64, 720, beside 196 + grads_in_partition 512: 1428.
  EXPECT_EQ(bytes_named(p, "deepspeed:get_grad_norm_direct:W1"), 720u);
  EXPECT_LT(buffer_named(p, "deepspeed:get_grad_norm_direct:b1"), 0);  // b1 starts at 128, outside [0, 90)
}

// reduce_bucket_size 1000, no overlap_comm: one bucket of 4000 bytes holds every grad, which each hook frees; the
// epilogue reduces them all and allocates grads_in_partition (512) after the buckets' last grads are freed:
//   Gemm1's backward: 1828 - 800 + 4000 = 5028, the peak
//   the epilogue: 196 + 512 + 4000 = 4708
TEST(DeepSpeedZero, AnOversizedBucketDominates) {
  const Program p = build_training_program(zero_mlp(), zero(2, 1000, false)).program;
  EXPECT_EQ(bytes_named(p, "deepspeed:ipg_buffer_0"), 4000u);
  EXPECT_LT(buffer_named(p, "deepspeed:ipg_buffer_1"), 0);
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 5028u);
  EXPECT_EQ(p.steps[peak.step].name, "backward:/Gemm_0");
}

// ZeRO-1 without overlap_comm: no reduce in the hooks; every grad (712) is alive at backward's end beside the one
// bucket (400). reduce_gradients then runs the hooks in group order: W1 (extra large) waits; b1's hook reduces W1 into
// grads_in_partition (512): y 32 + loss 4 + the batch 160 + grads 712 + bucket 400 + 512 = 1820, the peak, at b1's
// hook.
TEST(DeepSpeedZero, Stage1ReducesAfterBackward) {
  const Program p = build_training_program(zero_mlp(), zero(1, 100, false)).program;
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1820u);
  EXPECT_EQ(p.steps[peak.step].name, "deepspeed:grad_hook:b1");
}

// offload_optimizer cpu: the GPU keeps temp_grad_buffer_for_gpu_offload (the largest parameter, 128 x 4 = 512), no
// float32 partition and no states. Host: float32 partition 360 + its grad 360 + exp_avg and exp_avg_sq 720 + the
// bit16 staging copy 90 x 4 = 360 + temp_grad_buffer_for_cpu_offload 512 = 2312.
TEST(DeepSpeedZero, OffloadKeepsTheStepOnTheHost) {
  TrainingRun o = zero(2, 100, true);
  o.deepspeed.offload_optimizer = DeepSpeedOffload::Cpu;
  const TrainingResult r = build_training_program(zero_mlp(), o);
  EXPECT_EQ(r.deepspeed_host_bytes, 2312u);
  EXPECT_EQ(bytes_named(r.program, "deepspeed:temp_grad_buffer_for_gpu_offload"), 512u);
  EXPECT_LT(buffer_named(r.program, "deepspeed:single_partition_of_fp32_groups"), 0);
  EXPECT_EQ(resident_bytes(r.program), 712u + 8u + 512u);
}

// zero_grad_transients by hand (stage_1_and_2.py at edaa722): a bfloat16 parameter of 128 elements, 90 of them in the
// partition. The norm: 90 x 8 = 720. Under offload, _has_inf_or_nan over the whole grad: float() 128 x 4 + isnan,
// isinf, logical_or 3 x 128 + float() 128 x 4 = 1408 (float32 grads: no first copy, 896); the float32 cast of the
// slice 90 x 4 = 360 (float32 grads: none). Without offload only the norm.
TEST(DeepSpeedZero, GradTransientsByHand) {
  const ZeroGradTransients bf16 = zero_grad_transients(128, 90, false, true);
  EXPECT_EQ(bf16.norm_double, 720u);
  EXPECT_EQ(bf16.overflow_check, 1408u);
  EXPECT_EQ(bf16.fp32_cast, 360u);
  const ZeroGradTransients fp32 = zero_grad_transients(128, 90, true, true);
  EXPECT_EQ(fp32.overflow_check, 896u);
  EXPECT_EQ(fp32.fp32_cast, 0u);
  const ZeroGradTransients plain = zero_grad_transients(128, 90, false, false);
  EXPECT_EQ(plain.norm_double, 720u);
  EXPECT_EQ(plain.overflow_check + plain.fp32_cast, 0u);
}

// offload_optimizer cpu on the GPU, at the accumulation boundary: b1's hook reduces [W1] (extra large, in the
// partition) from W1's own grad; copy_grads_in_partition then takes W1's slice's norm in float64 (90 x 8 = 720) and
// checks the whole grad for inf/nan (float32: 7 x 128 = 896) while W1's grad 512, b1's grad 64, the buckets 800 and
// y 32 + loss 4 + the batch 160 are alive: 1572 + 896 = 2468, the peak (the norm: 2292; Gemm1's backward 1828). With
// gradient_accumulation_steps 2 the earlier micro-batch's grads are on the host (accumulated_grads_in_cpu: W1's
// whole 128 x 4 = 512 more host bytes, 2824) and the GPU's peak is the same.
TEST(DeepSpeedZero, OffloadChecksEachPartitionGradOnTheGpu) {
  for (int accum : {1, 2}) {
    TrainingRun o = zero(2, 100, true);
    o.deepspeed.offload_optimizer = DeepSpeedOffload::Cpu;
    o.grad_accum = accum;
    const TrainingResult r = build_training_program(zero_mlp(), o);
    EXPECT_EQ(bytes_named(r.program, "deepspeed:set_norm_for_param_grad_in_gpu:W1"), 720u);
    EXPECT_EQ(bytes_named(r.program, "deepspeed:_has_inf_or_nan:W1"), 896u);
    EXPECT_LT(buffer_named(r.program, "deepspeed:async_inplace_copy_grad_to_fp32_buffer_from_gpu:W1"), 0);
    EXPECT_LT(buffer_named(r.program, "deepspeed:_has_inf_or_nan:b1"), 0);
    const auto peak = peak_live_bytes(r.program);
    EXPECT_EQ(peak.bytes, 2468u) << accum;
    EXPECT_EQ(r.program.steps[peak.step].name, "deepspeed:_has_inf_or_nan:W1");
    EXPECT_EQ(r.deepspeed_host_bytes, accum == 1 ? 2312u : 2824u);
  }
}

// check_grad_overflow (fp16 always; bf16 by default since DeepSpeed #8035): step() first runs _has_inf_or_nan on each
// slice of the partition, before the norms: W1's 90 elements alone here. float32: 90 x 7 = 630 B (no float() copy);
// bfloat16: 90 x 11 = 990 B; with invalid_grad_count (float32 [1], 4 B) from the first check on. Beside
// grads_in_partition and y, loss and the batch (196 + 512 + 634 = 1342) it stays under the backward's peak, 2084.
TEST(DeepSpeedZero, CheckGradOverflowChecksEachSliceBeforeTheNorm) {
  TrainingRun o = zero(2, 100, true);
  o.deepspeed.check_grad_overflow = true;
  const Program p = build_training_program(zero_mlp(), o).program;
  EXPECT_EQ(bytes_named(p, "deepspeed:_has_inf_or_nan:W1"), 630u);
  EXPECT_LT(buffer_named(p, "deepspeed:_has_inf_or_nan:b1"), 0);  // outside rank 0's partition
  EXPECT_EQ(bytes_named(p, "deepspeed:invalid_grad_count"), 4u);
  EXPECT_EQ(testing::step_named(p, "deepspeed:_has_inf_or_nan:W1") + 1,
            testing::step_named(p, "deepspeed:get_grad_norm_direct:W1"));
  EXPECT_EQ(peak_live_bytes(p).bytes, 2084u);
  o.precision = Precision::Bf16;
  EXPECT_EQ(bytes_named(build_training_program(zero_mlp(), o).program, "deepspeed:_has_inf_or_nan:W1"), 990u);
  o.deepspeed.check_grad_overflow = false;
  EXPECT_LT(buffer_named(build_training_program(zero_mlp(), o).program, "deepspeed:_has_inf_or_nan:W1"), 0);
}

// "auto": hidden_size^2 from an embedding table [10, 8] that a Gather reads with int64 ids, confirmed by a square
// [8, 8] weight: 64. Without the square weight the width is not trusted and "auto" is refused naming the key.
TEST(DeepSpeedZero, AutoBucketFromTheEmbeddingWidth) {
  auto graph = [](bool square) {
    GraphBuilder b;
    const int32_t ids = b.input("ids", {2, 3}, DType::Int64);
    const int32_t e = b.node1("Gather", {b.weight("embed", {10, 8}), ids}, "e", {2, 3, 8});
    const int32_t y = b.node1("MatMul", {e, b.weight("W", {8, square ? 8 : 4})}, "y", {2, 3, square ? 8 : 4});
    b.output(y);
    return b.graph();
  };
  DeepSpeedZero z;
  z.reduce_bucket_size_auto = true;
  resolve_deepspeed_auto(z, graph(true));
  EXPECT_EQ(z.reduce_bucket_size, 64u);
  DeepSpeedZero refused;
  refused.reduce_bucket_size_auto = true;
  try {
    resolve_deepspeed_auto(refused, graph(false));
    ADD_FAILURE() << "auto without a hidden size was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_bucket_size"), std::string::npos) << e.what();
  }
  // The file's recorded hidden size (a config's, Graph::recorded_hidden_size) confirms the width in place of the square
  // weight: 8 -> 64; a recorded size the embedding does not have (6) confirms nothing.
  Graph recorded = graph(false);
  recorded.recorded_hidden_size = 8;
  DeepSpeedZero from_config;
  from_config.reduce_bucket_size_auto = true;
  resolve_deepspeed_auto(from_config, recorded);
  EXPECT_EQ(from_config.reduce_bucket_size, 64u);
  recorded.recorded_hidden_size = 6;
  EXPECT_EQ(graph_hidden_size(recorded), 0);
}

}  // namespace
}  // namespace memplan
