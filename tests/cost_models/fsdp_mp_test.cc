// FSDP1's MixedPrecision (--shard fsdp --fsdp2-mp PARAM:REDUCE over a float32 model: FullyShardedDataParallel(...,
// mixed_precision=MixedPrecision(param_dtype, reduce_dtype))) on the tiny two-block graph over 4 GPUs, Adam. Every
// expected number is worked out by hand below from torch/distributed/fsdp/_flat_param.py (pytorch 01caf79e:
// _init_param_reduce_dtypes, _get_aligned_numel, init_flat_param_attributes, _use_low_precision_shard,
// post_unshard) and _runtime_utils.py (3ade90a6: _post_backward_hook, _cast_grad_to_param_dtype), as
// cost_models/training_fsdp_mp.cc states them, never read back from the code.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;
using testing::last_reader;
using testing::live_at_step;
using testing::step_named;
using testing::two_fc_blocks;

// x[4,8] -> MatMul(layers.0.fc.w [8,6]) -> Relu -> MatMul(layers.1.fc.w [6,8]) -> Relu -> Gemm(head.w [2,8]
// transposed, head.b [2]) -> y[4,2]; units layers.0, layers.1 and the root {head.w, head.b}.
// Every parameter trains (use_orig_params=False, no alignment padding): layers.0 48 elements, 12 a rank; layers.1
// the same; the root 16 + 2 = 18, padded to 20, 5 a rank.

// What report/estimate_config.cc makes of --fsdp2-mp PARAM:REDUCE: the precision is param_dtype.
TrainingRun mixed_fsdp_mp(Precision param, DType reduce, bool offload = false) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.gpus = 4;
  o.shard = Sharding::Fsdp;
  o.fsdp2_mp = true;
  o.precision = param;
  o.fsdp2_reduce_dtype = reduce;
  o.fsdp_cpu_offload = offload;
  return o;
}

// bf16:fp32. Float32 (_local_shard, the grad shard, Adam's states): shards 48 + 48 + 20 = 116 B, grad shards 116 B,
// states 2 x 116 = 232 B, as without MixedPrecision. param_dtype: each _mp_shard 12 x 2 = 24 B (the root's 5 x 2 =
// 10 B), each gathered flat parameter (_full_param_padded) 48 x 2 = 96 B (the root's 20 x 2 = 40 B). The unsharded
// grad autograd makes is bf16: layers.0 48 x 2 = 96 B, the root 18 x 2 = 36 B; reduce_dtype float32 differs, so
// .to(float32) copies it: 48 x 4 = 192 B (the root's 72 B, F.pad-ded to 20 x 4 = 80 B); the reduce output is float32,
// 12 x 4 = 48 B (the root's 20 B): the grad shard itself, no cast after.
TEST(FsdpMp, ShardsFloat32GatheredBf16ReducedFp32ByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), mixed_fsdp_mp(Precision::Bf16, DType::Float32));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 116u);
  EXPECT_EQ(r.grad_bytes, 116u);
  EXPECT_EQ(r.optimizer_state_bytes, 232u);
  EXPECT_EQ(bytes_named(p, "fsdp_flat_param_shard:layers.0"), 48u);
  EXPECT_EQ(bytes_named(p, "fsdp_flat_param_shard:root"), 20u);
  EXPECT_EQ(bytes_named(p, "fsdp_mp_shard:layers.0"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp_mp_shard:layers.1:backward"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp_mp_shard:root"), 10u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded:layers.0"), 96u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded:root"), 40u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:layers.0"), 96u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:layers.0:reduce_dtype"), 192u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:root"), 36u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:root:reduce_dtype"), 72u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:root:padded"), 80u);
  EXPECT_EQ(bytes_named(p, "fsdp_grad_shard:layers.0"), 48u);
  EXPECT_EQ(bytes_named(p, "fsdp_grad_shard:root"), 20u);
  EXPECT_EQ(buffer_named(p, "fsdp_reduce_output:layers.0"), -1);
  // The _mp_shard dies at its all-gather (post_unshard); the backward prefetch of layers.0 is a step of its own.
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp_mp_shard:layers.0:backward")), -1);  // written, never read
  EXPECT_GE(step_named(p, "fsdp_backward_prefetch:layers.0"), 0);
  // The grads autograd makes are bf16: layers.0.fc.w's view grad 8 x 6 x 2 = 96 B (float32: 192 B).
  EXPECT_EQ(bytes_named(p, "grad:layers.0.fc.w:view"), 96u);
}

// bf16:bf16 (accelerate's policy): no cast before the reduce-scatter; the root's bf16 grad F.pad-ded to 20 x 2 = 40 B;
// the reduce output bf16, 12 x 2 = 24 B (the root's 10 B), then _cast_grad_to_param_dtype's float32 copy: the grad
// shard, 48 B (20 B).
TEST(FsdpMp, ReducedBf16CastBackToFloat32ByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), mixed_fsdp_mp(Precision::Bf16, DType::BFloat16));
  const Program& p = r.program;
  EXPECT_EQ(r.grad_bytes, 116u);
  EXPECT_EQ(buffer_named(p, "fsdp_unsharded_grad:layers.0:reduce_dtype"), -1);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:root:padded"), 40u);
  EXPECT_EQ(bytes_named(p, "fsdp_reduce_output:layers.0"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp_reduce_output:root"), 10u);
  EXPECT_EQ(bytes_named(p, "fsdp_grad_shard:layers.0"), 48u);
  // The hook's locals (the bf16 grad, its padded copy) live through the cast of the shard.
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp_unsharded_grad:root:padded")), step_named(p, "fsdp_grad_shard_cast:root"));
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp_unsharded_grad:root")), step_named(p, "fsdp_grad_shard_cast:root"));
}

// bf16:fp32, live bytes around layers.1's post-backward (after /MatMul_2's backward). Live then: x 4 x 8 x 2 = 64 B
// (bf16, cast by the root; saved by /MatMul_0), r0 4 x 6 x 2 = 48 (saved by /Relu_1), y 4 x 2 x 2 = 16, the root's
// float32 grad shard 20, layers.0's prefetched gathered flat parameter 96 and grad:r0 48: 292 B, plus
//  - fsdp_post_backward:layers.1: layers.1's gathered 96 (freed here), layers.1.fc.w's view grad 6 x 8 x 2 = 96
//    (read here) and the unsharded grad it writes, 96: 292 + 288 = 580 B;
//  - fsdp_reduce_dtype_cast:layers.1: the bf16 grad 96 and its float32 copy 192: 292 + 288 = 580 B;
//  - fsdp_reduce_scatter:layers.1: those 96 + 192 and the new float32 grad shard 48: 292 + 336 = 628 B.
TEST(FsdpMp, ReduceDtypeCopyLiveWithTheBf16GradByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), mixed_fsdp_mp(Precision::Bf16, DType::Float32));
  EXPECT_EQ(live_at_step(r.program, "fsdp_post_backward:layers.1"), 580u);
  EXPECT_EQ(live_at_step(r.program, "fsdp_reduce_dtype_cast:layers.1"), 580u);
  EXPECT_EQ(live_at_step(r.program, "fsdp_reduce_scatter:layers.1"), 628u);
}

// CPUOffload(offload_params=True) with bf16:fp32. The host holds what it holds without MixedPrecision (the float32
// shards, _cpu_grads and states): (48 + 48 + 2 x 48) x 2 + 20 + 20 + 2 x 20 = 464 B. _use_low_precision_shard copies the
// pinned shard to the GPU (float32, 48 B; the root's 20 B) and casts it into the _mp_shard (24 B; 10 B) in one
// statement: both are written by the copy step, the float32 copy dies there, the _mp_shard at the all-gather.
TEST(FsdpMp, OffloadCastsTheGpuCopyOfTheHostShardByHand) {
  const TrainingResult r =
      build_training_program(two_fc_blocks(8, 6), mixed_fsdp_mp(Precision::Bf16, DType::Float32, /*offload=*/true));
  const Program& p = r.program;
  EXPECT_EQ(r.fsdp_offload_host_bytes, 464u);
  EXPECT_EQ(testing::resident_bytes(p), 0u);
  EXPECT_EQ(bytes_named(p, "fsdp_shard_h2d:layers.0"), 48u);
  EXPECT_EQ(bytes_named(p, "fsdp_mp_shard:layers.0"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp_shard_h2d:root"), 20u);
  EXPECT_EQ(bytes_named(p, "fsdp_mp_shard:root"), 10u);
  const int32_t h2d = step_named(p, "fsdp_offload_h2d:layers.0");
  ASSERT_GE(h2d, 0);
  EXPECT_TRUE(testing::step_reads(p.steps[h2d + 1], buffer_named(p, "fsdp_mp_shard:layers.0")));
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp_shard_h2d:layers.0")), -1);  // a transient of the copy step
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp_mp_shard:layers.0")), step_named(p, "fsdp_pre_forward:layers.0"));
  // The grad shard is float32 on the GPU until the end of backward, as without MixedPrecision.
  EXPECT_EQ(bytes_named(p, "fsdp_grad_shard:layers.1"), 48u);
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp_grad_shard:layers.1")), step_named(p, "fsdp_post_backward_final"));
}

// LoRA rank 2 on the fc layers (use_orig_params=True), bf16:fp32: the 16-byte alignment counts bf16 elements, 8.
// layers.0: fc.w [0, 48), lora_A [2, 8] 16 [48, 64), lora_B [6, 2] 12 [64, 76): 76 elements, the same as in float32
// (48 and 64 are multiples of 8), 19 a rank; the trainable [48, 76): rank 2 [38, 57) 9, rank 3 [57, 76) 19.
// layers.1: fc.w [0, 48), lora_A [2, 6] 12 [48, 60), lora_B [8, 2] 16 aligned from 60 to 64: [64, 80) (float32's
// 4-element alignment would start it at 60: 76 elements): 80 elements, 20 a rank; trainable rank 2 [40, 60) 12,
// rank 3 [60, 80) 16 (60-64 is padding). The root (frozen): 18 elements, padded to 20, 5 a rank.
// Float32 shards 76 + 80 + 20 = 176 B; grad shards (the trained units') 76 + 80 = 156 B; Adam's states over the
// busiest rank's trainable elements 2 x (19 + 16) x 4 = 280 B. layers.1's _mp_shard 20 x 2 = 40 B, gathered 80 x 2
// = 160 B.
TEST(FsdpMp, LoraAlignmentCountsParamDtypeElementsByHand) {
  TrainingRun o = mixed_fsdp_mp(Precision::Bf16, DType::Float32);
  o.lora_rank = 2;
  o.lora_targets = "fc";
  o.lora_float32 = false;  // report/estimate_config.cc under a policy: the adapters are float32 parameters like the base
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), o);
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 176u);
  EXPECT_EQ(r.grad_bytes, 156u);
  EXPECT_EQ(r.optimizer_state_bytes, 280u);
  EXPECT_EQ(bytes_named(p, "fsdp_flat_param_shard:layers.1"), 80u);
  EXPECT_EQ(bytes_named(p, "fsdp_mp_shard:layers.1"), 40u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded:layers.1"), 160u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:layers.1"), 160u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:layers.1:reduce_dtype"), 320u);
  EXPECT_EQ(buffer_named(p, "fsdp_unsharded_grad:layers.1:padded"), -1);  // the padding is in the flat parameter
}

}  // namespace
}  // namespace memplan
