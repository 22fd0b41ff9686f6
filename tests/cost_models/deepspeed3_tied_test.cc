// DeepSpeed ZeRO-3 with a tied head (transformers' tie_weights: lm_head.weight is embed_tokens.weight, one
// Parameter two modules hold): each module's hooks fetch and release it with its own call, by hand from
// deepspeed/runtime/zero/ at DeepSpeed edaa722 (parameter_offload.py's hooks, iter_params(module, recurse=False);
// partitioned_param_coordinator.py __params_to_release); cost_models/training_deepspeed3.cc ds3_find_modules.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/deepspeed3_fixture.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::bytes_named;
using testing::coordinator_steps;
using testing::GraphBuilder;
using testing::step_named;

// ids[4] -> /embed/Gather(embed.weight [10,8]) -> e[4,8] -> /fc/MatMul(fc.weight [8,8]) -> h[4,8]
//        -> /head/Transpose(embed.weight) -> /head/MatMul -> y[4,10], float32, as torch.onnx.export writes a tied
// head (one initializer, under the embedding's name). `head_scope`: the head's scope ("" for F.linear in the root).
Graph tied(const std::string& head_scope) {
  GraphBuilder b;
  const int32_t ids = b.input("ids", {4}, DType::Int64);
  const int32_t table = b.weight("embed.weight", {10, 8});
  const int32_t e = b.node1("Gather", {table, ids}, "e", {4, 8});
  const int32_t h = b.node1("MatMul", {e, b.weight("fc.weight", {8, 8})}, "h", {4, 8});
  const int32_t wt = b.node1("Transpose", {table}, "wt", {8, 10});
  b.output(b.node1("MatMul", {h, wt}, "y", {4, 10}));
  Graph g = b.graph();
  g.nodes[0].name = "/embed/Gather";
  g.nodes[1].name = "/fc/MatMul";
  g.nodes[2].name = head_scope + "/Transpose";
  g.nodes[3].name = head_scope + "/MatMul";
  return g;
}

// 2 GPUs, nothing persistent, no prefetch, the output seeding backward (no loss).
TrainingRun tied_zero3(uint64_t reuse, uint64_t prefetch = 0) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.gpus = 2;
  o.shard = Sharding::Zero3;
  o.deepspeed.enabled = true;
  o.deepspeed.stage = 3;
  o.deepspeed.reduce_bucket_size = 64;
  o.deepspeed.overlap_comm = true;
  o.deepspeed.prefetch_bucket_size = prefetch;
  o.deepspeed.max_live_parameters = 1000;
  o.deepspeed.param_persistence_threshold = 0;
  o.deepspeed.max_reuse_distance = reuse;
  return o;
}

// The fetch trace: embed {E} (forward), fc {F}, head {E}; backward: head {E} (its outputs need grad), fc {F}, embed
// {E} (E needs grad, so e does; ids needs none: embed releases at release_backward_leftovers). E is one parameter in
// two modules' iter_params, gathered into one whole copy (80 elements on 2 GPUs: 80 x 4 = 320 B).
//  - stage3_max_reuse_distance 0: every release frees what its module fetched; E gathered four times, once per call.
//  - 100 elements: after embed's forward the scan from the next step meets fc (64) then head's E (144): E kept; after
//    fc's it meets head (80) and head again (160 >= 100: stop) before F: F released. After head's forward and
//    backward E recurs before 100 elements (head's backward, embed's backward): kept to release_backward_leftovers,
//    gathered once for the whole step.
TEST(DeepSpeedZero3Tied, EachModuleFetchesTheSharedParameter) {
  const Program none = build_training_program(tied("/head"), tied_zero3(0)).program;
  const std::vector<std::string> every = {
      "deepspeed:fetch:embed", "deepspeed:release:embed", "deepspeed:fetch:fc", "deepspeed:release:fc",
      "deepspeed:fetch:head", "deepspeed:release:head", "deepspeed:fetch_backward:head",
      "deepspeed:release_backward:head", "deepspeed:fetch_backward:fc", "deepspeed:release_backward:fc",
      "deepspeed:fetch_backward:embed", "deepspeed:release_backward_leftovers"};
  EXPECT_EQ(coordinator_steps(none), every);
  EXPECT_EQ(bytes_named(none, "deepspeed:gathered:embed.weight"), 320u);
  const Program reuse = build_training_program(tied("/head"), tied_zero3(100)).program;
  const std::vector<std::string> kept = {"deepspeed:fetch:embed", "deepspeed:fetch:fc", "deepspeed:release:fc",
                                         "deepspeed:fetch_backward:fc", "deepspeed:release_backward:fc",
                                         "deepspeed:release_backward_leftovers"};
  EXPECT_EQ(coordinator_steps(reuse), kept);
}

// The peak, stage3_max_reuse_distance 0, by hand (non-resident bytes; float32): the tied parameter's grad comes in
// twice and autograd sums it before its one AccumulateGrad, whose hook (ZeRO-3's grad hook) then fires once.
// head's backward: grad of Transpose's output, h^T grad:y [8,10], whose TransposeBackward is a view of it: the
// embedding's first contribution, 320 B, held in AccumulateGrad's input buffer. embed's backward (its fetch gathers E
// again, 320) writes embedding_dense_backward's [10,8] (320) and, the held one being a view, the out-of-place sum
// (320). Live there: ids 32 + y 160 (the model's output, kept through the step) + grad:e 128 + gathered E 320 + the
// held contribution 320 + the dense one 320 + the sum 320 = 1600, the step's peak; the hook then moves the sum into
// the bucket and frees it.
TEST(DeepSpeedZero3Tied, TheSharedGradientIsSummedBeforeItsOneHook) {
  const Program p = build_training_program(tied("/head"), tied_zero3(0)).program;
  const auto peak = testing::peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 1600u);
  EXPECT_EQ(p.steps[peak.step].name, "backward:/embed/Gather");
  EXPECT_GE(step_named(p, "deepspeed:grad_hook:embed.weight"), 0);
  EXPECT_GT(step_named(p, "deepspeed:grad_hook:embed.weight"), peak.step);
}

// stage3_prefetch_bucket_size 80, stage3_max_live_parameters 1000, reuse distance 0. Module calls (step ids): root
// 0, embed 1, fc 2, head 3; backward root 4, head 5, fc 6, embed 7. __param_queue (E,1) (F,2) (E,3) (E,5) (F,6)
// (E,7). Step 0 (root) prefetches min(1000, 80): (E,1), 80 elements. Step 1 (embed) waits on E and prefetches: (F,2)
// 64, then (E,3) (E,5) (F,6) (E,7) popped as already fetched (most recent steps E 7, F 6). embed's release at step 2:
// E's most recent step 7 > 2, kept; so are fc's and head's. fc's backward release (step 7): F's 6 <= 7, released;
// E at the leftovers.
TEST(DeepSpeedZero3Tied, PrefetchKeepsTheSharedParameterForItsLaterCalls) {
  const Program p = build_training_program(tied("/head"), tied_zero3(0, 80)).program;
  const std::vector<std::string> steps = {"deepspeed:prefetch:(root)", "deepspeed:prefetch:embed",
                                          "deepspeed:release_backward:fc", "deepspeed:release_backward_leftovers"};
  EXPECT_EQ(coordinator_steps(p), steps);
}

// F.linear(x, embed.weight) in the model's own forward: the read is the root's, a module around the owner, which
// DeepSpeed then fetches the parameter for (register_external_parameter on the module being called): refused,
// naming the parameter, the node and both modules.
TEST(DeepSpeedZero3Tied, AReadInAModuleAroundTheOwnerIsRefused) {
  try {
    build_training_program(tied(""), tied_zero3(0));
    ADD_FAILURE() << "a root read of the embedding was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'embed.weight' is read by node '/Transpose' in module '(the root)', around its "
                                         "own module 'embed'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace memplan
