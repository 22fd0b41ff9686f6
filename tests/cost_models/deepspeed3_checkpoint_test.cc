// DeepSpeed ZeRO-3 with --checkpoint layers (transformers' reentrant checkpoint of each decoder layer): the
// recomputation's module calls in the fetch trace, by hand from torch/utils/checkpoint.py CheckpointFunction and
// deepspeed/runtime/zero/ at DeepSpeed edaa722 (partitioned_param_coordinator.py __params_to_release,
// _fetch_sub_module_impl; parameter_offload.py's hooks); cost_models/training_deepspeed3_recompute.cc.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "tests/cost_models/deepspeed3_fixture.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::live_at_step;
using testing::peak_live_bytes;
using testing::step_named;

// Two decoder layers and a head, float32, nodes named as torch.onnx.export names them:
//   x[4,8] -> /layers.0/fc1/MatMul (layers.0.fc1.weight [8,8], p0) -> a0 -> /layers.0/fc2/MatMul (p1) -> h0
//          -> /layers.1/fc1/MatMul (p2) -> a1 -> /layers.1/fc2/MatMul (p3) -> h1 -> /head/MatMul (head.weight [8,2],
//          p4) -> y[4,2] (the output seeds backward: no loss).
// Activations 4 x 8 x 4 = 128 B each, y 32 B. p0..p3 64 elements, p4 16. --checkpoint layers: layers.0 (ops 0-1,
// it reads the model's input: its segment starts at the first op) and layers.1 (ops 2-3) are checkpointed.
Graph two_layers() {
  GraphBuilder b;
  int32_t h = b.input("x", {4, 8});
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "layers." + std::to_string(layer);
    const std::string s = std::to_string(layer);
    const int32_t a = b.node1("MatMul", {h, b.weight(p + ".fc1.weight", {8, 8})}, "a" + s, {4, 8});
    h = b.node1("MatMul", {a, b.weight(p + ".fc2.weight", {8, 8})}, "h" + s, {4, 8});
  }
  b.output(b.node1("MatMul", {h, b.weight("head.weight", {8, 2})}, "y", {4, 2}));
  Graph g = b.graph();
  for (size_t i = 0; i < 4; ++i) g.nodes[i].name = "/layers." + std::to_string(i / 2) + (i % 2 ? "/fc2/MatMul" : "/fc1/MatMul");
  g.nodes[4].name = "/head/MatMul";
  return g;
}

// 2 GPUs (each 64-element weight gathers into _all_gather_sequential's 32 x 2 elements, 256 B; the head 8 x 2, 64 B),
// nothing persistent, IPG bucket 64 elements (each reduce is one grad 2 divides: no reduce-scatter flat).
TrainingRun zero3(CheckpointMode mode, uint64_t prefetch, uint64_t max_live, uint64_t reuse) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.gpus = 2;
  o.shard = Sharding::Zero3;
  o.checkpoint.mode = mode;
  o.deepspeed.enabled = true;
  o.deepspeed.stage = 3;
  o.deepspeed.reduce_bucket_size = 64;
  o.deepspeed.overlap_comm = true;
  o.deepspeed.prefetch_bucket_size = prefetch;
  o.deepspeed.max_live_parameters = max_live;
  o.deepspeed.param_persistence_threshold = 0;
  o.deepspeed.max_reuse_distance = reuse;
  return o;
}

using testing::coordinator_steps;

// The coordinator's steps of RecomputationChangesWhatTheReuseDistanceKeeps (the trace and __params_to_release's
// reading of it, by hand above).
const std::vector<std::string> kReuse64Steps = {
    "deepspeed:fetch:layers.0.fc1", "deepspeed:release:layers.0.fc1", "deepspeed:fetch:layers.0.fc2",
    "deepspeed:release:layers.0.fc2", "deepspeed:fetch:layers.1.fc1", "deepspeed:release:layers.1.fc1",
    "deepspeed:fetch:layers.1.fc2", "deepspeed:release:layers.1.fc2", "deepspeed:fetch:head",
    "deepspeed:release_backward:head", "deepspeed:fetch_recompute:layers.1.fc1",
    "deepspeed:release_recompute:layers.1.fc1", "deepspeed:fetch_recompute:layers.1.fc2",
    "deepspeed:release_backward:layers.1.fc2", "deepspeed:fetch_backward:layers.1.fc1",
    "deepspeed:release_backward:layers.1.fc1", "deepspeed:fetch_recompute:layers.0.fc1",
    "deepspeed:release_recompute:layers.0.fc1", "deepspeed:fetch_recompute:layers.0.fc2",
    "deepspeed:release_backward:layers.0.fc2", "deepspeed:fetch_backward:layers.0.fc1",
    "deepspeed:release_backward_leftovers"};

// No prefetch, stage3_max_reuse_distance 64 elements. The trace (modules owning parameters), with checkpointing:
//   0 L0.fc1, 1 L0.fc2, 2 L1.fc1, 3 L1.fc2, 4 head (forward); 5 head (backward); layers.1 recomputed before its
//   backward: 6 L1.fc1, 7 L1.fc2 (recomputation), 8 L1.fc2, 9 L1.fc1 (backward); then 10 L0.fc1, 11 L0.fc2, 12 L0.fc2,
//   13 L0.fc1.
// Without it: 0-4 forward, 5 head, 6 L1.fc2, 7 L1.fc1, 8 L0.fc2, 9 L0.fc1.
// __params_to_release after position s looks at s + 1, s + 2, ... while fewer than 64 elements were passed:
//  - L1.fc2's forward release: without checkpointing head (16), head (32), then L1.fc2 itself: kept into backward,
//    never fetched there. With it head, head, L1.fc1's recomputation (96 >= 64): released, the recomputation
//    fetches it again.
//  - L1.fc1's recomputation release: L1.fc2 (64), then stop: released, fetched again for its backward;
//    L1.fc2's recomputation release: its backward is next: kept, no backward fetch. Same for layers.0.
TEST(DeepSpeedZero3Checkpoint, RecomputationChangesWhatTheReuseDistanceKeeps) {
  const Program plain = build_training_program(two_layers(), zero3(CheckpointMode::None, 0, 0, 64)).program;
  EXPECT_LT(step_named(plain, "deepspeed:release:layers.1.fc2"), 0);
  EXPECT_LT(step_named(plain, "deepspeed:fetch_backward:layers.1.fc2"), 0);
  const Program p = build_training_program(two_layers(), zero3(CheckpointMode::Layers, 0, 0, 64)).program;
  EXPECT_EQ(coordinator_steps(p), kReuse64Steps);
}

// The same run's peak, at layers.1.fc2's backward (reentrant checkpoint: the recomputed output h1' and the incoming
// grad:h1 are held to the segment's end). Live: x 128 (layers.0's checkpointed input) + y 32 (the output, kept) +
// h0 128 (layers.1's checkpointed input) + grad:h1 128 + h1' 128 + a1' 128 (recomputed, saved for this MatMul's
// backward) + grad:a1 128 + grad of p3 256 (written) + gathered p3 256 (fetched by the recomputation, kept for this
// backward) = 1312. The only whole parameter is the one in use: p2 was released after its recomputation. layers.1.fc1's
// backward ties (p2 256 fetched again instead of p3, grad:h0 128 instead of a1', grad of p2 256): the first is the peak.
TEST(DeepSpeedZero3Checkpoint, PeakWithoutPrefetchByHand) {
  const Program p = build_training_program(two_layers(), zero3(CheckpointMode::Layers, 0, 0, 64)).program;
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1312u);
  EXPECT_EQ(p.steps[peak.step].name, "backward:/layers.1/fc2/MatMul");
  EXPECT_EQ(live_at_step(p, "backward:/layers.1/fc1/MatMul"), 1312u);
}

// Prefetch bucket 64 elements, stage3_max_live_parameters 200, stage3_max_reuse_distance 0. Every module call,
// parameter-less ones included (step ids): forward root 0, layers.0 1, L0.fc1 2, L0.fc2 3, layers.1 4, L1.fc1 5,
// L1.fc2 6, head 7; backward root 8, head 9; layers.1's recomputation: layers.1 10, L1.fc1 11, L1.fc2 12, then its
// backward layers.1 13, L1.fc2 14, L1.fc1 15; layers.0's recomputation 16, 17, 18 and backward layers.0 19, L0.fc2 20,
// L0.fc1 21 (x needs no grad: L0.fc1 has no post-backward release). __param_queue: (p0,2) (p1,3) (p2,5) (p3,6) (p4,7)
// (p4,9) (p2,11) (p3,12) (p3,14) (p2,15) (p0,17) (p1,18) (p1,20) (p0,21). Available a:
//  0 root: prefetch min(200, 64): (p0,2) -> {p0}, a 64.   1 layers.0: {p1}, a 128.   2 L0.fc1: waits; prefetch
//    min(72, 64): {p2}, a 192. Release L0.fc1 (step 3): most recent of p0 is 2 <= 3: released, a 128.
//  3 L0.fc2: {p3}, a 192; release: p1 released, a 128.
//  4 layers.1: min(72, 64): (p4,7) 16 -> prefetch; (p4,9); (p2,11), (p3,12), (p3,14), (p2,15) in flight (their most
//    recent steps become 15 and 14); (p0,17) p0 NOT_AVAILABLE -> 80 >= 64: one coalesced handle {p4, p0}, a 208.
//  5-7: a >= 200, no prefetch; L1.fc1, L1.fc2 and head's forward releases keep p2 (15), p3 (14), p4 (9) > step.
//  9 head's backward release (10): p4 released, a 192.   10 layers.1 (recomputation): min(8, 64): (p1,18): {p1},
//    a 256 (the most). The recomputation's releases (12, 13) keep p2 and p3 (15, 14 are later).
//  14 L1.fc2 backward, release (15): p3, a 192.   15 L1.fc1: pops (p1,20), (p0,21): nothing new. Release (16): p2.
//  16-18 layers.0's recomputation: nothing gathered (p0 whole since the head's wait, p1 waited on); releases keep
//    p0 (21) and p1 (20).   20 L0.fc2's backward release: p1.   p0 at release_backward_leftovers.
// So in program order: the prefetches at root, layers.0, L0.fc1, L0.fc2 (single parameters: their own buffers), the
// flat of {p4, p0} at layers.1 ((8 + 32) x 2 = 80 elements, 320 B) waited on by the head (torch.cat: p4 64 B, p0
// 256 B), and p1 again at layers.1's recomputation call.
TEST(DeepSpeedZero3Checkpoint, PrefetchScheduleByHand) {
  const Program p = build_training_program(two_layers(), zero3(CheckpointMode::Layers, 64, 200, 0)).program;
  EXPECT_EQ(coordinator_steps(p),
            (std::vector<std::string>{
                "deepspeed:prefetch:(root)", "deepspeed:prefetch:layers.0", "deepspeed:prefetch:layers.0.fc1",
                "deepspeed:release:layers.0.fc1", "deepspeed:prefetch:layers.0.fc2", "deepspeed:release:layers.0.fc2",
                "deepspeed:prefetch:layers.1", "deepspeed:wait:head", "deepspeed:release_backward:head",
                "deepspeed:prefetch_recompute:layers.1", "deepspeed:release_backward:layers.1.fc2",
                "deepspeed:release_backward:layers.1.fc1", "deepspeed:release_backward:layers.0.fc2",
                "deepspeed:release_backward_leftovers"}));
  EXPECT_EQ(testing::bytes_named(p, "deepspeed:prefetch_flat:layers.1"), 320u);
}

// That run's peak, at layers.1.fc2's backward: the 1312 - 256 B of activations and grads above (1056: x, y, h0,
// grad:h1, h1', a1', grad:a1, the grad of p3) + four whole parameters, 4 x 256: p3 (in use), p2 (kept: layers.1's
// forward prefetch popped its recomputation and backward uses, so its releases skip it), p0 (popped by that prefetch
// for layers.0's recomputation, whole since the head's wait) and p1 (prefetched at layers.1's recomputation call) =
// 2080. Prefetch turns the 1312 into 2080 here: 768 B, three weights gathered ahead.
TEST(DeepSpeedZero3Checkpoint, PeakWithPrefetchByHand) {
  const Program p = build_training_program(two_layers(), zero3(CheckpointMode::Layers, 64, 200, 0)).program;
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 2080u);
  EXPECT_EQ(p.steps[peak.step].name, "backward:/layers.1/fc2/MatMul");
}


// A frozen parameter in a checkpointed layer (PEFT's base weights under --checkpoint layers): the hooks fetch and
// release it as a trainable one (__params_to_release reads the trace, not requires_grad); the recomputation's
// attribution of it to the latest backward module (update_recompute_parameters: an enclosing module, released at
// the backward's end) adds nothing to its ds_active_sub_modules, so its own releases stand. Same steps as the
// trainable run; the peak at layers.1.fc2's backward the same 1312 B (p3 still trains); at layers.1.fc1's backward
// no grad of p2 is written: 1312 - 256 = 1056.
TEST(DeepSpeedZero3Checkpoint, FrozenParameterInACheckpointedLayerIsFetchedAsATrainableOne) {
  TrainingRun o = zero3(CheckpointMode::Layers, 0, 0, 64);
  o.frozen = "layers\\.1\\.fc1";
  const Program p = build_training_program(two_layers(), o).program;
  EXPECT_EQ(coordinator_steps(p), kReuse64Steps);
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1312u);
  EXPECT_EQ(p.steps[peak.step].name, "backward:/layers.1/fc2/MatMul");
  EXPECT_EQ(live_at_step(p, "backward:/layers.1/fc1/MatMul"), 1056u);
}

// A frozen head leaves layers.1.fc2.weight's the first gradient hook, inside layers.1's recomputation's nested
// backward; the IPG epilogue still runs once, after the whole backward, because the engine's backward prologue (the
// hook on the forward's outputs) queued the callback on the outer graph task first. The head's module still runs
// its backward hooks (its output needs a grad: the grad of h1 needs head.weight): the same steps, the epilogue after
// layers.0.fc1's backward, and the same peak (the head's grad was reduced into the resident partitions before it).
TEST(DeepSpeedZero3Checkpoint, FrozenHeadKeepsTheEpilogueAtTheBackwardsEnd) {
  TrainingRun o = zero3(CheckpointMode::Layers, 0, 0, 64);
  o.frozen = "head";
  const Program p = build_training_program(two_layers(), o).program;
  EXPECT_EQ(coordinator_steps(p), kReuse64Steps);
  const int32_t epilogue = step_named(p, "deepspeed:ipg_epilogue");
  ASSERT_GE(epilogue, 0);
  EXPECT_GT(epilogue, step_named(p, "backward:/layers.0/fc1/MatMul"));
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1312u);
  EXPECT_EQ(p.steps[peak.step].name, "backward:/layers.1/fc2/MatMul");
}

}  // namespace
}  // namespace memplan
