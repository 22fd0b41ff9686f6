// FSDP2's CPU offload (--fsdp-cpu-offload: fully_shard(..., offload_policy=CPUOffloadPolicy()), torchtune's
// fsdp_cpu_offload) on the tiny two-block graph over 4 GPUs. Every expected number is worked out by hand below from
// the rules in cost_models/training_fsdp2.cc (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
// FSDPParam._init_sharded_param and all_gather_inputs, _fsdp_collectives.py foreach_reduce, pytorch 010ae4a8).
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "planner/liveness.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;
using testing::last_reader;
using testing::step_named;
using testing::two_fc_blocks;

// x[4,8] -> MatMul(layers.0.fc.w [8,6]) -> Relu -> MatMul(layers.1.fc.w [6,8]) -> Relu -> Gemm(head.w [2,8]
// transposed, head.b [2]) -> y[4,2]; groups layers.0, layers.1 and the root {head.w, head.b}. 4 ranks, each keeping
// ceil(dim0 / 4) rows: layers.0.fc.w 2 x 6 = 12 elements, layers.1.fc.w 2 x 8 = 16 (6 rows padded to 8), head.w
// 1 x 8 = 8, head.b 1: the root 9.

// torchtune's run: the model in bf16, no policy; or (mp) a float32 model with MixedPrecisionPolicy(param, reduce).
TrainingRun run_fsdp2_offload(bool offload, bool mp = false, DType reduce = DType::Float32) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.gpus = 4;
  o.shard = Sharding::Fsdp2;
  o.precision = Precision::Bf16;
  o.fsdp_cpu_offload = offload;
  o.fsdp2_mp = mp;
  o.fsdp2_reduce_dtype = reduce;
  return o;
}

// bf16, no policy. Shards (pinned host): layers.0 12 x 2 = 24 B, layers.1 16 x 2 = 32 B, root 9 x 2 = 18 B: 74 B;
// grad shards on the host 74 B; Adam's two states on the host 148 B. Host line 74 + 74 + 148 = 296 B; on the GPU
// no shard, no grad shard, no state: nothing resident.
// GPU copies for the all-gather (all_gather_inputs' .to(device), bf16, no cast): 24, 32, 18 B; all-gather outputs
// and unsharded parameters 4 x that: 96, 128, 72 B. Reduce-scatter inputs 4 x the padded shards: 96, 128, 72 B;
// reduce outputs (the grad shards, on the GPU until copied to the host): 24, 32, 18 B.
TEST(Fsdp2Offload, ShardsGradsStatesOnTheHostByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), run_fsdp2_offload(true));
  const Program& p = r.program;
  EXPECT_EQ(r.fsdp_offload_host_bytes, 296u);
  EXPECT_EQ(r.param_bytes, 0u);
  EXPECT_EQ(r.grad_bytes, 0u);
  EXPECT_EQ(r.optimizer_state_bytes, 0u);
  EXPECT_EQ(testing::resident_bytes(p), 0u);
  EXPECT_EQ(buffer_named(p, "fsdp2_sharded_params:layers.0"), -1);
  EXPECT_EQ(buffer_named(p, "fsdp2_grad_shard:layers.0"), -1);
  EXPECT_EQ(step_named(p, "optimizer:step"), -1);  // the optimizer steps the host shards
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:root"), 18u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:layers.0"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:layers.1:backward"), 32u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_output:layers.0"), 96u);
  EXPECT_EQ(bytes_named(p, "fsdp2_unsharded:layers.1"), 128u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_scatter_input:layers.0"), 96u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_output:layers.0"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_output:root"), 18u);
  // The GPU copies live from their host-to-device step to the all-gather's copy-in; the reduce output to its copy
  // to the host.
  const int32_t input = buffer_named(p, "fsdp2_all_gather_input:layers.0");
  ASSERT_GE(input, 0);
  EXPECT_EQ(last_reader(p, input), step_named(p, "fsdp2_all_gather:layers.0"));
  const int32_t output = buffer_named(p, "fsdp2_reduce_output:layers.1");
  ASSERT_GE(output, 0);
  EXPECT_EQ(last_reader(p, output), step_named(p, "fsdp2_grad_offload:layers.1"));
  EXPECT_FALSE(p.buffers[output].live_at_end);
}

// The step's GPU peak, bf16, no policy: in backward, layers.1's MatMul backward: the root's unsharded parameters
// 72 (kept from forward to backward), layers.1 gathered for its backward 128, layers.0's prefetched all-gather
// output 96, x 64 (saved by the first MatMul), r0 48 (saved by Relu_1 and MatMul_2), the model output y 16, the root's
// pending grads head.w 2 x 8 x 2 = 32 and head.b 4, grad:h1 64 (read here), and what it writes: grad:r0 48 and
// layers.1.fc.w's grad 6 x 8 x 2 = 96. 72 + 128 + 96 + 64 + 48 + 16 + 32 + 4 + 64 + 48 + 96 = 668 B. No grad shard
// is made yet, so without offload the live bytes there are the same; only the resident part differs: 0 B here,
// without offload the shards 74 B and (steady state, a later iteration) Adam's states 148 B: 222 B.
TEST(Fsdp2Offload, PeakInBackwardByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), run_fsdp2_offload(true));
  const testing::Peak peak = testing::peak_live_bytes(r.program);
  EXPECT_EQ(peak.bytes, 668u);
  EXPECT_EQ(r.program.steps[peak.step].name, "backward:/MatMul_2");
  const TrainingResult plain = build_training_program(two_fc_blocks(8, 6), run_fsdp2_offload(false));
  EXPECT_EQ(testing::resident_bytes(plain.program), 222u);
  EXPECT_EQ(testing::live_at_step(plain.program, "backward:/MatMul_2"), 668u);
}

// --fsdp2-mp bf16:fp32 over a float32 model. Shards float32 on the host: 48 + 64 + (32 + 4) = 148 B; grad shards
// float32 148 B; Adam's float32 states 296 B: host line 592 B. Each parameter is copied to the GPU in float32 and
// cast to bf16, the float32 copy dropped after the cast, the bf16 copies all held to the copy-in:
//  layers.0: one parameter, float32 48 B, bf16 24 B: at its cast 48 + 24 = 72 B, so 24 B held and 48 B on top.
//  layers.1: 64 B float32, 32 B bf16: 32 B held, 64 B on top.
//  root, head.w then head.b: head.w's cast holds 32 (fp32) + 16 (bf16) = 48 B; head.b's 16 + 4 + 2 = 22 B: the
//  largest is 48 B = the held 18 B (16 + 2) + 30 B on top.
// At the root's host-to-device step, the first of the step: x 4 x 8 x 2 = 64 B (bf16: param_dtype) + 18 + 30 =
// 112 B live. The reduce-scatter in float32 (reduce_dtype = orig_dtype): the output is the grad shard, 48 B for
// layers.0, copied to the host: no orig_dtype copy.
TEST(Fsdp2Offload, MixedPrecisionCastsEachShardOnTheGpuByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), run_fsdp2_offload(true, true));
  const Program& p = r.program;
  EXPECT_EQ(r.fsdp_offload_host_bytes, 592u);
  EXPECT_EQ(r.param_bytes + r.grad_bytes + r.optimizer_state_bytes, 0u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:layers.0"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp2_offload_h2d_stored:layers.0"), 48u);
  EXPECT_EQ(bytes_named(p, "fsdp2_offload_h2d_stored:layers.1:backward"), 64u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:root"), 18u);
  EXPECT_EQ(bytes_named(p, "fsdp2_offload_h2d_stored:root"), 30u);
  EXPECT_EQ(testing::live_at_step(p, "fsdp2_offload_h2d:root"), 112u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_output:layers.0"), 48u);
  EXPECT_EQ(buffer_named(p, "fsdp2_reduce_output_orig:layers.0"), -1);
  // The float32 copy dies at its own step: the all-gather reads only the bf16 copies.
  const int32_t stored = buffer_named(p, "fsdp2_offload_h2d_stored:root");
  ASSERT_GE(stored, 0);
  EXPECT_EQ(last_reader(p, stored), -1);
}

// bf16:bf16: the reduce output in bf16 (layers.0: 12 x 2 = 24 B), its float32 copy (48 B, the grad shard's type)
// copied to the host; both freed there.
TEST(Fsdp2Offload, ReduceInBf16CopiesToFloat32ThenToTheHostByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), run_fsdp2_offload(true, true, DType::BFloat16));
  const Program& p = r.program;
  EXPECT_EQ(r.fsdp_offload_host_bytes, 592u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_output:layers.0"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_output_orig:layers.0"), 48u);
  const int32_t orig = buffer_named(p, "fsdp2_reduce_output_orig:layers.0");
  ASSERT_GE(orig, 0);
  EXPECT_EQ(last_reader(p, orig), step_named(p, "fsdp2_grad_offload:layers.0"));
}

// Gradient accumulation (--grad-accum 4: a later micro-batch and the step), bf16, no policy. foreach_reduce at
// 010ae4a8: with a grad already there (to_accumulate_grad) the offloaded new_sharded_grad is copied to the host
// blocking (non_blocking = pin_memory and not to_accumulate_grad) and added there
// (`sharded_param.grad._local_tensor += new_sharded_grad`): the accumulated grads are the host grad shards already on
// the host line, 296 B as above (the add's CPU copy of the new shard is a host transient, not on the line). On the
// GPU nothing is resident and the program is one micro-batch's: peak 668 B at backward:/MatMul_2, the reduce output
// (layers.0 24 B) still freed at its copy to the host. Without offload the accumulated grad shards are resident on
// the GPU: 74 B beside the shards 74 and the states 148: 296 B.
TEST(Fsdp2Offload, GradientAccumulationAddsOnTheHostByHand) {
  TrainingRun o = run_fsdp2_offload(true);
  o.grad_accum = 4;
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), o);
  const Program& p = r.program;
  EXPECT_EQ(r.fsdp_offload_host_bytes, 296u);
  EXPECT_EQ(r.param_bytes + r.grad_bytes + r.optimizer_state_bytes, 0u);
  EXPECT_EQ(testing::resident_bytes(p), 0u);
  EXPECT_EQ(buffer_named(p, "fsdp_grad_shard:layers.0"), -1);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_output:layers.0"), 24u);
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp2_reduce_output:layers.0")), step_named(p, "fsdp2_grad_offload:layers.0"));
  const testing::Peak peak = testing::peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 668u);
  EXPECT_EQ(p.steps[peak.step].name, "backward:/MatMul_2");
  TrainingRun plain = run_fsdp2_offload(false);
  plain.grad_accum = 4;
  const TrainingResult q = build_training_program(two_fc_blocks(8, 6), plain);
  EXPECT_EQ(q.grad_bytes, 74u);
  EXPECT_EQ(testing::resident_bytes(q.program), 296u);
}

// torchtune's distributed QLoRA with fsdp_cpu_offload (--frozen-dtype nf4 --nf4-impl torchao --lora-rank 2, bf16)
// on two 32,768-value NF4 layers over 2 ranks: x[4,256] -> MatMul(layers.0.fc.w [256,128]) -> Relu ->
// MatMul(layers.1.fc.w [128,256]) -> Relu -> Gemm(head.w [2,256], head.b [2]) -> y[4,2].
// Shards (tests/cost_models/fsdp2_nf4_test.cc's arithmetic, torchao's nf4_split): a layer's NF4 weight 8,450 B of
// sharded quantized tensors + 34 B scaler_mean and table = 8,484 B, its adapters 512 + 256 = 768 B: 9,252 B; the root
// (frozen head) 512 + 2 = 514 B. All on the host: 2 x 9,252 + 514 = 19,018 B; the adapters' grad shards 2 x 768 =
// 1,536 B and Adam's two states 3,072 B: host line 19,018 + 1,536 + 3,072 = 23,626 B, nothing resident (22,090 B
// without offload). The NF4 bytes (2 x 8,484 = 16,968 B) are still the frozen weights' stored bytes, now on the host.
// all_gather_inputs under offload: the NF4Tensor .to(device) whole (8,484 B) then fsdp_pre_all_gather's views of it,
// the adapters .to(device) (no policy: no cast, no stored-dtype transient): a layer's GPU copy 9,252 B, the root's
// 514 B, each freed at its all-gather. At the first step (the root's copy) x 4 x 256 x 2 = 2,048 + 514 = 2,562 B.
// Reduce: the adapters' 1,536 B input, the 768 B output copied to the host and freed there.
// The peak stays Fsdp2Nf4.PeakStepByHand's 505,388 B at layers.1's backward get_original_weight: no GPU copy lives
// there (layers.0's, made for its prefetch, died at that all-gather; layers.1 is not reduced yet).
TrainingRun qlora_offload() {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.precision = Precision::Bf16;
  o.gpus = 2;
  o.shard = Sharding::Fsdp2;
  o.frozen_storage = FrozenStorage::Nf4;
  o.nf4_torchao = true;
  o.lora_rank = 2;
  o.lora_targets = "fc";
  o.lora_float32 = false;
  o.fsdp_cpu_offload = true;
  return o;
}

TEST(Fsdp2Offload, TorchaoNf4QloraShardsOnTheHostByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(256, 128), qlora_offload());
  const Program& p = r.program;
  EXPECT_EQ(r.fsdp_offload_host_bytes, 23626u);
  EXPECT_EQ(r.param_bytes + r.grad_bytes + r.optimizer_state_bytes, 0u);
  EXPECT_EQ(r.frozen_stored_bytes, 16968u);
  EXPECT_EQ(testing::resident_bytes(p), 0u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:layers.0"), 9252u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:layers.1:backward"), 9252u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:root"), 514u);
  EXPECT_EQ(buffer_named(p, "fsdp2_offload_h2d_stored:layers.0"), -1);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_output:layers.0"), 18436u);
  EXPECT_EQ(testing::live_at_step(p, "fsdp2_offload_h2d:root"), 2562u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_scatter_input:layers.0"), 1536u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_output:layers.0"), 768u);
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp2_reduce_output:layers.0")), step_named(p, "fsdp2_grad_offload:layers.0"));
  const testing::Peak peak = testing::peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 505388u);
  EXPECT_EQ(p.steps[peak.step].name, "linear_nf4:get_original_weight:layers.1.fc.w");
  EXPECT_EQ(p.steps[peak.step].phase, Phase::Backward);
}

}  // namespace
}  // namespace memplan
