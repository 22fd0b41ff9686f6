// DeepSpeed ZeRO-3 with offload_param cpu: the parameters' partitions in pinned host memory, copied to the GPU by
// each gather, by hand from DeepSpeed edaa722 (partition_parameters.py Init._partition_param, _all_gather_dtype,
// _all_gather_sequential; stage3.py _create_fp16_partitions_with_defragmentation, _create_fp32_partitions) on
// deepspeed3_fixture.h's MLP (cost_models/training_deepspeed3_offload.cc).
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "tests/cost_models/deepspeed3_fixture.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;
using testing::coordinator_steps;
using testing::live_at_step;
using testing::peak_live_bytes;
using testing::resident_bytes;

// deepspeed3_mlp_run() (3 GPUs, float32, bucket 40, l2.bias persistent, max_reuse_distance 0, no prefetch) with
// offload_param cpu, and offload_optimizer cpu too when `optimizer` (HF's ZeRO-3 offload config).
TrainingRun offload(bool optimizer) {
  TrainingRun o = testing::deepspeed3_mlp_run();
  o.deepspeed.offload_param = DeepSpeedOffload::Cpu;
  if (optimizer) o.deepspeed.offload_optimizer = DeepSpeedOffload::Cpu;
  return o;
}

// Both on the host. Partitions (43 + 6 + 11 + 1 elements, float32): 172 + 24 + 44 + 4 = 244 B of pinned host memory
// (Init._partition_param puts every partition on the offload device, persistent ones too: ds_persist is marked after).
// The optimizer's host line as deepspeed3_offload_test.cc's: 1220. Resident on the GPU: l2.bias whole, 12 (the
// persistent copy), + the IPG bucket 160 = 172 (with offload_optimizer alone: 416, the partitions' 244 more).
// Each gather first copies the partitions it sends to the GPU: fetch l1 (two parameters, _all_gather_dtype's list of
// `.to(device)` copies) (43 + 6) x 4 = 196 B; fetch l2 (l2.weight alone, l2.bias whole: _all_gather_sequential)
// 11 x 4 = 44; the same in backward. Live at fetch l1 (the first step): x 128 + targets 32 + the flat 147 x 4 = 588 +
// l1.weight 512 + l1.bias 64 + the copies 196 = 1520 (1324 without offload_param).
// Live at l1's backward fetch (before Gemm_0's backward; act's Relu backward has run, freeing r and grad:r): x 128 +
// targets 32 + y 32 + loss 4 + grad:h 256 + the flat 588 + l1's copies 576 + the partitions' copies 196 = 1812 (1616
// without offload_param). The peak is still deepspeed3_offload_test.cc's 2380 at l1.weight's norm: no gather runs there, and
// the copies die with their gathers. The fetch/release order is the same (the coordinator counts elements, wherever
// the partitions are).
TEST(DeepSpeedZero3OffloadParam, WithOffloadOptimizerEveryBufferByHand) {
  const TrainingResult r = build_training_program(testing::deepspeed3_mlp(), offload(true));
  const Program& p = r.program;
  EXPECT_EQ(r.deepspeed_param_host_bytes, 244u);
  EXPECT_EQ(r.deepspeed_host_bytes, 1220u);
  EXPECT_EQ(resident_bytes(p), 172u);
  EXPECT_EQ(r.param_bytes, 12u);
  EXPECT_LT(buffer_named(p, "deepspeed:ds_tensor:l1.weight"), 0);
  EXPECT_EQ(bytes_named(p, "deepspeed:persistent:l2.bias"), 12u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor_to_gpu:fetch:l1"), 196u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor_to_gpu:fetch:l2"), 44u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor_to_gpu:fetch_backward:l2"), 44u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor_to_gpu:fetch_backward:l1"), 196u);
  EXPECT_EQ(live_at_step(p, "deepspeed:fetch:l1"), 1520u);
  EXPECT_EQ(live_at_step(p, "deepspeed:fetch_backward:l1"), 1812u);
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 2380u);
  EXPECT_EQ(p.steps[peak.step].name, "deepspeed:_constant_buffered_norm2:l1.weight");
  EXPECT_EQ(coordinator_steps(p),
            (std::vector<std::string>{"deepspeed:fetch:l1", "deepspeed:release:l1", "deepspeed:fetch:l2",
                                      "deepspeed:release:l2", "deepspeed:fetch_backward:l2",
                                      "deepspeed:release_backward:l2", "deepspeed:fetch_backward:l1",
                                      "deepspeed:release_backward_leftovers"}));
}

// offload_param alone (stage3.py asserts nothing against it): the optimizer stays on the GPU, and the float32
// partitions, now on the host, can no longer be the float32 sub-group (_create_fp32_partitions: `device ==
// self.device` fails, `.to(self.device, dtype).clone()`): a GPU sub-group of 244 B comes back. Resident: l2.bias 12 +
// the sub-group 244 + Adam's two states 488 + grad_partitions_flat_buffer 244 + the bucket 160 = 1148, as
// deepspeed3_test.cc's without offload (a float32 model saves nothing on the GPU this way; bf16 would: its bit16
// partitions leave, the float32 sub-group was separate already). Host: the partitions, 244. l1's backward fetch
// holds 1812 (the test above: 1616 + the partitions' copies 196), which stays under deepspeed3_test.cc's peak, 1864
// at l1.bias's hook (no gather touches it). The hook runs after Gemm_0's backward, x's last reader: with the batch
// (x 128, targets 32) held by the loop it gains 160 where the fetch, before that backward, gains the targets' 32.
TEST(DeepSpeedZero3OffloadParam, AloneKeepsTheOptimizerOnTheGpu) {
  const TrainingResult r = build_training_program(testing::deepspeed3_mlp(), offload(false));
  const Program& p = r.program;
  EXPECT_EQ(r.deepspeed_param_host_bytes, 244u);
  EXPECT_EQ(r.deepspeed_host_bytes, 0u);
  EXPECT_EQ(bytes_named(p, "deepspeed:fp32_partitioned_groups_flat"), 244u);
  EXPECT_EQ(bytes_named(p, "deepspeed:grad_partitions_flat_buffer"), 244u);
  EXPECT_EQ(resident_bytes(p), 1148u);
  EXPECT_EQ(live_at_step(p, "deepspeed:fetch:l1"), 1520u);
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1864u);
  EXPECT_EQ(p.steps[peak.step].name, "deepspeed:grad_hook:l1.bias");
  EXPECT_EQ(live_at_step(p, "deepspeed:fetch_backward:l1"), 1812u);
}

// With prefetch (deepspeed3_prefetch_test.cc's schedules, scoped graph): the copies go with each launch.
// Bucket 34: root's prefetch is l1.weight alone (_all_gather_sequential: its partition, 43 x 4 = 172 B), l1's fetch
// gathers l1.bias (6 x 4 = 24) and prefetches l2.weight (11 x 4 = 44); the order is the prefetch test's, and at the
// loss the same 1208 B live (the copies died with their launches).
// Bucket 200: root's prefetch is one all_gather_coalesced of l1.weight, l1.bias, l2.weight: (43 + 6 + 11) x 4 = 240.
TEST(DeepSpeedZero3OffloadParam, PrefetchCopiesAtEachLaunch) {
  TrainingRun o = offload(true);
  o.deepspeed.prefetch_bucket_size = 34;
  const Program p = build_training_program(testing::deepspeed3_mlp(true), o).program;
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor_to_gpu:prefetch:(root)"), 172u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor_to_gpu:fetch:l1"), 24u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor_to_gpu:prefetch:l1"), 44u);
  EXPECT_EQ(live_at_step(p, "loss:cross_entropy"), 1208u);
  EXPECT_EQ(coordinator_steps(p), (std::vector<std::string>{"deepspeed:prefetch:(root)", "deepspeed:fetch:l1",
                                                            "deepspeed:prefetch:l1", "deepspeed:release_backward:l2",
                                                            "deepspeed:release_backward_leftovers"}));
  o.deepspeed.prefetch_bucket_size = 200;
  const Program coalesced = build_training_program(testing::deepspeed3_mlp(true), o).program;
  EXPECT_EQ(bytes_named(coalesced, "deepspeed:ds_tensor_to_gpu:prefetch:(root)"), 240u);
}

}  // namespace
}  // namespace memplan
