// DeepSpeed ZeRO-3 with offload_optimizer cpu: DeepSpeedZeroOptimizer_Stage3 with self.device the host, by hand
// from deepspeed/runtime/zero/stage3.py at DeepSpeed edaa722 (__init__'s grad_partitions_flat_buffer,
// _create_fp32_partitions, initialize_optimizer_states, partition_grads, _offload_grad_partition_at_boundary,
// _constant_buffered_norm2, step), on deepspeed3_test.cc's MLP (cost_models/training_deepspeed3_offload.cc).
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "cost_models/deepspeed_zero3.h"
#include "tests/cost_models/deepspeed3_fixture.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;
using testing::peak_live_bytes;
using testing::resident_bytes;
using testing::step_named;
using testing::deepspeed3_mlp;


// deepspeed3_mlp_run() (deepspeed3_test.cc's zero3(0)) with offload_optimizer cpu.
TrainingRun zero3_offload() {
  TrainingRun o = testing::deepspeed3_mlp_run();
  o.deepspeed.offload_optimizer = DeepSpeedOffload::Cpu;
  return o;
}

// The rules alone. Host: sub-groups of 60 and 1 elements -> 61 x 4 = 244 B float32 partition, 244 its grad, 2 x 244
// Adam states, + 244 B of gradient partitions (passed in): 5 x 244 = 1220. GPU per parameter: a partition of 43
// bf16 elements copied back, 86 B; its float64 norm chunk 344; its float32 cast 172. A 300,000,000-element
// partition's norm runs in chunks of 250,000,000: 2,000,000,000 B at once. float32 grads need no cast.
TEST(DeepSpeedZero3Offload, RulesByHand) {
  EXPECT_EQ(zero3_host_bytes({60, 1}, 244, 2), 1220u);
  const Zero3OffloadTransients bf16 = zero3_offload_transients(43, 2);
  EXPECT_EQ(bf16.gpu_copy, 86u);
  EXPECT_EQ(bf16.norm_double, 344u);
  EXPECT_EQ(bf16.fp32_cast, 172u);
  EXPECT_EQ(zero3_offload_transients(300000000, 2).norm_double, 2000000000u);
  EXPECT_EQ(zero3_offload_transients(43, 4).fp32_cast, 0u);
}

// Resident on the GPU: the partitions 244 B + l2.bias whole 12 + the IPG bucket 160 = 416 (deepspeed3_test.cc's
// 1392 without the float32 sub-group 244, Adam's two states 488 and the gradient partitions 244, now the host's:
// 244 x 4 + 244 = 1220 B on the host line). No step on the GPU after backward (DeepSpeedCPUAdam on the host).
// Backward as deepspeed3_test.cc's, plus partition_grads' GPU copies after each reduce, per parameter in the bucket:
// the partition copied back (float32: l2.weight 11 x 4 = 44, l2.bias 4, l1.weight 172, l1.bias 24) and its float64
// norm (88, 8, 344, 48); float32 grads need no cast.
// Peak, at l1.weight's norm (the reduce of [l1.weight] at l1.bias's hook): gathered l1 576 (no post-backward:
// released at the end) + l1.weight's own grad 512 (too large for the bucket; param.grad = None ends its turn) +
// l1.bias's grad 64 (its hook is running) + the reduce-scatter flat 516 + y 32 and loss 4 + the batch the loop holds
// (x 128, targets 32) + the copy 172 + the norm 344 = 2380 (without offload: 1864 at that reduce).
TEST(DeepSpeedZero3Offload, EveryBufferByHand) {
  const TrainingResult r = build_training_program(deepspeed3_mlp(), zero3_offload());
  const Program& p = r.program;
  EXPECT_EQ(resident_bytes(p), 416u);
  EXPECT_EQ(r.deepspeed_host_bytes, 1220u);
  EXPECT_EQ(r.optimizer_state_bytes, 0u);
  EXPECT_EQ(r.grad_bytes, 0u);
  EXPECT_LT(buffer_named(p, "deepspeed:fp32_partitioned_groups_flat"), 0);
  EXPECT_LT(buffer_named(p, "deepspeed:grad_partitions_flat_buffer"), 0);
  EXPECT_LT(step_named(p, "deepspeed:get_grad_norm_direct"), 0);
  EXPECT_EQ(bytes_named(p, "deepspeed:partition_grads_to_gpu:l2.weight"), 44u);
  EXPECT_EQ(bytes_named(p, "deepspeed:_constant_buffered_norm2:l2.weight"), 88u);
  EXPECT_EQ(bytes_named(p, "deepspeed:partition_grads_to_gpu:l1.bias"), 24u);
  EXPECT_EQ(bytes_named(p, "deepspeed:_constant_buffered_norm2:l1.bias"), 48u);
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 2380u);
  EXPECT_EQ(p.steps[peak.step].name, "deepspeed:_constant_buffered_norm2:l1.weight");
}

}  // namespace
}  // namespace memplan
