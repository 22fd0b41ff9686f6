// The tensor-parallel split (cost_models/tensor_parallel.h) on the zoo's exports, against Megatron-LM's layers
// (megatron/core/tensor_parallel/layers.py): ColumnParallelLinear splits the weight's output features (axis 0 of
// nn.Linear's [out, in] weight), RowParallelLinear its input features (axis 1), VocabParallelEmbedding the rows;
// norms, position tables and row-parallel biases stay whole.
#include <gtest/gtest.h>

#include <string>

#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "cost_models/tensor_parallel.h"
#include "onnx_import/errors.h"
#include "onnx_import/import.h"

namespace memplan {
namespace {

using testing::zoo_graph;

int axis(const Graph& g, const TensorParallelPlan& p, const std::string& name) {
  const auto t = g.find_tensor(name);
  EXPECT_TRUE(t.has_value()) << name;
  return t ? p.axis[*t] : -2;
}

TEST(TensorParallel, LlamaIsSplitAsMegatronSplitsIt) {
  const Graph g = zoo_graph("llama_tiny_train", 2, 16);
  const TensorParallelPlan p = plan_tensor_parallel(g, 2, false);
  for (const char* column : {"q_proj", "k_proj", "v_proj"})
    EXPECT_EQ(axis(g, p, std::string("layers.1.self_attn.") + column + ".weight"), 0) << column;
  EXPECT_EQ(axis(g, p, "layers.1.self_attn.o_proj.weight"), 1);
  EXPECT_EQ(axis(g, p, "layers.1.mlp.gate_proj.weight"), 0);
  EXPECT_EQ(axis(g, p, "layers.1.mlp.up_proj.weight"), 0);
  EXPECT_EQ(axis(g, p, "layers.1.mlp.down_proj.weight"), 1);
  EXPECT_EQ(axis(g, p, "layers.1.input_layernorm.weight"), -1);
  EXPECT_EQ(axis(g, p, "embed_tokens.weight"), 0);
  EXPECT_EQ(axis(g, p, "lm_head.weight"), 0);
  EXPECT_EQ(axis(g, p, "logits"), 2);  // vocab-parallel cross entropy: the logits stay split
  // Per layer q, k, v, gate, up column-parallel and o, down row-parallel; plus the head.
  EXPECT_EQ(p.column_parallel, 4 * 5 + 1);
  EXPECT_EQ(p.row_parallel, 4 * 2);
  EXPECT_EQ(p.vocab_parallel, 1);
  // The residual stream: whole without sequence parallelism, split along the sequence (axis 1 of [b, s, h]) with.
  EXPECT_EQ(axis(g, p, "/layers.0/Add_output_0"), -1);
  const TensorParallelPlan sp = plan_tensor_parallel(g, 2, true);
  EXPECT_EQ(axis(g, sp, "/layers.0/Add_output_0"), 1);
  EXPECT_EQ(axis(g, sp, "/embed_tokens/Gather_output_0"), 1);
  int gathers = 0;
  for (int32_t x : sp.gathered_input) gathers += x >= 0;
  EXPECT_EQ(gathers, p.column_parallel);  // every column-parallel layer all-gathers its sequence-split input
}

// Sequence parallelism: each column-parallel layer all-gathers its sequence-split input into a full-size buffer
// in forward, and again in backward together with the full-size input grad it then reduce-scatters
// (Megatron's LinearWithGradAccumulationAndAsyncCommunication); what autograd keeps is the shard.
TEST(TensorParallel, SequenceParallelGathersAreFullSizeTransients) {
  const Graph g = zoo_graph("llama_tiny_train", 2, 16);
  TrainingRun o;
  o.loss = LossKind::CrossEntropy;
  o.tp = 2;
  o.sequence_parallel = true;
  const TrainingResult r = build_training_program(g, o);
  const uint64_t full = 2ull * 16 * 128 * 4;  // [batch, seq, hidden] float32, whole
  int gathers = 0, input_grads = 0;
  for (const Buffer& b : r.program.buffers) {
    const bool gather = b.name.size() > 11 && b.name.compare(b.name.size() - 11, 11, ":all_gather") == 0;
    const bool grad = b.name.rfind("grad:", 0) == 0 && b.name.size() > 5 && b.name.compare(b.name.size() - 5, 5, ":full") == 0;
    if (gather || grad) {
      EXPECT_EQ(b.bytes, full) << b.name;
    }
    gathers += gather;
    input_grads += grad;
  }
  EXPECT_EQ(gathers, 2 * (4 * 5 + 1));  // forward and backward, 21 column-parallel layers
  EXPECT_EQ(input_grads, 4 * 5 + 1);
  // The sequence-split residual stream holds half of [2, 16, 128] float32 on each GPU.
  for (const Buffer& b : r.program.buffers) {
    if (b.name == "/layers.0/Add_output_0") {
      EXPECT_EQ(b.bytes, full / 2);
    }
  }
}

TEST(TensorParallel, GptFusedQkvIsAColumnSplit) {
  const Graph g = zoo_graph("gpt_train", 1, 32);
  const TensorParallelPlan p = plan_tensor_parallel(g, 4, false);
  EXPECT_EQ(axis(g, p, "blocks.0.attn.qkv.weight"), 0);
  EXPECT_EQ(axis(g, p, "blocks.0.attn.qkv.bias"), 0);
  EXPECT_EQ(axis(g, p, "blocks.0.attn.proj.weight"), 1);
  EXPECT_EQ(axis(g, p, "blocks.0.attn.proj.bias"), -1);  // RowParallelLinear adds it after the all-reduce
  EXPECT_EQ(axis(g, p, "blocks.0.mlp.fc.weight"), 0);
  EXPECT_EQ(axis(g, p, "blocks.0.mlp.proj.weight"), 1);
  EXPECT_EQ(axis(g, p, "blocks.0.ln_1.weight"), -1);
  EXPECT_EQ(axis(g, p, "wpe.weight"), -1);  // position table: indices are not a graph input
  EXPECT_EQ(axis(g, p, "wte.weight"), 0);
  // q, k and v after the split of the fused output each keep the split (3 heads of 12 per GPU).
  EXPECT_EQ(axis(g, p, "/blocks.0/attn/Split_output_0"), 2);
  EXPECT_EQ(axis(g, p, "/blocks.0/attn/Softmax_output_0"), 1);
  // 50257 rows over 4 GPUs: rank 0 holds ceil(50257 / 4) = 12565.
  const int32_t wte = *g.find_tensor("wte.weight");
  EXPECT_EQ(p.local_bytes(g, wte, 50257ull * 768 * 4), 12565ull * 768 * 4);
}

TEST(TensorParallel, HeadsNotDivisibleIsAnInputErrorNamingTheNode) {
  const Graph g = zoo_graph("gpt_train", 1, 32);
  try {
    plan_tensor_parallel(g, 8, false);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 8 does not divide the 12 attention heads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at node '/blocks.0/attn/Reshape'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memplan
