// FSDP1 gradient accumulation inside no_sync() (--shard fsdp --grad-accum 2 --fsdp-no-sync: the first micro-batch
// under FullyShardedDataParallel.no_sync(), the program the synced last one) on the tiny two-block graph over 4 GPUs,
// Adam. Every expected number is worked out by hand below from torch/distributed/fsdp/_runtime_utils.py (3ade90a6:
// _post_backward_hook returns before the reduce-scatter when not _sync_gradients) and _flat_param.py (01caf79e:
// prepare_gradient_for_backward keeps a grad of the unsharded size), as cost_models/training_fsdp_mp.cc states them,
// never read back from the code.
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
// transposed, head.b [2]) -> y[4,2]; units layers.0 (48 elements, 12 a rank), layers.1 (the same) and the root
// (18 elements, padded to 20, 5 a rank); every parameter trains (use_orig_params=False).

TrainingRun accumulating(bool no_sync) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.gpus = 4;
  o.shard = Sharding::Fsdp;
  o.grad_accum = 2;
  o.fsdp_no_sync = no_sync;
  return o;
}

// Kept from the first micro-batch: each unit's unsharded flat grad, unpadded (flat_param.grad has
// _unpadded_unsharded_size): layers.0 48 x 4 = 192 B, layers.1 192 B, the root 18 x 4 = 72 B; no grad shard before the
// step (zero_grad set them to None), so the grad shards are made by this step's reduce-scatters, 48 + 48 + 20 B.
// grad_bytes: 192 + 192 + 72 + 116 = 572 B. Each kept grad lives from the step's start to its reduce-scatter;
// AccumulateGrad adds the new unsharded grad into it.
TEST(FsdpNoSync, KeepsEachUnitsUnshardedGradUntilItsReduceScatterByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), accumulating(true));
  const Program& p = r.program;
  EXPECT_EQ(r.grad_bytes, 572u);
  EXPECT_EQ(r.param_bytes, 116u);
  for (const char* unit : {"layers.0", "layers.1", "root"}) {
    const int32_t kept = buffer_named(p, std::string("fsdp_no_sync_grad:") + unit);
    ASSERT_GE(kept, 0) << unit;
    EXPECT_EQ(p.buffers[kept].bytes, std::string(unit) == "root" ? 72u : 192u) << unit;
    EXPECT_TRUE(p.buffers[kept].live_at_start) << unit;
    EXPECT_FALSE(p.buffers[kept].resident) << unit;
    EXPECT_EQ(last_reader(p, kept), step_named(p, std::string("fsdp_reduce_scatter:") + unit)) << unit;
    EXPECT_GE(step_named(p, std::string("fsdp_no_sync_accumulate:") + unit), 0) << unit;
    const int32_t shard = buffer_named(p, std::string("fsdp_grad_shard:") + unit);
    ASSERT_GE(shard, 0) << unit;
    EXPECT_FALSE(p.buffers[shard].resident) << unit;  // made by this reduce-scatter, kept to the optimizer
  }
  // Outside no_sync() the same accumulation keeps grad shards instead (_saved_grad_shard): 116 B, resident.
  const TrainingResult reduced = build_training_program(two_fc_blocks(8, 6), accumulating(false));
  EXPECT_EQ(reduced.grad_bytes, 116u);
  EXPECT_EQ(buffer_named(reduced.program, "fsdp_no_sync_grad:layers.0"), -1);
  EXPECT_TRUE(reduced.program.buffers[buffer_named(reduced.program, "fsdp_grad_shard:layers.0")].resident);
}

// Live bytes around layers.1's post-backward (after /MatMul_2's backward). Without accumulation (FsdpOffload's
// PeakAtTheUnshardedGradByHand) the cat step holds x 128 (saved by /MatMul_0), r0 96 (saved by /Relu_1), y 32, the
// root's grad shard 20, layers.1's gathered 192 and layers.0's, prefetched, 192, grad:r0 96, layers.1.fc.w's view
// grad 192 and the new unsharded grad 192: 1,140 B. Under no_sync the kept grads of layers.1 and layers.0 (the root's
// died at its own reduce-scatter) add 192 + 192: 1,524 B.
// fsdp_no_sync_accumulate:layers.1: layers.1's gathered and the view grad died at the cat: x 128 + r0 96 + y 32 +
// root shard 20 + layers.0 gathered 192 + grad:r0 96 = 564, the new grad 192 (freed after the add) and the two kept
// 384: 1,140 B. fsdp_reduce_scatter:layers.1: 564 + the two kept 384 + layers.1's new grad shard 48 = 996 B.
TEST(FsdpNoSync, KeptGradsAtLayerOnesPostBackwardByHand) {
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), accumulating(true));
  EXPECT_EQ(live_at_step(r.program, "fsdp_post_backward:layers.1"), 1524u);
  EXPECT_EQ(live_at_step(r.program, "fsdp_no_sync_accumulate:layers.1"), 1140u);
  EXPECT_EQ(live_at_step(r.program, "fsdp_reduce_scatter:layers.1"), 996u);
}

// With MixedPrecision bf16:fp32 the kept grads are param_dtype: layers.0 48 x 2 = 96 B, the root 18 x 2 = 36 B; the
// sum is cast to float32 (192 B) for the reduce-scatter. Under CPUOffload(offload_params=True) they stay on the GPU
// (no_sync's docstring: not offloaded until the sync) while the shards, _cpu_grads and states are on the host
// ((48 + 48 + 2 x 48) x 2 + 20 + 20 + 2 x 20 = 464 B); accumulation outside no_sync() is refused there.
TEST(FsdpNoSync, MixedPrecisionAndOffloadKeepParamDtypeGradsOnTheGpuByHand) {
  TrainingRun o = accumulating(true);
  o.fsdp2_mp = true;
  o.precision = Precision::Bf16;
  o.fsdp2_reduce_dtype = DType::Float32;
  o.fsdp_cpu_offload = true;
  const TrainingResult r = build_training_program(two_fc_blocks(8, 6), o);
  const Program& p = r.program;
  EXPECT_EQ(r.fsdp_offload_host_bytes, 464u);
  EXPECT_EQ(bytes_named(p, "fsdp_no_sync_grad:layers.0"), 96u);
  EXPECT_EQ(bytes_named(p, "fsdp_no_sync_grad:root"), 36u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:layers.0:reduce_dtype"), 192u);
  EXPECT_TRUE(testing::step_reads(p.steps[step_named(p, "fsdp_reduce_dtype_cast:layers.0")],
                                  buffer_named(p, "fsdp_no_sync_grad:layers.0")));
  EXPECT_EQ(testing::resident_bytes(p), 0u);
}

}  // namespace
}  // namespace memplan
