// --checkpoint selective (torchtitan's per-op SAC) and selective:N (its layer-wise option) on a small two-block
// graph, every expected number worked out by hand below from torchtitan v0.2.2's policy
// (torchtitan/distributed/activation_checkpoint.py, _apply_op_sac / _apply_layer_sac; cost_models/selective_checkpoint.h).
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "cost_models/selective_checkpoint.h"
#include "onnx_import/import.h"
#include "planner/liveness.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::last_reader;
using testing::step_named;

// Two blocks layers.0 and layers.1 (parameters layers.<N>.fc<K>.weight, nodes named under /layers.<N>/ as
// torch.onnx names them), float32, each:
//   a = x @ fc1 [4,8]x[8,16] -> [4,16] 256 B   (mm 1 of the block: saved)
//   r1 = Relu(a)             [4,16]    256 B
//   c = r1 @ fc2 [16,16]  -> [4,16]    256 B   (mm 2: recomputed)
//   r2 = Relu(c)             [4,16]    256 B
//   e = r2 @ fc3 [16,8]   -> [4,8]     128 B   (mm 3: saved)
//   h = Relu(e)              [4,8]     128 B   (the block's output, read by the next block)
// x [4,8] is the graph input, h of layers.1 its output (the output seeds backward: no loss).
// With `residual`, each block ends h = e + h_in (an Add keeping nothing for backward, as a decoder layer's) instead
// of h = Relu(e).
Graph sac_blocks(bool residual = false) {
  GraphBuilder b;
  int32_t h = b.input("x", {4, 8});
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "layers." + std::to_string(layer);
    const std::string s = std::to_string(layer);
    const int32_t a = b.node1("MatMul", {h, b.weight(p + ".fc1.weight", {8, 16})}, "a" + s, {4, 16});
    const int32_t r1 = b.node1("Relu", {a}, "r1_" + s, {4, 16});
    const int32_t c = b.node1("MatMul", {r1, b.weight(p + ".fc2.weight", {16, 16})}, "c" + s, {4, 16});
    const int32_t r2 = b.node1("Relu", {c}, "r2_" + s, {4, 16});
    const int32_t e = b.node1("MatMul", {r2, b.weight(p + ".fc3.weight", {16, 8})}, "e" + s, {4, 8});
    h = residual ? b.node1("Add", {e, h}, "h" + s, {4, 8}) : b.node1("Relu", {e}, "h" + s, {4, 8});
  }
  b.output(b.node1("MatMul", {h, b.weight("head.weight", {8, 2})}, "y", {4, 2}));
  Graph g = b.graph();
  const char* scopes[] = {"fc1/MatMul", "act1/Relu", "fc2/MatMul", "act2/Relu", "fc3/MatMul",
                          residual ? "Add" : "act3/Relu"};
  for (size_t i = 0; i < 12; ++i) g.nodes[i].name = "/layers." + std::to_string(i / 6) + "/" + scopes[i % 6];
  g.nodes[12].name = "/head/MatMul";
  return g;
}

TrainingRun mode(CheckpointMode m, int every = 0) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.checkpoint.mode = m;
  o.checkpoint.every = every;
  return o;
}

// Activation bytes live at the last forward step (layers.1's act3: it reads e1 and writes h1), i.e. what the
// forward leaves for backward plus e1 and h1 (128 + 128). The graph input x (128 B) is an activation buffer too, and
// is kept in every mode: layers.0's fc1 saves it, or the checkpoint keeps it as layers.0's input.
uint64_t activations_at_end_of_forward(const Program& p) {
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  const int32_t s = step_named(p, "/layers.1/act3/Relu");
  EXPECT_GE(s, 0);
  return s < 0 ? 0 : live.per_step_by_category[s][static_cast<int>(Category::Activation)];
}

// none: MatMul saves its input, Relu its output (derivatives.yaml): x 128, then per block r1 256 + r2 256 + h 128
// (h0 is also layers.1's fc1 input); the mm outputs die at their Relu.
//   128 + (256 + 256 + 128) + (256 + 256) + e1 128 + h1 128 = 1536.
// selective (per op): each block is checkpointed; the policy caches mm 1 (a, 256) and mm 3 (e, 128); mm 2 (c) is the
// second mm of its block (forward_mm_count 2, even) and is recomputed; Relu is not in the save list; the checkpoint
// keeps the block's input.  x 128 + a0 256 + e0 128 + h0 128 + a1 256 + e1 128 + h1 128 = 1152.
// selective:2: torchtitan's counter checkpoints the 2nd block only ((b + 1) % 2 == 0 for b = 1): layers.0 runs
// normally, layers.1 keeps nothing but its input.  x 128 + r1_0 256 + r2_0 256 + h0 128 + e1 128 + h1 128 = 1024.
// layers: both blocks whole.  x 128 + h0 128 + e1 128 + h1 128 = 512.
TEST(SelectiveCheckpoint, WhatTheForwardKeepsForBackward) {
  const Graph g = sac_blocks();
  EXPECT_EQ(activations_at_end_of_forward(build_training_program(g, mode(CheckpointMode::None)).program), 1536u);
  EXPECT_EQ(activations_at_end_of_forward(build_training_program(g, mode(CheckpointMode::SelectiveOp)).program), 1152u);
  EXPECT_EQ(activations_at_end_of_forward(build_training_program(g, mode(CheckpointMode::SelectiveLayers, 2)).program),
            1024u);
  EXPECT_EQ(activations_at_end_of_forward(build_training_program(g, mode(CheckpointMode::Layers)).program), 512u);
  // selective:1 checkpoints every block whole, as layers does, but non-reentrant: the same forward.
  EXPECT_EQ(activations_at_end_of_forward(build_training_program(g, mode(CheckpointMode::SelectiveLayers, 1)).program),
            512u);
}

// The cached outputs live into backward and are not recomputed; the second mm is recomputed.
TEST(SelectiveCheckpoint, CachedOutputsAreReadByTheRecomputationNotRerun) {
  const TrainingResult r = build_training_program(sac_blocks(), mode(CheckpointMode::SelectiveOp));
  const Program& p = r.program;
  for (const char* t : {"a0", "e0", "a1", "e1"}) {
    const int32_t b = buffer_named(p, t);
    ASSERT_GE(b, 0) << t;
    EXPECT_EQ(p.steps[last_reader(p, b)].phase, Phase::Backward) << t;
  }
  // c0's forward copy dies at act2 (its only reader in forward).
  EXPECT_EQ(last_reader(p, buffer_named(p, "c0")), step_named(p, "/layers.0/act2/Relu"));
  EXPECT_GE(step_named(p, "recompute:/layers.0/fc2/MatMul"), 0);
  EXPECT_GE(step_named(p, "recompute:cached:/layers.0/fc1/MatMul"), 0);
  EXPECT_EQ(step_named(p, "recompute:/layers.0/fc1/MatMul"), -1);
  EXPECT_EQ(step_named(p, "recompute:/layers.1/fc3/MatMul"), -1);
  // Recomputed FLOPs: layers recomputes every op; selective skips mm 1 and mm 3 of both blocks,
  // 2 x (2*4*8*16 + 2*4*16*8) = 2 x 2048 = 4096 FLOPs fewer.
  const TrainingResult whole = build_training_program(sac_blocks(), mode(CheckpointMode::Layers));
  EXPECT_EQ(whole.recompute_flops - r.recompute_flops, 4096u);
}

// The counter restarts in each block (a new meta per context_fn call): with 3 mms a block, mm 1 and 3 are saved
// in each block, not mm 1, 3 of block 0 and mm 2 of block 1 (which a count over the whole model would give).
TEST(SelectiveCheckpoint, MmCounterIsPerBlock) {
  const TrainingResult r = build_training_program(sac_blocks(), mode(CheckpointMode::SelectiveOp));
  EXPECT_GE(step_named(r.program, "recompute:cached:/layers.1/fc1/MatMul"), 0);
  EXPECT_GE(step_named(r.program, "recompute:/layers.1/fc2/MatMul"), 0);
  EXPECT_GE(step_named(r.program, "recompute:cached:/layers.1/fc3/MatMul"), 0);
}

// sac_blocks(/*residual=*/true): each block closed by a residual sum, h = e + h_in, which keeps nothing for backward.
// The last op of the block to pack is then fc3 (mm 3, cached), which packs its input r2 and its weight only; Relu
// and MatMul pack before the kernel runs. Under torch >= 2.1 (early stop) the recomputation of a block is
// fc1 (cached: no FLOPs), act1, fc2, act2, then stops inside fc3 having packed r2: e is never popped from the
// policy's storage, which the checkpoint's frame keeps until the block's saved tensors are all unpacked, the
// block's backward end; the Add is not recomputed. Under torch 1.13 (no early stop; the mechanism alone, selective
// itself needing torch 2) the recomputation pops e at fc3 and runs the Add, whose recomputed sum nothing keeps.
TEST(SelectiveCheckpoint, EarlyStopLeavesTheLastCachedOutputToTheBlocksEnd) {
  TrainingRun o = mode(CheckpointMode::SelectiveOp);
  const Program p = build_training_program(sac_blocks(/*residual=*/true), o).program;
  for (const char* layer : {"0", "1"}) {
    const std::string l = layer;
    EXPECT_GE(step_named(p, "recompute:cached:/layers." + l + "/fc1/MatMul"), 0) << l;
    EXPECT_GE(step_named(p, "recompute:/layers." + l + "/fc2/MatMul"), 0) << l;
    EXPECT_GE(step_named(p, "recompute:early_stop:/layers." + l + "/fc3/MatMul"), 0) << l;
    EXPECT_EQ(step_named(p, "recompute:cached:/layers." + l + "/fc3/MatMul"), -1) << l;
    EXPECT_EQ(step_named(p, "recompute:/layers." + l + "/Add"), -1) << l;
    // e (128 B, cached in forward) is last read at the block's checkpoint end, after fc1's backward (the block's
    // first op), not by the recomputation.
    const int32_t e = buffer_named(p, "e" + l);
    ASSERT_GE(e, 0) << l;
    EXPECT_EQ(last_reader(p, e), step_named(p, "checkpoint_end:/layers." + l + "/fc1/MatMul")) << l;
    EXPECT_EQ(p.buffers[e].bytes, 128u) << l;
  }
  o.checkpoint.early_stop = false;
  const Program whole = build_training_program(sac_blocks(/*residual=*/true), o).program;
  for (const char* layer : {"0", "1"}) {
    const std::string l = layer;
    EXPECT_GE(step_named(whole, "recompute:cached:/layers." + l + "/fc3/MatMul"), 0) << l;
    const int32_t add = step_named(whole, "recompute:/layers." + l + "/Add");
    ASSERT_GE(add, 0) << l;
    EXPECT_EQ(last_reader(whole, buffer_named(whole, "e" + l)), add) << l;  // popped, summed, dropped
  }
}

TEST(SelectiveCheckpoint, LayerCounterCheckpointsEveryNthBlock) {
  // _apply_layer_sac: _layer_sac_count is incremented first, so block b (0-based) is wrapped when (b + 1) % N == 0.
  EXPECT_FALSE(layer_sac_checkpoints(0, 2));
  EXPECT_TRUE(layer_sac_checkpoints(1, 2));
  EXPECT_FALSE(layer_sac_checkpoints(3, 3));
  EXPECT_TRUE(layer_sac_checkpoints(5, 3));
  EXPECT_TRUE(layer_sac_checkpoints(0, 1));
  // selective:2 on two blocks: only layers.1 recomputes.
  const Program p = build_training_program(sac_blocks(), mode(CheckpointMode::SelectiveLayers, 2)).program;
  EXPECT_EQ(step_named(p, "recompute:/layers.0/fc1/MatMul"), -1);
  EXPECT_GE(step_named(p, "recompute:/layers.1/fc1/MatMul"), 0);
}

// The bundled tiny Llama (tests/models/llama.py, CONFIGS["llama_tiny"]: 4 layers, transformers' LlamaDecoderLayer),
// batch 2, seq 64, --attention sdpa. In each decoder layer the mms run in the order of transformers' modules
// (modeling_llama.py: LlamaAttention.forward calls q_proj, k_proj, v_proj, then o_proj; LlamaMLP.forward is
// down_proj(act_fn(gate_proj(x)) * up_proj(x))): q 1, k 2, v 3, o 4, gate 5, up 6, down 7. torchtitan's counter
// saves the odd ones: q, v, gate, down; and the SDPA op (with its logsumexp).
Graph llama_tiny(int64_t seq = 64) {
  Bindings b;
  b.batch = 2;
  b.dims["seq"] = seq;
  return import_model(std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx", b);
}

TEST(SelectiveCheckpoint, TinyLlamaSavesTheOddMmsAndAttention) {
  TrainingRun o = mode(CheckpointMode::SelectiveOp);
  o.attention = AttentionImpl::Sdpa;
  const Program p = build_training_program(llama_tiny(), o).program;
  std::vector<std::string> cached, recomputed_mms;
  for (const Step& s : p.steps) {
    if (s.name.rfind("recompute:cached:/layers.1/", 0) == 0) cached.push_back(s.name.substr(27));
    if (s.name.rfind("recompute:/layers.1/", 0) == 0 && s.op == "linear") recomputed_mms.push_back(s.name.substr(20));
  }
  // down_proj (mm 7, cached) is the layer's last op to pack and packs its inputs alone: the early stop (torch >= 2.1,
  // the default here) ends the recomputation inside it, before its cache is popped; the residual sum after it is
  // not recomputed, and its cached output stays in the policy's storage to the layer's backward end.
  ASSERT_EQ(cached.size(), 4u);
  EXPECT_NE(cached[0].find("q_proj"), std::string::npos) << cached[0];
  EXPECT_NE(cached[1].find("v_proj"), std::string::npos) << cached[1];
  EXPECT_NE(cached[2].find("self_attn"), std::string::npos) << cached[2];  // the fused attention
  EXPECT_NE(cached[3].find("gate_proj"), std::string::npos) << cached[3];
  EXPECT_GE(step_named(p, "recompute:early_stop:/layers.1/mlp/down_proj/MatMul"), 0);
  EXPECT_EQ(step_named(p, "recompute:/layers.1/Add_1"), -1);
  const int32_t down = buffer_named(p, "/layers.1/mlp/down_proj/MatMul_output_0");
  ASSERT_GE(down, 0);
  EXPECT_EQ(p.steps[last_reader(p, down)].name.rfind("checkpoint_end:/layers.1/", 0), 0u)
      << p.steps[last_reader(p, down)].name;
  ASSERT_EQ(recomputed_mms.size(), 3u);
  EXPECT_NE(recomputed_mms[0].find("k_proj"), std::string::npos) << recomputed_mms[0];
  EXPECT_NE(recomputed_mms[1].find("o_proj"), std::string::npos) << recomputed_mms[1];
  EXPECT_NE(recomputed_mms[2].find("up_proj"), std::string::npos) << recomputed_mms[2];
}

// Between none and layers: selective keeps more than layers (the cached outputs) and less than none (none keeps
// every op's saved tensors, of which the cached outputs are a part); selective:2 checkpoints 2 of the 4 layers.
// At seq 256 the step's peak is in backward, where the activations count (at seq 64 it is the optimizer step's,
// the same in every mode).
TEST(SelectiveCheckpoint, TinyLlamaLiesBetweenNoneAndLayers) {
  const Graph g = llama_tiny(256);
  auto peak = [&](CheckpointMode m, int every = 0) {
    return testing::peak_live_bytes(build_training_program(g, mode(m, every)).program).bytes;
  };
  const uint64_t none = peak(CheckpointMode::None), layers = peak(CheckpointMode::Layers);
  const uint64_t op = peak(CheckpointMode::SelectiveOp), two = peak(CheckpointMode::SelectiveLayers, 2);
  EXPECT_LT(layers, op);
  EXPECT_LT(op, none);
  EXPECT_LT(layers, two);
  EXPECT_LT(two, none);
}

}  // namespace
}  // namespace memplan
