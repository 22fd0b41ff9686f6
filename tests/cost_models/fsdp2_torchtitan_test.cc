// --fsdp-wrap torchtitan under --shard fsdp2: torchtitan's apply_fsdp groups (cost_models/wrap_units.h), worked out
// by hand on a tiny Llama-shaped graph.
#include <gtest/gtest.h>

#include <string>

#include "cost_models/cost_model.h"
#include "cost_models/fsdp_groups.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::last_reader;
using testing::bytes_of;

// ids[2,3] -> Gather(model.embed_tokens.weight[10,4]) -> e -> MatMul(model.layers.0.mlp.w[4,4]) -> Relu
// -> MatMul(model.layers.1.mlp.w[4,4]) -> Mul(model.norm.weight[4]) -> MatMul(lm_head.weight[4,10]) -> y[2,3,10].
Graph titan_blocks() {
  GraphBuilder b;
  const int32_t ids = b.input("ids", {2, 3}, DType::Int64);
  const int32_t e = b.node1("Gather", {b.weight("model.embed_tokens.weight", {10, 4}), ids}, "e", {2, 3, 4});
  const int32_t h0 = b.node1("MatMul", {e, b.weight("model.layers.0.mlp.w", {4, 4})}, "h0", {2, 3, 4});
  const int32_t r0 = b.node1("Relu", {h0}, "r0", {2, 3, 4});
  const int32_t h1 = b.node1("MatMul", {r0, b.weight("model.layers.1.mlp.w", {4, 4})}, "h1", {2, 3, 4});
  const int32_t n = b.node1("Mul", {h1, b.weight("model.norm.weight", {4})}, "n", {2, 3, 4});
  b.output(b.node1("MatMul", {n, b.weight("lm_head.weight", {4, 10})}, "y", {2, 3, 10}));
  return b.graph();
}

TrainingRun run_fsdp2_torchtitan(const std::string& wrap) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::CrossEntropy;
  o.gpus = 2;
  o.shard = Sharding::Fsdp2;
  o.fsdp_wrap = wrap;
  return o;
}

// 2 GPUs, float32; each rank keeps ceil(dim0 / 2) rows of each parameter (training_fsdp2.cc):
//   tok_embeddings: embed [10,4] 5 x 4 = 20 elements = 80 B, all-gathered 2 x 80 = 160 B;
//   model.layers.0 / .1: [4,4] 2 x 4 = 8 elements = 32 B, gathered 64 B;
//   norm_output: norm [4] 2 elements = 8 B + lm_head [4,10] 2 x 10 = 20 elements = 80 B: 88 B, gathered 176 B;
//   root: nothing left (no shard). The default units put embed, norm and head in the root: 80 + 8 + 80 = 168 B.
// Parameters per GPU either way: 80 + 32 + 32 + 88 = 232 B.
TEST(Fsdp2Torchtitan, GroupsEmbeddingBlocksAndNormWithHead) {
  const TrainingResult r = build_training_program(titan_blocks(), run_fsdp2_torchtitan(kTorchtitanWrap));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 232u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:tok_embeddings"), 80u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:model.layers.0"), 32u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:norm_output"), 88u);
  EXPECT_EQ(buffer_named(p, "fsdp2_sharded_params:root"), -1);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:tok_embeddings"), 160u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:model.layers.1"), 64u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:norm_output"), 176u);
  const TrainingResult d = build_training_program(titan_blocks(), run_fsdp2_torchtitan(""));
  EXPECT_EQ(d.param_bytes, 232u);
  EXPECT_EQ(bytes_of(d.program, "fsdp2_sharded_params:root"), 168u);
}

// What stays gathered between forward and backward: [norm, output] (reshard_after_forward=False): its forward copy
// (176 B) is read by its backward and never gathered again; every block and the embedding are resharded after their
// forward and gathered again for their backward (the embedding's output needs a grad: its pre-backward hook runs).
TEST(Fsdp2Torchtitan, NormAndOutputStayGatheredBetweenForwardAndBackward) {
  const Program p = build_training_program(titan_blocks(), run_fsdp2_torchtitan(kTorchtitanWrap)).program;
  const int32_t kept = buffer_named(p, "fsdp2_unsharded:norm_output");
  ASSERT_GE(kept, 0);
  ASSERT_GE(last_reader(p, kept), 0);
  EXPECT_EQ(p.steps[last_reader(p, kept)].phase, Phase::Backward);
  EXPECT_EQ(buffer_named(p, "fsdp2_unsharded:norm_output:backward"), -1);
  for (const std::string unit : {"model.layers.0", "model.layers.1", "tok_embeddings"}) {
    const int32_t forward = buffer_named(p, "fsdp2_unsharded:" + unit);
    ASSERT_GE(forward, 0) << unit;
    EXPECT_EQ(p.steps[last_reader(p, forward)].phase, Phase::Forward) << unit;
    EXPECT_GE(buffer_named(p, "fsdp2_unsharded:" + unit + ":backward"), 0) << unit;
  }
}

// --fsdp-wrap accelerate (accelerate's fsdp2_prepare_model, v1.14.0): on the untied graph the same groups as
// torchtitan's (the input embedding alone, each block, [norm, output] kept). Tied (the head reads the embedding's
// table, ids -> Gather(embed [10,4]) ... -> MatMul(n, Transpose(embed))): accelerate shards no separate embedding unit
// and puts the table in the tail with the norm ([final_norm, input_embed], reshard_after_forward=False): norm_output
// holds norm 2 + embed 5 x 4 = 20 elements, 88 B, gathered from the forward's first op (the Gather) to its backward,
// never gathered again; no tok_embeddings group. Parameters per GPU 88 + 32 + 32 = 152 B.
TEST(Fsdp2Torchtitan, AccelerateKeepsATiedEmbeddingWithTheTail) {
  const TrainingResult untied = build_training_program(titan_blocks(), run_fsdp2_torchtitan(kAccelerateWrap));
  EXPECT_EQ(bytes_of(untied.program, "fsdp2_sharded_params:tok_embeddings"), 80u);
  EXPECT_EQ(bytes_of(untied.program, "fsdp2_sharded_params:norm_output"), 88u);
  EXPECT_EQ(untied.param_bytes, 232u);

  GraphBuilder b;
  const int32_t ids = b.input("ids", {2, 3}, DType::Int64);
  const int32_t table = b.weight("model.embed_tokens.weight", {10, 4});
  const int32_t e = b.node1("Gather", {table, ids}, "e", {2, 3, 4});
  const int32_t h0 = b.node1("MatMul", {e, b.weight("model.layers.0.mlp.w", {4, 4})}, "h0", {2, 3, 4});
  const int32_t r0 = b.node1("Relu", {h0}, "r0", {2, 3, 4});
  const int32_t h1 = b.node1("MatMul", {r0, b.weight("model.layers.1.mlp.w", {4, 4})}, "h1", {2, 3, 4});
  const int32_t n = b.node1("Mul", {h1, b.weight("model.norm.weight", {4})}, "n", {2, 3, 4});
  const int32_t t = b.node1("Transpose", {table}, "embed_t", {4, 10}, {{"perm", testing::ints_attr({1, 0})}});
  b.output(b.node1("MatMul", {n, t}, "y", {2, 3, 10}));
  const TrainingResult tied = build_training_program(b.graph(), run_fsdp2_torchtitan(kAccelerateWrap));
  const Program& p = tied.program;
  EXPECT_EQ(buffer_named(p, "fsdp2_sharded_params:tok_embeddings"), -1);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:norm_output"), 88u);
  EXPECT_EQ(tied.param_bytes, 152u);
  const int32_t kept = buffer_named(p, "fsdp2_unsharded:norm_output");
  ASSERT_GE(kept, 0);
  EXPECT_EQ(p.steps[last_reader(p, kept)].phase, Phase::Backward);
  EXPECT_EQ(buffer_named(p, "fsdp2_unsharded:norm_output:backward"), -1);
}

}  // namespace
}  // namespace memplan
