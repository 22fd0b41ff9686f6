// FSDP2 (--shard fsdp2, fully_shard): per-parameter dim-0 shards, the all-gather and reduce-scatter buffers and
// their lifetimes, on small graphs and the tiny Llama; every expected number is worked out by hand in the comments
// from the rules in cost_models/training_fsdp2.cc (torch/distributed/fsdp/_fully_shard/).
#include <gtest/gtest.h>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "planner/liveness.h"
#include "tests/cost_models/fsdp2_graphs.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::int_attr;
using testing::fsdp2_odd_rows;
using testing::step_named;
using testing::bytes_of;


TrainingRun fsdp2(int gpus, Sharding s = Sharding::Fsdp2) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::CrossEntropy;
  o.gpus = gpus;
  o.shard = s;
  return o;
}

uint64_t live_at_fsdp2(const Program& p, const LiveBytes& live, const std::string& step, Category c) {
  const int32_t s = step_named(p, step);
  EXPECT_GE(s, 0) << step;
  return s < 0 ? 0 : live.per_step_by_category[s][static_cast<int>(c)];
}

// 4 GPUs, fp32. Each rank keeps ceil(dim0 / 4) rows of each parameter (torch.chunk's chunks[0], zero-padded):
//  layers.0.fc.w [5,6]: 2 rows x 6 = 12 elements = 48 B (all-gathered 4 x 48 = 192 B, of which 120 B are real);
//  layers.0.fc.b [6]: 2 elements = 8 B (gathered 32 B): unit layers.0 56 B, gathered 224 B;
//  layers.1.fc.w [6,5]: 2 rows x 5 = 10 elements = 40 B: unit layers.1 40 B, gathered 160 B;
//  head.w [2,5]: 1 row x 5 = 20 B; head.b [2]: 1 element = 4 B: root 24 B, gathered 96 B.
// Per GPU: parameters 56 + 40 + 24 = 120 B, grads the same (everything trains), Adam's two states 240 B.
// (FSDP1 pads the flat parameter instead: layers.0's 36 elements are 9 per rank, 36 B.)
TEST(Fsdp2, EachParameterKeepsCeilDim0OverNRows) {
  const TrainingResult r = build_training_program(fsdp2_odd_rows(), fsdp2(4));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 120u);
  EXPECT_EQ(r.grad_bytes, 120u);
  EXPECT_EQ(r.optimizer_state_bytes, 240u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.0"), 56u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.1"), 40u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:root"), 24u);
  // The all-gather output and the unsharded parameters copied out of it: 4 x the padded shards.
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_output:layers.0"), 224u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.0"), 224u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.1:backward"), 160u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:root"), 96u);
  // The reduce-scatter input: the grads padded on dim 0 to a multiple of 4 (4 x the padded shards); the output is
  // the grad shard.
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:layers.0"), 224u);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:root"), 96u);
  EXPECT_EQ(bytes_of(p, "fsdp2_grad_shard:layers.0"), 56u);
  EXPECT_EQ(bytes_of(p, "grad:layers.0.fc.w:view"), 120u);  // the unsharded grad autograd computes, 5 x 6 x 4
  const TrainingResult one = build_training_program(fsdp2_odd_rows(), fsdp2(4, Sharding::Fsdp));
  EXPECT_EQ(bytes_of(one.program, "fsdp_flat_param_shard:layers.0"), 36u);
}

// Gathered weights alive (the Weight category; the resident shards apart) at each step:
//  forward: the root's all-gather output 96 and its unsharded parameters 96 (kept: the root is not resharded);
//    layers.0's all-gather frees the root's output: at fsdp2_all_gather:layers.0 96 + 96 + 224 = 416; its copy-out
//    96 + 224 (output) + 224 (unsharded) = 544, also at /Add_1; layers.1's all-gather frees layers.0's output
//    (layers.0 resharded after /Relu_2): 96 + 224 + 160 = 480; at /MatMul_3 96 + 160 + 160 = 416; at /Gemm_5
//    the root 96 and layers.1's output 160, held until the root's post-forward: 256.
//  backward: the root's pre-backward prefetches layers.1 (160): at backward:/Gemm_5 96 + 160 = 256; layers.1's
//    pre-backward copies it out (96 + 160 + 160 = 416) then prefetches layers.0 (output freed: 96 + 160 + 224 =
//    480, also at backward:/Relu_4); at backward:/Relu_2 layers.1 is resharded and layers.0 copied out: 96 + 224.
TEST(Fsdp2, ForwardKeepsTheAllGatherOutputUntilTheNextGroup) {
  const Program p = build_training_program(fsdp2_odd_rows(), fsdp2(4)).program;
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  const Category w = Category::Weight;
  EXPECT_EQ(live_at_fsdp2(p, live, "fsdp2_all_gather:layers.0", w), 416u);
  EXPECT_EQ(live_at_fsdp2(p, live, "/Add_1", w), 544u);
  EXPECT_EQ(live_at_fsdp2(p, live, "fsdp2_all_gather:layers.1", w), 480u);
  EXPECT_EQ(live_at_fsdp2(p, live, "/MatMul_3", w), 416u);
  EXPECT_EQ(live_at_fsdp2(p, live, "/Gemm_5", w), 256u);
  EXPECT_EQ(live_at_fsdp2(p, live, "backward:/Gemm_5", w), 256u);
  EXPECT_EQ(live_at_fsdp2(p, live, "fsdp2_pre_backward:layers.1", w), 416u);
  EXPECT_EQ(live_at_fsdp2(p, live, "backward:/Relu_4", w), 480u);
  EXPECT_EQ(live_at_fsdp2(p, live, "backward:/Relu_2", w), 320u);
  // The grad shards stay to the optimizer step: 120 B.
  EXPECT_EQ(live_at_fsdp2(p, live, "optimizer:step", Category::Gradient), 120u);
  // layers.1's reduce-scatter input (160) is held until layers.0's post-backward, through layers.0's backward.
  const int32_t input = buffer_named(p, "fsdp2_reduce_scatter_input:layers.1");
  ASSERT_GE(input, 0);
  EXPECT_EQ(compute_liveness(p)[input].last, step_named(p, "fsdp2_post_backward:layers.0"));
}

// LoRA (rank 2 on fc) over the FSDP1 test's two 8x8 blocks, 3 GPUs, fp32:
//  layers.N: fc.w [8,8] frozen, 3 rows x 8 = 24 elements = 96 B; lora_A [2,8] 1 row x 8 = 32 B; lora_B [8,2]
//  3 rows x 2 = 24 B: shard 152 B, gathered 456 B. Root: head.w [2,8] frozen 1 row = 32 B, head.b [2] 1 element
//  = 4 B: 36 B. Parameters per GPU 2 x 152 + 36 = 340 B.
//  Grads only for the adapters: 2 x (32 + 24) = 112 B (FSDP1: the whole flat shard of each unit, 256 B);
//  Adam's states 2 x 112 = 224 B (FSDP1 512 B). No grad for the frozen base (FSDP1 computes its 256 B view grad),
//  and the reduce-scatter input is the adapters' padded grads, 3 x 56 = 168 B (FSDP1: the flat grad, 384 B).
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

TEST(Fsdp2, FrozenParametersGetNoGrad) {
  TrainingRun o = fsdp2(3);
  o.lora_rank = 2;
  o.lora_targets = "fc";
  const TrainingResult r = build_training_program(two_blocks(), o);
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 340u);
  EXPECT_EQ(r.grad_bytes, 112u);
  EXPECT_EQ(r.optimizer_state_bytes, 224u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.0"), 152u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.0"), 456u);
  EXPECT_EQ(buffer_named(p, "grad:layers.0.fc.w:view"), -1);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:layers.0"), 168u);
  EXPECT_EQ(buffer_named(p, "fsdp2_reduce_scatter_input:root"), -1);  // nothing in the root trains
  o.shard = Sharding::Fsdp;
  const TrainingResult one = build_training_program(two_blocks(), o);
  EXPECT_EQ(one.grad_bytes, 256u);
  EXPECT_EQ(one.optimizer_state_bytes, 512u);
  EXPECT_EQ(bytes_of(one.program, "grad:layers.0.fc.w:view"), 256u);
}

// The tiny Llama (tests/models/llama.py, CONFIGS["llama_tiny"]: hidden 128, ffn 352, kv 64, 4 layers, vocab 1000,
// untied head), batch 2, seq 64, fp32, 4 GPUs. Every dim 0 (128, 64, 352, 1000) divides by 4, so each rank keeps
// exactly a quarter under FSDP1 and FSDP2: per layer 184,576 elements / 4 = 46,144 = 184,576 B, the root
// (embed_tokens 128,000, norm 128, lm_head 128,000) 64,032 = 256,128 B; per GPU 4 x 184,576 + 256,128 = 994,432 B
// of parameters, as many of grads, twice that of Adam's states.
// What differs is the gathered weights at layers.1's copy-out: FSDP1 the root's flat parameter 1,024,512 B and
// layers.1's 738,304 B = 1,762,816 B; FSDP2 also layers.1's all-gather output, kept until the next group's
// all-gather: 1,024,512 + 2 x 738,304 = 2,501,120 B.
TEST(Fsdp2, TinyLlamaAgainstFsdp1) {
  Bindings b;
  b.batch = 2;
  b.dims["seq"] = 64;
  const Graph g = import_model(std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx", b);
  const TrainingResult two = build_training_program(g, fsdp2(4));
  const TrainingResult one = build_training_program(g, fsdp2(4, Sharding::Fsdp));
  for (const TrainingResult* r : {&two, &one}) {
    EXPECT_EQ(r->param_bytes, 994432u);
    EXPECT_EQ(r->grad_bytes, 994432u);
    EXPECT_EQ(r->optimizer_state_bytes, 2 * 994432u);
  }
  const LiveBytes live_two = compute_live_bytes(two.program, compute_liveness(two.program));
  const LiveBytes live_one = compute_live_bytes(one.program, compute_liveness(one.program));
  EXPECT_EQ(live_at_fsdp2(two.program, live_two, "fsdp_pre_forward:layers.1", Category::Weight), 2501120u);
  EXPECT_EQ(live_at_fsdp2(one.program, live_one, "fsdp_pre_forward:layers.1", Category::Weight), 1762816u);
}

}  // namespace
}  // namespace memplan
