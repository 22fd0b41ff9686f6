// FSDP (--shard fsdp): wrapping units and the FULL_SHARD program of a small two-block graph; every expected
// number is worked out by hand in the comments from the rules in cost_models/training_fsdp.cc.
#include <gtest/gtest.h>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "planner/liveness.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::step_named;

// x[4,8] -> MatMul(layers.0.fc.w[8,8]) -> Relu -> MatMul(layers.1.fc.w[8,8]) -> Relu -> Gemm(head.w[2,8], head.b[2]) -> y[4,2]
// Units (default rule: prefix "layers" seen with indices 0 and 1, each block with a submodule fc): root
// {head.w, head.b}, layers.0, layers.1.
Graph fsdp_blocks() { return testing::two_fc_blocks(8, 8); }

TrainingRun fsdp(int gpus) {
  TrainingRun o;
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
  const TrainingResult r = build_training_program(fsdp_blocks(), fsdp(3));
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
  const Program p = build_training_program(fsdp_blocks(), fsdp(3)).program;
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
  TrainingRun o = fsdp(3);
  o.fsdp_wrap = "^(layers)\\.";  // both blocks in one unit: 128 elements, padded to 129, shard 43 = 172 bytes
  const TrainingResult r = build_training_program(fsdp_blocks(), o);
  EXPECT_EQ(r.program.buffers[buffer_named(r.program, "fsdp_flat_param_shard:layers")].bytes, 172u);
  EXPECT_EQ(r.param_bytes, 172u + 24u);
}

std::string message_of(const TrainingRun& o) {
  try {
    build_training_program(fsdp_blocks(), o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Fsdp, BadOptionsAreInputErrors) {
  EXPECT_THROW(message_of(fsdp(1)), InternalError);  // refused by the option checks first: a precondition here
  TrainingRun o = fsdp(2);
  o.fsdp_wrap = "(decoder)\\.";
  EXPECT_NE(message_of(o).find("matches no parameter"), std::string::npos) << message_of(o);
  o.fsdp_wrap = "layers";
  EXPECT_NE(message_of(o).find("has no capture group"), std::string::npos) << message_of(o);
  o.fsdp_wrap = "(";
  EXPECT_NE(message_of(o).find("is not a valid regular expression"), std::string::npos) << message_of(o);
}

// Regression: LoRA and QLoRA under FSDP kept the frozen base whole on every GPU and sharded only the
// trainable parameters. FSDP flattens every parameter of a wrapped unit, frozen or not, into the unit's
// FlatParameter (use_orig_params=True, as PEFT runs it), and each GPU keeps 1/N of it.
uint64_t resident_weight_bytes(const Program& p) {
  uint64_t sum = 0;
  for (const Buffer& b : p.buffers)
    if (b.resident && b.category == Category::Weight) sum += b.bytes;
  return sum;
}

TrainingRun lora_fsdp(int gpus) {
  TrainingRun o = fsdp(gpus);
  o.lora_rank = 2;
  o.lora_targets = "fc";  // layers.0.fc.w and layers.1.fc.w; the head (head.w, head.b) stays frozen as it is
  return o;
}

// 3 GPUs, fp32 (4 bytes), use_orig_params=True: each parameter starts at a multiple of 16 bytes (4 elements).
// Unit layers.N, in flattening order: fc.w [0, 64), lora_A [2, 8] [64, 80), lora_B [8, 2] [80, 96): 96
// elements, a multiple of 3, shard 32 elements = 128 bytes, all-gathered 96 * 4 = 384 bytes.
// Root: head.w [0, 16), head.b [16, 18): 18 elements, shard 6 = 24 bytes, all-gathered 72 bytes; nothing in
// it trains: no grad, no state.
// Per GPU: parameters 128 + 128 + 24 = 280 bytes (before the fix: the frozen base whole, 256 + 256 + 72,
// plus the adapters' shards). Grads: the whole shard of each unit that trains (the reduce-scattered flat
// grad), 128 + 128 = 256. Adam's states cover the trainable elements of the busiest rank's shard: rank 2
// holds [64, 96), lora_A and lora_B, 32 elements = 128 bytes per unit, two states: 2 * (128 + 128) = 512.
TEST(FsdpKeptFrozenBaseWhole, LoraShardsTheFrozenBaseWithItsUnit) {
  const TrainingResult r = build_training_program(fsdp_blocks(), lora_fsdp(3));
  const Program& p = r.program;
  EXPECT_EQ(resident_weight_bytes(p), 280u);
  EXPECT_EQ(r.param_bytes, 280u);
  EXPECT_EQ(r.grad_bytes, 256u);
  EXPECT_EQ(r.optimizer_state_bytes, 512u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_flat_param_shard:layers.0")].bytes, 128u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_flat_param_shard:root")].bytes, 24u);
  EXPECT_EQ(buffer_named(p, "layers.0.fc.w"), -1);  // no whole copy of the frozen base
  EXPECT_EQ(buffer_named(p, "head.w"), -1);
  // The all-gather transient is the unit's whole flat parameter: 384 bytes (the root's 72).
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_unsharded:layers.1")].bytes, 384u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_unsharded:root")].bytes, 72u);
  // At layers.1's base MatMul: the root (gathered first, kept) 72 + layers.1 384 = 456 bytes gathered.
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  EXPECT_EQ(weights_live_at(p, live, "/MatMul_2"), 456u);
  // The frozen base's view requires grad (the flat parameter does), so autograd computes its 64 * 4 = 256
  // byte grad; the unsharded flat grad is the whole flat parameter (its padding included: no F.pad copy).
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:layers.0.fc.w:view")].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_unsharded_grad:layers.0")].bytes, 384u);
  EXPECT_EQ(buffer_named(p, "fsdp_unsharded_grad:layers.0:padded"), -1);
  EXPECT_EQ(buffer_named(p, "fsdp_grad_shard:root"), -1);
}

// QLoRA: the same with --frozen-dtype nf4 on the two base weights (the head, writing the graph output, stays
// fp32). bitsandbytes packs n = 64 values into (n + 1) // (2 * 4) = 8 elements of quant_storage (the model's
// fp32): 32 bytes in the flat parameter; its absmax (one float32 per 64-value block, 4 bytes) is the
// QuantState, kept whole on every GPU.
// Unit layers.N: fc.w [0, 8), lora_A [8, 24), lora_B [24, 40): 40 elements padded to 42, shard 14 = 56
// bytes, all-gathered 42 * 4 = 168 bytes. Ranks: 0 holds [0, 14) (6 trainable), 1 [14, 28) (10 + 4 = 14),
// 2 [28, 42) (12): the busiest, rank 1, has 14 trainable elements = 56 bytes.
// Per GPU: shards 56 + 56 + 24 = 136 bytes + quant states 4 + 4 = 144 resident weight bytes; grads 56 + 56
// = 112; Adam 2 * (56 + 56) = 224.
TEST(FsdpKeptFrozenBaseWhole, QloraShardsTheQuantizedStorage) {
  TrainingRun o = lora_fsdp(3);
  o.frozen_storage = FrozenStorage::Nf4;
  const TrainingResult r = build_training_program(fsdp_blocks(), o);
  const Program& p = r.program;
  EXPECT_EQ(resident_weight_bytes(p), 144u);
  EXPECT_EQ(r.param_bytes, 136u);
  EXPECT_EQ(r.frozen_stored_bytes, 8u);
  EXPECT_EQ(r.grad_bytes, 112u);
  EXPECT_EQ(r.optimizer_state_bytes, 224u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_flat_param_shard:layers.0")].bytes, 56u);
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.0.fc.w:quant_state")].bytes, 4u);
  EXPECT_EQ(p.buffers[buffer_named(p, "fsdp_unsharded:layers.0")].bytes, 168u);
  // MatMul4Bit.backward returns no grad for the 4-bit weight; each op still dequantizes it (64 * 4 bytes).
  EXPECT_EQ(buffer_named(p, "grad:layers.0.fc.w:view"), -1);
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.0.fc.w:dequantized")].bytes, 256u);
}

// Refused by the option checks first (report/option_checks.cc, fsdp x frozen-int8 and fsdp x frozen-half, with
// their messages in tests/report/combinations_test.cc): here a precondition.
TEST(FsdpKeptFrozenBaseWhole, Int8AndReStoredFloatsCannotBeFlattened) {
  TrainingRun o = lora_fsdp(2);
  o.frozen_storage = FrozenStorage::Int8;
  EXPECT_THROW(message_of(o), InternalError);
  o.frozen_storage = FrozenStorage::Bf16;
  EXPECT_THROW(message_of(o), InternalError);
}

}  // namespace
}  // namespace memplan
