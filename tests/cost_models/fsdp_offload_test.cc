// FSDP1's CPU offload (--shard fsdp --fsdp-cpu-offload: FullyShardedDataParallel(...,
// cpu_offload=CPUOffload(offload_params=True))) on the tiny two-block graph over 4 GPUs, float32, Adam. Every expected
// number is worked out by hand below from torch/distributed/fsdp/_flat_param.py (pytorch 01caf79e:
// FlatParamHandle.init_flat_param_attributes, pre_unshard, prepare_gradient_for_optim) and _runtime_utils.py
// (3ade90a6: _post_backward_hook, _post_backward_final_callback -> _finalize_params), as
// cost_models/training_fsdp_offload.cc states them, never read back from the code.
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
// transposed, head.b [2]) -> y[4,2]; units layers.0, layers.1 and the root {head.w, head.b}. Nodes /MatMul_0,
// /Relu_1, /MatMul_2, /Relu_3, /Gemm_4.
// Flat parameters (every parameter trains: use_orig_params=False, no alignment padding), padded to a multiple of 4:
// layers.0 48 elements, 12 a rank: 48 B; layers.1 48, 12: 48 B; root 16 + 2 = 18, padded to 20, 5 a rank: 20 B.
// Unsharded (padded): 192, 192, 80 B; the root's unsharded grad 72 B, F.pad-ded to 80 B.

TrainingRun run_fsdp_offload(bool offload) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.gpus = 4;
  o.shard = Sharding::Fsdp;
  o.fsdp_cpu_offload = offload;
  return o;
}

// Host: per unit _local_shard (pinned) + _cpu_grad (zeros_like it, pinned) + Adam's two states over the flat shard:
// layers.0 48 + 48 + 2 x 48 = 192 B, layers.1 192 B, root 20 + 20 + 2 x 20 = 80 B: 464 B. Nothing resident on the GPU.
// Each all-gather reads a GPU copy of the padded shard (pre_unshard's flat_param_to): root 20 B (forward only: the
// root stays unsharded from forward to backward), layers.0 and layers.1 48 B in forward and again in backward; the
// copy dies at its all-gather. Each reduce-scattered grad shard (layers.1 48 B, layers.0 48 B, root 20 B) stays on the
// GPU as _saved_grad_shard until _finalize_params at the end of backward, and is copied to _cpu_grad after its
// reduce-scatter.
TEST(FsdpOffload, ShardsCpuGradsAndStatesOnTheHostByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), run_fsdp_offload(true));
  const Program& p = r.program;
  EXPECT_EQ(r.fsdp_offload_host_bytes, 464u);
  EXPECT_EQ(r.param_bytes + r.grad_bytes + r.optimizer_state_bytes, 0u);
  EXPECT_EQ(testing::resident_bytes(p), 0u);
  EXPECT_EQ(buffer_named(p, "fsdp_flat_param_shard:layers.0"), -1);
  EXPECT_EQ(step_named(p, "optimizer:step"), -1);  // the optimizer steps the host shards
  EXPECT_EQ(bytes_named(p, "fsdp_shard_h2d:root"), 20u);
  EXPECT_EQ(bytes_named(p, "fsdp_shard_h2d:layers.0"), 48u);
  EXPECT_EQ(bytes_named(p, "fsdp_shard_h2d:layers.1:backward"), 48u);
  EXPECT_EQ(bytes_named(p, "fsdp_shard_h2d:layers.0:backward"), 48u);
  EXPECT_EQ(buffer_named(p, "fsdp_shard_h2d:root:backward"), -1);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded:layers.0:backward"), 192u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:root:padded"), 80u);
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp_shard_h2d:layers.1:backward")), step_named(p, "fsdp_pre_backward:layers.1"));
  EXPECT_EQ(last_reader(p, buffer_named(p, "fsdp_shard_h2d:layers.0:backward")),
            step_named(p, "fsdp_backward_prefetch:layers.0"));
  for (const char* unit : {"layers.0", "layers.1", "root"}) {
    const int32_t g = buffer_named(p, std::string("fsdp_grad_shard:") + unit);
    ASSERT_GE(g, 0) << unit;
    EXPECT_EQ(p.buffers[g].bytes, std::string(unit) == "root" ? 20u : 48u) << unit;
    EXPECT_FALSE(p.buffers[g].live_at_end) << unit;
    EXPECT_EQ(last_reader(p, g), step_named(p, "fsdp_post_backward_final")) << unit;
    EXPECT_GE(step_named(p, std::string("fsdp_grad_offload:") + unit), 0) << unit;
  }
}

// The step's GPU peak is layers.1's post-backward (its view grads concatenated into the unsharded flat grad):
// x 4 x 8 x 4 = 128 (saved by /MatMul_0), r0 4 x 6 x 4 = 96 (saved by /Relu_1), the output y 32, the root's grad
// shard 20 (reduce-scattered after the head's backward, held to the end of backward), layers.1's unsharded flat
// parameter 192 (read here for the last time) and layers.0's, prefetched, 192, grad:r0 96, layers.1.fc.w's view grad
// 6 x 8 x 4 = 192 (read here) and the unsharded grad it writes, 192: 128 + 96 + 32 + 20 + 192 + 192 + 96 + 192 + 192 =
// 1,140 B. Without offload the live bytes there are the same (the root's grad shard lives to the optimizer instead);
// what offload removes is resident: the shards 48 + 48 + 20 = 116 B and Adam's states 232 B (steady state): 348 B.
// layers.0's prefetch in layers.1's pre-backward, a step of its own: x 128, r0 96, r1 4 x 8 x 4 = 128 (saved by
// /Relu_3), y 32, grad:r1 128, the root's grad shard 20, layers.1 unsharded 192, layers.0's GPU copy 48 and its
// unsharded 192: 964 B (layers.1's copy, 48 B, died at its own all-gather).
TEST(FsdpOffload, PeakAtTheUnshardedGradByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), run_fsdp_offload(true));
  const testing::Peak peak = testing::peak_live_bytes(r.program);
  EXPECT_EQ(peak.bytes, 1140u);
  EXPECT_EQ(r.program.steps[peak.step].name, "fsdp_post_backward:layers.1");
  EXPECT_EQ(testing::live_at_step(r.program, "fsdp_backward_prefetch:layers.0"), 964u);
  const TrainingResult plain = build_training_program(two_fc_blocks(8, 6), run_fsdp_offload(false));
  EXPECT_EQ(testing::resident_bytes(plain.program), 348u);
  EXPECT_EQ(testing::live_at_step(plain.program, "fsdp_post_backward:layers.1"), 1140u);
}

// LoRA (rank 2 on the fc layers, use_orig_params=True: 16-byte alignment, 4 float32 elements). layers.0: fc.w 48
// elements [0, 48), lora_A [2, 8] 16 [48, 64), lora_B [6, 2] 12 [64, 76): 76 elements, 19 a rank (76 B); the
// trainable [48, 76) fall 9 on rank 2 ([38, 57)) and 19 on rank 3 ([57, 76)): a state is 19 x 4 = 76 B. layers.1:
// fc.w 48, lora_A [2, 6] 12 [48, 60), lora_B [8, 2] 16 [60, 76): the same 76 B shard and 76 B state. The root (head,
// frozen) 18 elements, 5 a rank: 20 B, no state. _cpu_grad is made for every handle, the frozen root's too:
// host (76 + 76 + 2 x 76) x 2 + 20 + 20 = 648 B. The root gets no grad: no grad shard on the GPU.
TEST(FsdpOffload, FrozenUnitStillGetsACpuGradByHand) {
  TrainingRun o = run_fsdp_offload(true);
  o.lora_rank = 2;
  o.lora_targets = "fc";
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), o);
  EXPECT_EQ(r.fsdp_offload_host_bytes, 648u);
  EXPECT_EQ(testing::resident_bytes(r.program), 0u);
  EXPECT_EQ(bytes_named(r.program, "fsdp_grad_shard:layers.1"), 76u);
  EXPECT_EQ(buffer_named(r.program, "fsdp_grad_shard:root"), -1);
}

}  // namespace
}  // namespace memplan
