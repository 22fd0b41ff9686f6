// DeepSpeed ZeRO-3 (--deepspeed, zero_optimization.stage 3): DeepSpeedZeroOptimizer_Stage3 and its parameter
// coordinator on a tiny graph, every figure by hand from deepspeed/runtime/zero/ at DeepSpeed edaa722 (the rules:
// cost_models/deepspeed_zero3.h).
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "cost_models/deepspeed_zero3.h"
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
using testing::GraphBuilder;
using testing::peak_live_bytes;
using testing::resident_bytes;
using testing::deepspeed3_mlp;


// deepspeed3_mlp_run() with this max_reuse_distance.
TrainingRun zero3_run(uint64_t max_reuse_distance) {
  TrainingRun o = testing::deepspeed3_mlp_run();
  o.deepspeed.max_reuse_distance = max_reuse_distance;
  return o;
}

// The rules alone (deepspeed_zero3.h), by hand.
TEST(DeepSpeedZero3, RulesByHand) {
  // _partition_param: 128 elements on 3 GPUs pad to 129, 43 per rank; 16 -> 18, 6; 32 -> 33, 11; 2 -> 3, 1.
  EXPECT_EQ(zero3_partition_numel(128, 3), 43u);
  EXPECT_EQ(zero3_partition_numel(16, 3), 6u);
  EXPECT_EQ(zero3_partition_numel(2, 3), 1u);
  EXPECT_EQ(zero3_partition_numel(32, 2), 16u);
  // mark_persistent_parameters, threshold 20, model threshold 17: 128 too large; 16 persists (total 16); 32 too
  // large; 2 would make 18 > 17: skipped.
  EXPECT_EQ(zero3_persistent({128, 16, 32, 2}, 20, 17), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(zero3_persistent({128, 16, 32, 2}, 20, 100), (std::vector<bool>{false, true, false, true}));
  // _create_fp16_sub_groups over partitions 43, 6, 11, 1 with sub_group_size 50: 43, 49, then 60 >= 50 closes the
  // first; the last parameter closes the second (1). 61 or more: one group.
  EXPECT_EQ(zero3_sub_groups({43, 6, 11, 1}, 50), (std::vector<uint64_t>{60, 1}));
  EXPECT_EQ(zero3_sub_groups({43, 6, 11, 1}, 61), (std::vector<uint64_t>{61}));
  // all_gather_coalesced: one parameter, _all_gather_sequential's padded buffer 43 x 3 = 129; two, the flat
  // (43 + 6) x 3 = 147 and each parameter's torch.cat, 128 and 16.
  const Zero3Gather one = zero3_gather({128}, 3);
  EXPECT_EQ(one.gathered, (std::vector<uint64_t>{129}));
  EXPECT_EQ(one.transient, 0u);
  const Zero3Gather two = zero3_gather({128, 16}, 3);
  EXPECT_EQ(two.gathered, (std::vector<uint64_t>{128, 16}));
  EXPECT_EQ(two.transient, 147u);
  // reduce_scatter_coalesced: (11 + 1) x 3 = 36; one grad of 128: 43 x 3 = 129; one grad of 33 (3 divides): a view.
  EXPECT_EQ(zero3_reduce_scatter_elements({32, 2}, 3), 36u);
  EXPECT_EQ(zero3_reduce_scatter_elements({128}, 3), 129u);
  EXPECT_EQ(zero3_reduce_scatter_elements({33}, 3), 0u);
  // __params_to_release on the trace l1 forward {0, 1}, l2 forward {2, 3}, l2 backward, l1 backward; numel 128, 16,
  // 32, 2; parameter 3 persists. After l1's forward the traversal sees l2 (34 elements), l2 again (68), then l1:
  // l1 is kept when max_reuse_distance > 68. After l2's forward the very next fetch is l2's: kept unless 0.
  const std::vector<std::vector<int32_t>> trace = {{0, 1}, {2, 3}, {2, 3}, {0, 1}};
  const std::vector<uint64_t> numel = {128, 16, 32, 2};
  const std::vector<bool> persistent = {false, false, false, true};
  using R = std::vector<std::vector<int32_t>>;
  EXPECT_EQ(zero3_releases(trace, numel, persistent, 0), (R{{0, 1}, {2}, {2}, {0, 1}}));
  EXPECT_EQ(zero3_releases(trace, numel, persistent, 68), (R{{0, 1}, {}, {2}, {0, 1}}));
  EXPECT_EQ(zero3_releases(trace, numel, persistent, 69), (R{{}, {}, {2}, {0, 1}}));
}

// stage3_max_reuse_distance 0: every module released after its forward. Rank 0 of 3, float32 (4 bytes):
// Resident 1148: the partitions 43 + 6 + 11 + 1 = 61 elements (244 bytes: 172 + 24 + 44 + 4); l2.bias (2 elements
// <= the threshold 2) whole, as the first step's _post_step gathered it: 1 x 3 elements, 12 bytes (with gradient
// accumulation, as the second micro-batch's fetch of l2 gathers it: two parameters, so torch.cat's 2 elements, 8
// bytes); no separate float32 sub-group: the partitions are float32 on the GPU already, so _create_fp32_partitions
// takes them as the sub-group (DeepSpeed #7651); Adam's exp_avg and exp_avg_sq 244 each; grad_partitions_flat_buffer
// 244; the IPG bucket 40 x 4 = 160. 244 + 12 + 488 + 244 + 160 = 1148.
// Forward: fetch l1 (both parameters missing): the flat 147 x 4 = 588 transient, l1.weight 512, l1.bias 64; fetch
// l2 (l2.bias persists): l2.weight alone, 33 x 4 = 132.
// Backward: l2 fetched again (132). Hooks: l2.weight (32) and l2.bias (2) go into the bucket; l1.weight (128): 34 +
// 128 > 40 reduces [l2.weight, l2.bias] (flat 36 x 4 = 144), then stays as its own grad (128 > 40); l1.bias: 128 +
// 16 > 40 reduces [l1.weight] (129 x 4 = 516); the epilogue reduces [l1.bias] (18 x 4 = 72). l1's input x needs no
// grad: no post-backward hook, its gathered parameters (576) stay until release_backward_leftovers.
// Peak at l1.bias's hook: gathered l1 576 + grad:l1.weight 512 + grad:l1.bias 64 + the reduce flat 516 + the model's
// output y 32 and loss 4 and the batch the training loop holds, x 128 and targets 32 (all kept to the end) = 1864.
// Step: the largest gradient partition in float64, 43 x 8 = 344; the flattened grads 244, already float32 (`.to`
// returns them: no second copy).
TEST(DeepSpeedZero3, EveryBufferByHand) {
  const TrainingResult r = build_training_program(deepspeed3_mlp(), zero3_run(0));
  const Program& p = r.program;
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor:l1.weight"), 172u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor:l1.bias"), 24u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor:l2.weight"), 44u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ds_tensor:l2.bias"), 4u);
  EXPECT_EQ(bytes_named(p, "deepspeed:persistent:l2.bias"), 12u);
  EXPECT_LT(buffer_named(p, "deepspeed:fp32_partitioned_groups_flat"), 0);
  EXPECT_EQ(bytes_named(p, "deepspeed:grad_partitions_flat_buffer"), 244u);
  EXPECT_EQ(bytes_named(p, "deepspeed:ipg_bucket"), 160u);
  EXPECT_EQ(resident_bytes(p), 1148u);
  EXPECT_EQ(bytes_named(p, "deepspeed:all_gather_flat:l1"), 588u);
  EXPECT_EQ(bytes_named(p, "deepspeed:gathered:l1.weight"), 512u);
  EXPECT_EQ(bytes_named(p, "deepspeed:gathered:l1.bias"), 64u);
  EXPECT_EQ(bytes_named(p, "deepspeed:gathered:l2.weight"), 132u);
  EXPECT_LT(buffer_named(p, "deepspeed:gathered:l2.bias"), 0);
  EXPECT_EQ(bytes_named(p, "deepspeed:reduce_scatter_flat"), 144u);  // the first reduce's
  EXPECT_EQ(bytes_named(p, "deepspeed:grad_partition_double"), 344u);
  EXPECT_EQ(bytes_named(p, "deepspeed:flat_grads:0"), 244u);
  EXPECT_LT(buffer_named(p, "deepspeed:fp32_grad:0"), 0);
  EXPECT_GE(step_named(p, "deepspeed:fetch_backward:l2"), 0);
  EXPECT_GE(step_named(p, "deepspeed:fetch_backward:l1"), 0);
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1864u);
  EXPECT_EQ(p.steps[peak.step].name, "deepspeed:grad_hook:l1.bias");
  EXPECT_EQ(r.grad_bytes, 244u);
  EXPECT_EQ(r.param_bytes, 244u + 12u);
  TrainingRun accumulating = zero3_run(0);
  accumulating.grad_accum = 2;
  EXPECT_EQ(bytes_named(build_training_program(deepspeed3_mlp(), accumulating).program,
                        "deepspeed:persistent:l2.bias"),
            8u);
}

// stage3_max_reuse_distance binding and not. At the loss (targets int64 [4], 32 bytes), with distance 0 nothing
// whole is live: x 128 + targets 32 + r 256 (Relu's and Gemm_2's saved output) + y 32 + log_softmax 32 +
// total_weight 4 + loss 4 = 488. Distance 50 binds for l1 (68 elements before its reuse) and not for l2 (0): l2.weight
// stays gathered, 488 + 132 = 620, and is not fetched again in backward. Distance 1e9 (the default) binds for
// neither: l1 stays too, 620 + 576 = 1196, and only the persistent bias and these copies are read in backward.
// The peak (1864, at l1.bias's hook) is the same in all three: l1 is gathered at its backward either way.
TEST(DeepSpeedZero3, ReuseDistanceKeepsModulesFromForwardIntoBackward) {
  const Program none = build_training_program(deepspeed3_mlp(), zero3_run(0)).program;
  const Program some = build_training_program(deepspeed3_mlp(), zero3_run(50)).program;
  const Program all = build_training_program(deepspeed3_mlp(), zero3_run(1000000000)).program;
  EXPECT_EQ(bytes_named(none, "targets"), 32u);
  EXPECT_EQ(live_at_step(none, "loss:cross_entropy"), 488u);
  EXPECT_EQ(live_at_step(some, "loss:cross_entropy"), 620u);
  EXPECT_EQ(live_at_step(all, "loss:cross_entropy"), 1196u);
  EXPECT_GE(step_named(some, "deepspeed:release:l1"), 0);
  EXPECT_LT(step_named(some, "deepspeed:release:l2"), 0);
  EXPECT_LT(step_named(some, "deepspeed:fetch_backward:l2"), 0);
  EXPECT_GE(step_named(some, "deepspeed:fetch_backward:l1"), 0);
  EXPECT_LT(step_named(all, "deepspeed:release:l1"), 0);
  EXPECT_LT(step_named(all, "deepspeed:fetch_backward:l1"), 0);
  for (const Program* p : {&none, &some, &all}) EXPECT_EQ(peak_live_bytes(*p).bytes, 1864u);
}

// sub_group_size 50: sub-groups of 60 and 1 partition elements; the step flattens each in turn (float32: no cast):
// 240 bytes for the first, 4 for the second; Adam's states per sub-group (240 and 4 bytes each).
TEST(DeepSpeedZero3, SubGroupsStepOneAtATime) {
  TrainingRun o = zero3_run(0);
  o.deepspeed.sub_group_size = 50;
  const Program p = build_training_program(deepspeed3_mlp(), o).program;
  EXPECT_EQ(bytes_named(p, "deepspeed:flat_grads:0"), 240u);
  EXPECT_LT(buffer_named(p, "deepspeed:fp32_grad:0"), 0);
  EXPECT_EQ(bytes_named(p, "deepspeed:flat_grads:1"), 4u);
  EXPECT_LT(buffer_named(p, "deepspeed:fp32_grad:1"), 0);
  EXPECT_EQ(bytes_named(p, "exp_avg:deepspeed:fp32_sub_group_0"), 240u);
  EXPECT_EQ(bytes_named(p, "exp_avg_sq:deepspeed:fp32_sub_group_1"), 4u);
  EXPECT_EQ(resident_bytes(p), 1148u);  // the same total: 244 = 240 + 4 per state
}

// fp16 (DeepSpeed's fp16 section: the model cast to float16): step() first checks the gradient partitions for
// overflow (has_overflow: torch.isinf of grad_partitions_flat_buffer, a bool per element, and its one-byte any()),
// before the norm. The partitions are 43 + 6 + 11 + 1 = 61 elements: the buffer 122 B in float16, the check 61 + 1 B.
// The step's float32 cast of the flattened grads follows as under bf16 (61 x 4 = 244 B). bf16 checks nothing.
TEST(DeepSpeedZero3, Fp16ChecksTheGradientPartitionsForOverflowFirst) {
  TrainingRun o = zero3_run(0);
  o.precision = Precision::Fp16;
  const Program p = build_training_program(deepspeed3_mlp(), o).program;
  EXPECT_EQ(bytes_named(p, "deepspeed:grad_partitions_flat_buffer"), 122u);
  EXPECT_EQ(bytes_named(p, "deepspeed:isinf"), 61u);
  EXPECT_EQ(bytes_named(p, "deepspeed:isinf_any"), 1u);
  EXPECT_EQ(bytes_named(p, "deepspeed:fp32_grad:0"), 244u);
  const int check = step_named(p, "deepspeed:has_overflow"), norm = step_named(p, "deepspeed:get_grad_norm_direct");
  EXPECT_GE(check, 0);
  EXPECT_EQ(check + 1, norm);
  o.precision = Precision::Bf16;
  const Program bf16 = build_training_program(deepspeed3_mlp(), o).program;
  EXPECT_LT(buffer_named(bf16, "deepspeed:isinf"), 0);
  EXPECT_LT(step_named(bf16, "deepspeed:has_overflow"), 0);
}

// What the graph does not show one to one is refused, naming the module: a module that owns a parameter and
// contains another (a.weight and a.b.weight).
TEST(DeepSpeedZero3, AContainerOwningParametersIsRefused) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h = b.node1("MatMul", {x, b.weight("a.weight", {8, 8})}, "h", {4, 8});
  const int32_t y = b.node1("MatMul", {h, b.weight("a.b.weight", {8, 2})}, "y", {4, 2});
  b.output(y);
  try {
    build_training_program(b.graph(), zero3_run(0));
    ADD_FAILURE() << "a container owning parameters was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("module 'a' owns parameters and contains module 'a.b'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memplan
