// FSDP (--shard fsdp): wrapping units and the FULL_SHARD program of a small two-block graph; every expected
// number is worked out by hand in the comments from the rules in cost_models/training_fsdp.cc.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "planner/liveness.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::int_attr;
using testing::step_named;

// x[4,8] -> MatMul(layers.0.fc.w[8,8]) -> Relu -> MatMul(layers.1.fc.w[8,8]) -> Relu -> Gemm(head.w[2,8], head.b[2]) -> y[4,2]
// Units (default rule: prefix "layers" seen with indices 0 and 1, each block with a submodule fc): root
// {head.w, head.b}, layers.0, layers.1.
Graph two_blocks() {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h0 = b.node1("MatMul", {x, b.weight("layers.0.fc.w", {8, 8})}, "h0", {4, 8});
  const int32_t r0 = b.node1("Relu", {h0}, "r0", {4, 8});
  const int32_t h1 = b.node1("MatMul", {r0, b.weight("layers.1.fc.w", {8, 8})}, "h1", {4, 8});
  const int32_t r1 = b.node1("Relu", {h1}, "r1", {4, 8});
  const int32_t y = b.node1("Gemm", {r1, b.weight("head.w", {2, 8}), b.weight("head.b", {2})}, "y", {4, 2},
                            {{"transB", int_attr(1)}});
  b.output(y);
  return b.graph();
}

TrainingOptions fsdp(int gpus) {
  TrainingOptions o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::CrossEntropy;
  o.gpus = gpus;
  o.shard = Sharding::Fsdp;
  return o;
}

uint64_t weights_live_at(const Program& p, const LiveBytes& live, const std::string& step) {
  const int32_t s = step_named(p, step);
  EXPECT_GE(s, 0) << step;
  return s < 0 ? 0 : live.per_step_by_category[s][static_cast<int>(Category::Weight)];
}

// 3 GPUs, fp32. layers.N: 64 elements, padded to 66 (a multiple of 3): shard 22 elements = 88 bytes, the
// all-gathered flat parameter 66 * 4 = 264 bytes. root: 16 + 2 = 18 elements, no padding: shard 6 = 24
// bytes, gathered 72 bytes. Per GPU: parameters 88 + 88 + 24 = 200 bytes, grads 200, Adam's two states 400.
TEST(Fsdp, ShardsArePaddedFlatParameters) {
  const TrainingResult r = build_training_program(two_blocks(), fsdp(3));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 200u);
  EXPECT_EQ(r.grad_bytes, 200u);
  EXPECT_EQ(r.optimizer_state_bytes, 400u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_flat_param_shard:layers.0")].bytes, 88u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_flat_param_shard:root")].bytes, 24u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_unsharded:layers.1")].bytes, 264u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_unsharded:root")].bytes, 72u);
  // The unsharded grad is the unpadded 64 * 4 = 256 bytes, F.pad-ded to 264 before the reduce-scatter; the
  // root's 18 elements need no padding.
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_unsharded_grad:layers.0")].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_unsharded_grad:layers.0:padded")].bytes, 264u);
  EXPECT_EQ(buffer_named(p, "fsdp_unsharded_grad:root:padded"), -1);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_grad_shard:layers.0")].bytes, 88u);
  // No per-parameter copies: the parameters exist only as their unit's flat parameter.
  EXPECT_EQ(buffer_named(p, "layers.0.fc.w"), -1);
  EXPECT_EQ(buffer_named(p, "layers.0.fc.w:gathered"), -1);
}

// The all-gathered units alive (Weight category, resident shards apart) at each op (GraphBuilder names the
// nodes /MatMul_0 (h0), /Relu_1, /MatMul_2 (h1), /Relu_3 (r1), /Gemm_4):
//  forward of h0: root (gathered first, kept) 72 + layers.0 264 = 336;
//  forward of h1: root 72 + layers.1 264 = 336 (layers.0 resharded after its forward);
//  backward of r1 (layers.1's first backward op): layers.1 264 + layers.0 264 prefetched = 528; the root
//    was freed in its post-backward, right after the head's backward;
//  backward of h0: layers.0 264 alone (layers.1 freed after its post-backward).
TEST(Fsdp, CurrentAndPrefetchedUnitsAreGathered) {
  const Program p = build_training_program(two_blocks(), fsdp(3)).program;
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  EXPECT_EQ(weights_live_at(p, live, "/MatMul_0"), 336u);
  EXPECT_EQ(weights_live_at(p, live, "/MatMul_2"), 336u);
  EXPECT_EQ(weights_live_at(p, live, "backward:/Relu_3"), 528u);
  EXPECT_EQ(weights_live_at(p, live, "backward:/MatMul_0"), 264u);
  // The reduce-scattered grad shards stay to the optimizer step: 88 + 88 + 24 = 200 bytes of grads.
  EXPECT_EQ(live.per_step_by_category[step_named(p, "optimizer:step")][static_cast<int>(Category::Gradient)], 200u);
}

// The Linears of a Sequential (mlp.0.weight, mlp.3.weight) are no repeated block: one root unit.
TEST(Fsdp, LeafLayersOfASequentialAreNoBlocks) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h = b.node1("MatMul", {x, b.weight("mlp.0.weight", {8, 8})}, "h", {4, 8});
  const int32_t y = b.node1("MatMul", {h, b.weight("mlp.3.weight", {8, 8})}, "y", {4, 8});
  b.output(y);
  const Program p = build_training_program(b.graph(), fsdp(2)).program;
  EXPECT_EQ(buffer_named(p, "fsdp_flat_param_shard:mlp.0"), -1);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_flat_param_shard:root")].bytes, 256u);  // 128 elements / 2 * 4 B
}

TEST(Fsdp, WrapRegexNamesUnits) {
  TrainingOptions o = fsdp(3);
  o.fsdp_wrap = "^(layers)\\.";  // both blocks in one unit: 128 elements, padded to 129, shard 43 = 172 bytes
  const TrainingResult r = build_training_program(two_blocks(), o);
  EXPECT_EQ(r.program.buffers[buffer_named(r.program, "fsdp_flat_param_shard:layers")].bytes, 172u);
  EXPECT_EQ(r.param_bytes, 172u + 24u);
}

std::string message_of(const TrainingOptions& o) {
  try {
    build_training_program(two_blocks(), o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Fsdp, BadOptionsAreInputErrors) {
  EXPECT_NE(message_of(fsdp(1)).find("--shard fsdp needs --gpus 2 or more"), std::string::npos);
  TrainingOptions o = fsdp(2);
  o.fsdp_wrap = "(decoder)\\.";
  EXPECT_NE(message_of(o).find("matches no parameter"), std::string::npos) << message_of(o);
  o.fsdp_wrap = "layers";
  EXPECT_NE(message_of(o).find("has no capture group"), std::string::npos) << message_of(o);
  o.fsdp_wrap = "(";
  EXPECT_NE(message_of(o).find("is not a valid regular expression"), std::string::npos) << message_of(o);
}

}  // namespace
}  // namespace memplan
