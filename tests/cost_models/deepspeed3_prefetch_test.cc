// DeepSpeed ZeRO-3 with parameter prefetch (stage3_prefetch_bucket_size > 0): the coordinator's rules
// (cost_models/deepspeed_zero3_schedule.h) applied by hand, step by step, from
// deepspeed/runtime/zero/partitioned_param_coordinator.py at DeepSpeed edaa722 (_fetch_sub_module_impl,
// __params_to_release), on deepspeed3_test.cc's tiny MLP on 3 GPUs with its modules named by scope.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "cost_models/deepspeed_zero3_schedule.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/deepspeed3_fixture.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;
using testing::live_at_step;
using testing::step_named;
using testing::peak_live_bytes;

// deepspeed3_fixture.h's MLP, x[4,8] -> l1 (Gemm, l1.weight[16,8] 128 elements, l1.bias 16) -> act (Relu) -> l2
// (Gemm, l2.weight[2,16] 32, l2.bias 2) -> y[4,2]; `scoped` false: /Gemm_0 ... (the root's scope only).
Graph mlp(bool scoped = true) { return testing::deepspeed3_mlp(scoped); }

// deepspeed3_mlp_run() (max_reuse_distance 0: a release keeps nothing for reuse, only the prefetch's markers keep a
// parameter) with a prefetch bucket.
TrainingRun zero3_prefetch(uint64_t prefetch, uint64_t max_live) {
  TrainingRun o = testing::deepspeed3_mlp_run();
  o.deepspeed.prefetch_bucket_size = prefetch;
  o.deepspeed.max_live_parameters = max_live;
  return o;
}

using testing::coordinator_steps;

// The MLP's hook calls (parameters 0 l1.weight 128, 1 l1.bias 16, 2 l2.weight 32, 3 l2.bias 2, persistent):
// forward: fetch root (step 0), fetch l1 (1), release l1, fetch act (2), fetch l2 (3), release l2; backward: fetch root
// (4, its output y needs grad), fetch l2 (5), release l2 (its input r needs grad), fetch act (6), fetch l1 (7; x needs
// no grad: no post-backward release). __param_queue: (0,1) (1,1) (2,3) (3,3) (2,5) (3,5) (0,7) (1,7).
std::vector<Zero3Call> mlp_calls() {
  const std::vector<int32_t> none, l1 = {0, 1}, l2 = {2, 3};
  return {{false, none}, {false, l1}, {true, l1}, {false, none}, {false, l2}, {true, l2},
          {false, none}, {false, l2}, {true, l2}, {false, none}, {false, l1}};
}
const std::vector<uint64_t> kNumel = {128, 16, 32, 2};
const std::vector<bool> kPersistent = {false, false, false, true};

// Bucket 34 (l2's elements), max_live_parameters 1e9, max_reuse_distance 0.
// root (step 0): no own parameter; prefetch up to min(1e9 - 0, 34): pop (0,1), l1.weight NOT_AVAILABLE, 128 >= 34:
//   handle 0 = {0}; available 128; most_recent[0] = 1.
// l1 (1): l1.bias NOT_AVAILABLE: gathered {1} (available 144); l1.weight INFLIGHT: waits on handle 0; own
//   parameters with most_recent < 1: {1}, popped (1,1). Prefetch up to min(1e9 - 144, 34): (2,3) l2.weight, 32;
//   (3,3) persistent (AVAILABLE), not counted; (2,5) already in this prefetch; (3,5); (0,7) and (1,7) AVAILABLE:
//   most_recent[0] = most_recent[1] = 7; the queue is empty. Handle 1 = {2}; available 176 (the most).
// release l1 (step id 2): most_recent 7 > 2 for both: kept (the prefetch skipped their backward use), although
//   max_reuse_distance is 0.
// act (2), l2 (3): waits on handle 1; nothing left to prefetch. release l2 (4): most_recent[2] = 5 > 4: kept.
// root (4), l2 (5): nothing gathered. release l2 (6): most_recent 5 <= 6, distance 0: released (available 144).
// act (6), l1 (7): nothing gathered; l1 is released at release_backward_leftovers.
TEST(DeepSpeedZero3Prefetch, ScheduleByHandOneLayerBucket) {
  const Zero3Schedule s = zero3_schedule(mlp_calls(), kNumel, kPersistent, {34, 1000000000, 0});
  using V = std::vector<int32_t>;
  EXPECT_EQ(s.handles, (std::vector<V>{{0}, {2}}));
  EXPECT_EQ(s.actions[0].prefetched, 0);
  EXPECT_EQ(s.actions[1].gathered, (V{1}));
  EXPECT_EQ(s.actions[1].waited, (V{0}));
  EXPECT_EQ(s.actions[1].prefetched, 1);
  EXPECT_EQ(s.actions[2].released, V{});
  EXPECT_EQ(s.actions[4].waited, (V{1}));
  EXPECT_EQ(s.actions[5].released, V{});
  EXPECT_EQ(s.actions[8].released, (V{2}));
  for (size_t c : {3, 6, 7, 9, 10}) {
    EXPECT_TRUE(s.actions[c].gathered.empty()) << c;
    EXPECT_EQ(s.actions[c].prefetched, -1) << c;
  }
  EXPECT_EQ(s.most_available, 176u);
  // Without a bucket the same calls release l1 after its forward and gather it again for its backward.
  const Zero3Schedule none = zero3_schedule(mlp_calls(), kNumel, kPersistent, {0, 1000000000, 0});
  EXPECT_EQ(none.actions[2].released, (V{0, 1}));
  EXPECT_EQ(none.actions[10].gathered, (V{0, 1}));
}

// Bucket 34, max_live_parameters 150.
// root (0): min(150, 34): handle 0 = {0} (128). l1 (1): gathered {1} (144); prefetch up to min(150 - 144, 34) = 6:
//   (2,3) l2.weight, 32 >= 6: handle 1 = {2} (176). release l1 (2): most_recent 1 <= 2: both released (32 left).
// act (2): min(150 - 32, 34): (3,3), (2,5) INFLIGHT (most_recent[2] = 5), (3,5), (0,7) l1.weight NOT_AVAILABLE,
//   128: handle 2 = {0} (160). l2 (3): waits on handle 1; 160 >= 150: no prefetch. release l2 (4): 5 > 4, kept.
// root (4), l2 (5): 160 >= 150, nothing. release l2 (6): released (128). act (6): min(150 - 128, 34) = 22: (1,7)
//   l1.bias, 16: handle 3 = {1} (144). l1 (7): waits on handles 2 and 3.
TEST(DeepSpeedZero3Prefetch, ScheduleByHandBoundedByMaxLiveParameters) {
  const Zero3Schedule s = zero3_schedule(mlp_calls(), kNumel, kPersistent, {34, 150, 0});
  using V = std::vector<int32_t>;
  EXPECT_EQ(s.handles, (std::vector<V>{{0}, {2}, {0}, {1}}));
  EXPECT_EQ(s.actions[1].prefetched, 1);
  EXPECT_EQ(s.actions[2].released, (V{0, 1}));
  EXPECT_EQ(s.actions[3].prefetched, 2);
  EXPECT_EQ(s.actions[4].prefetched, -1);
  EXPECT_EQ(s.actions[8].released, (V{2}));
  EXPECT_EQ(s.actions[9].prefetched, 3);
  EXPECT_EQ(s.actions[10].waited, (V{2, 3}));
  EXPECT_TRUE(s.actions[10].gathered.empty());
  EXPECT_EQ(s.most_available, 176u);
}

// Bucket 200 (more than the model's 178): root's prefetch pops (0,1) 128, (1,1) 144, (2,3) 176, then the rest
// already in it or persistent: one handle {0, 1, 2} of three parameters, waited on by l1's fetch.
TEST(DeepSpeedZero3Prefetch, ScheduleByHandOneCoalescedHandle) {
  const Zero3Schedule s = zero3_schedule(mlp_calls(), kNumel, kPersistent, {200, 1000000000, 0});
  EXPECT_EQ(s.handles, (std::vector<std::vector<int32_t>>{{0, 1, 2}}));
  EXPECT_EQ(s.actions[1].waited, (std::vector<int32_t>{0}));
  EXPECT_EQ(s.actions[8].released, (std::vector<int32_t>{2}));
}

// End to end, bucket 34 (the schedule of ScheduleByHandOneLayerBucket), float32 on 3 GPUs. Root's prefetch gathers
// l1.weight alone (_all_gather_sequential: 43 x 3 = 129 elements, 516 bytes); l1's fetch l1.bias alone (6 x 3 = 18,
// 72 bytes); l1's prefetch l2.weight (11 x 3 = 33, 132 bytes). Nothing is released in forward: at the loss,
// deepspeed3_test.cc's 488 bytes without any whole parameter + 516 + 72 + 132 = 1208. The program is then
// deepspeed3_test.cc's stage3_max_reuse_distance 1e9 one (l1 and l2 kept from forward into backward, l2 released
// after its backward, l1 at the end; peak 1864 at l1.bias's hook with l1's copies 512 + 64) with l1's copies
// 516 + 72, 12 bytes more, and no coalesced flat: peak 1876 at the same hook.
TEST(DeepSpeedZero3Prefetch, OneLayerBucketKeepsTheModelGathered) {
  const Program p = build_training_program(mlp(), zero3_prefetch(34, 1000000000)).program;
  EXPECT_GE(step_named(p, "deepspeed:prefetch:(root)"), 0);
  EXPECT_EQ(bytes_named(p, "deepspeed:gathered:l1.weight"), 516u);
  EXPECT_EQ(bytes_named(p, "deepspeed:gathered:l1.bias"), 72u);
  EXPECT_EQ(bytes_named(p, "deepspeed:gathered:l2.weight"), 132u);
  EXPECT_LT(step_named(p, "deepspeed:release:l1"), 0);
  EXPECT_LT(step_named(p, "deepspeed:release:l2"), 0);
  EXPECT_GE(step_named(p, "deepspeed:release_backward:l2"), 0);
  EXPECT_LT(step_named(p, "deepspeed:fetch_backward:l1"), 0);
  EXPECT_EQ(live_at_step(p, "loss:cross_entropy"), 1208u);
  // In order: root's prefetch, l1's gather and prefetch (the wait on handle 0 is one parameter's: no step), no
  // release until l2's backward one, then release_backward_leftovers (l1).
  EXPECT_EQ(coordinator_steps(p), (std::vector<std::string>{"deepspeed:prefetch:(root)", "deepspeed:fetch:l1",
                                                            "deepspeed:prefetch:l1", "deepspeed:release_backward:l2",
                                                            "deepspeed:release_backward_leftovers"}));
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1876u);
  EXPECT_EQ(p.steps[peak.step].name, "deepspeed:grad_hook:l1.bias");
}

// max_live_parameters 150 (ScheduleByHandBoundedByMaxLiveParameters): l1 released after its forward, l1.weight
// prefetched again at act's forward call (516 bytes), l1.bias at act's backward call (72). At the loss: 488 +
// l1.weight 516 + l2.weight 132 = 1136. In backward l1's copies are 516 + 72 as above: peak 1876 at l1.bias's hook.
TEST(DeepSpeedZero3Prefetch, MaxLiveParametersBoundsThePrefetch) {
  const Program p = build_training_program(mlp(), zero3_prefetch(34, 150)).program;
  EXPECT_GE(step_named(p, "deepspeed:release:l1"), 0);
  EXPECT_GE(step_named(p, "deepspeed:prefetch:act"), 0);
  EXPECT_GE(step_named(p, "deepspeed:prefetch_backward:act"), 0);
  EXPECT_LT(step_named(p, "deepspeed:fetch_backward:l1"), 0);
  EXPECT_EQ(live_at_step(p, "loss:cross_entropy"), 1136u);
  EXPECT_EQ(coordinator_steps(p),
            (std::vector<std::string>{"deepspeed:prefetch:(root)", "deepspeed:fetch:l1", "deepspeed:prefetch:l1",
                                      "deepspeed:release:l1", "deepspeed:prefetch:act", "deepspeed:release_backward:l2",
                                      "deepspeed:prefetch_backward:act", "deepspeed:release_backward_leftovers"}));
  EXPECT_EQ(peak_live_bytes(p).bytes, 1876u);
}

// Bucket 200: root's prefetch is one all_gather_coalesced of three parameters: the flat (43 + 6 + 11) x 3 = 180
// elements, 720 bytes, from the root's call until l1's fetch waits on it; then each parameter's torch.cat, 512, 64
// and 128 bytes (numel, unpadded).
TEST(DeepSpeedZero3Prefetch, ACoalescedPrefetchHoldsItsFlatUntilTheWait) {
  const Program p = build_training_program(mlp(), zero3_prefetch(200, 1000000000)).program;
  EXPECT_EQ(bytes_named(p, "deepspeed:prefetch_flat:(root)"), 720u);
  EXPECT_GE(step_named(p, "deepspeed:wait:l1"), 0);
  EXPECT_EQ(bytes_named(p, "deepspeed:gathered:l1.weight"), 512u);
  EXPECT_EQ(bytes_named(p, "deepspeed:gathered:l2.weight"), 128u);
}

// Parents before children: the MLP inside a container blk (/blk/l1/Gemm, /blk/act/Relu, /blk/l2/Gemm; parameters
// blk.l1.*, blk.l2.*), bucket 1 (each call pops one parameter not available). Calls: root (0), blk (1), blk.l1 (2),
// blk.act (3), blk.l2 (4); queue (l1.weight,2) (l1.bias,2) (l2.weight,4) (l2.bias,4) (l2.weight,7) (l2.bias,7)
// (l1.weight,9) (l1.bias,9) (backward: root 5, blk 6, blk.l2 7, blk.act 8, blk.l1 9). root prefetches l1.weight,
// blk l1.bias; blk.l1 waits on both and prefetches l2.weight; release blk.l1 (step 3): their marks are 2, distance 0:
// both released; blk.act pops l2.bias (persistent), l2.weight (in flight), l2.bias, then l1.weight: prefetched;
// blk.l2 waits on l2.weight, prefetches l1.bias; release blk.l2 (5): l2.weight marked 7, kept; in backward released
// after blk.l2's (step 8); blk.l1 waits on its two.
TEST(DeepSpeedZero3Prefetch, ParentsCallBeforeTheirChildren) {
  Graph g = mlp();
  g.nodes[0].name = "/blk/l1/Gemm";
  g.nodes[1].name = "/blk/act/Relu";
  g.nodes[2].name = "/blk/l2/Gemm";
  for (Tensor& t : g.tensors)
    if (t.name.rfind("l1.", 0) == 0 || t.name.rfind("l2.", 0) == 0) t.name = "blk." + t.name;
  const Program p = build_training_program(g, zero3_prefetch(1, 1000000000)).program;
  EXPECT_EQ(coordinator_steps(p),
            (std::vector<std::string>{"deepspeed:prefetch:(root)", "deepspeed:prefetch:blk", "deepspeed:prefetch:blk.l1",
                                      "deepspeed:release:blk.l1", "deepspeed:prefetch:blk.act",
                                      "deepspeed:prefetch:blk.l2", "deepspeed:release_backward:blk.l2",
                                      "deepspeed:release_backward_leftovers"}));
}

// A graph whose node names carry no module scope cannot show the module calls: refused, naming the key.
TEST(DeepSpeedZero3Prefetch, AGraphWithoutScopesIsRefused) {
  try {
    build_training_program(mlp(/*scoped=*/false), zero3_prefetch(34, 1000000000));
    ADD_FAILURE() << "prefetch without scopes was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("module 'l1'"), std::string::npos) << what;
    EXPECT_NE(what.find("give stage3_prefetch_bucket_size 0"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(build_training_program(mlp(/*scoped=*/false), zero3_prefetch(0, 1000000000)));
}

}  // namespace
}  // namespace memplan
