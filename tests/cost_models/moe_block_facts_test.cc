// find_moe_blocks (cost_models/engine_kernels.h) reads a sparse block's facts from the stacked form of its experts too:
// transformers 5's grouped experts (--experts-implementation grouped_mm, onnx_import/hf_moe_grouped.h), whose two
// stacked weights per layer, gate_up_proj [E, 2I, H] (folded by the decode graph's constant folding into its
// transposed copy [E, H, 2I]; gpt_oss's stored [E, H, 2I]) and down_proj [E, H, I] ([E, I, H]), are what vLLM's
// FusedMoE allocates as w13_weight [E, 2·I_p, H] and w2_weight [E, H, I_p] (UnquantizedFusedMoEMethod.create_weights,
// cost_models/vllm_fused_moe.h). Its argsorts (TopK largest=0) are inside the block, not another router. The facts the
// engines read (E, k, I, H, the tokens, the projections) must be the per-expert loop's; the weights are hand-counted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cost_models/engine_kernels.h"
#include "cost_models/tensor_parallel.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/errors.h"
#include "onnx_import/import.h"
#include "onnx_import/model_reader.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

const std::string kCorpus = std::string(MEMPLAN_ZOO_DIR) + "/../../fuzz/corpus/hf_config/";

// `path`'s decode graph (one sequence of 8 new tokens after 4 cached: N = 8 tokens a block) with its experts as
// `experts` runs them, read for serve (vllm_serve: gpt_oss's windowed decoder is built only there).
Graph decode(const std::string& path, const std::string& experts) {
  const ReadModel read = read_config_model(path, "decode", "", /*vllm_serve=*/true, experts);
  Bindings b;
  b.graph = "decode", b.experts = experts;
  b.dims = {{"batch_size", 1}, {"sequence_length", 8}, {"past_sequence_length", 4}, {"total_sequence_length", 12}};
  return import_model(read, path, b);
}

uint64_t elements(const Graph& g, const std::vector<std::string>& names) {
  uint64_t n = 0;
  for (const std::string& name : names) {
    const std::optional<int32_t> t = g.find_tensor(name);
    EXPECT_TRUE(t.has_value()) << name;
    if (!t) continue;
    n += g.tensors[*t].elements();
  }
  return n;
}

struct Expected {
  size_t blocks;
  int64_t experts, top_k, intermediate, hidden;
  int linears;                           // the loop's projections a block: 3 an expert (gpt_oss: 2)
  std::vector<int64_t> gate_up, down;    // the stacked weights' shapes as the decode graph holds them
};

void check(const std::string& path, const Expected& x) {
  const Graph loop = decode(path, "eager"), stacked = decode(path, "grouped_mm");
  const std::vector<MoeBlock> a = find_moe_blocks(loop), b = find_moe_blocks(stacked);
  ASSERT_EQ(a.size(), x.blocks);
  ASSERT_EQ(b.size(), x.blocks);
  // Every expert's weights: E x 3 x H x I elements a block, whichever form holds them.
  const uint64_t per_block = static_cast<uint64_t>(x.experts * 3 * x.hidden * x.intermediate);
  for (size_t i = 0; i < x.blocks; ++i) {
    for (const MoeBlock* m : {&a[i], &b[i]}) {
      EXPECT_EQ(m->tokens, 8);
      EXPECT_EQ(m->experts, x.experts);
      EXPECT_EQ(m->top_k, x.top_k);
      EXPECT_EQ(m->hidden, x.hidden);
      EXPECT_EQ(m->expert_intermediate, x.intermediate);
      EXPECT_EQ(m->expert_linears, x.linears);
      EXPECT_FALSE(m->result.empty());
    }
    EXPECT_EQ(a[i].weights.size(), static_cast<size_t>(x.linears));  // one a MatMul
    EXPECT_EQ(elements(loop, a[i].weights), per_block);
    ASSERT_EQ(b[i].weights.size(), 2u);  // gate_up_proj, down_proj
    EXPECT_EQ(stacked.tensors[*stacked.find_tensor(b[i].weights[0])].shape, x.gate_up);
    EXPECT_EQ(stacked.tensors[*stacked.find_tensor(b[i].weights[1])].shape, x.down);
    EXPECT_EQ(elements(stacked, b[i].weights), per_block);
  }
}

// tiny_qwen3_moe: sparse layers 1 and 3 (decoder_sparse_step 2), E 4, top-1, I 48, H 64: 12 projections a block;
// 4 x 3 x 64 x 48 = 36,864 elements, gate_up [4, 64, 96] (24,576) and down [4, 48, 64] (12,288).
TEST(MoeBlockFacts, Qwen3MoeStackedAsTheLoop) {
  check(kCorpus + "tiny_qwen3_moe.json", {2, 4, 1, 48, 64, 12, {4, 64, 96}, {4, 48, 64}});
}

// tiny_mixtral: both layers sparse, E 4, top-2, I 96 (intermediate_size), H 64: 4 x 3 x 64 x 96 = 73,728.
TEST(MoeBlockFacts, MixtralStackedAsTheLoop) {
  check(kCorpus + "tiny_mixtral.json", {2, 4, 2, 96, 64, 12, {4, 64, 192}, {4, 96, 64}});
}

// tiny_qwen2_moe: layers 0 and 2 sparse (mlp_only_layers [1]), E 6, top-3, I 32, H 64 (the shared expert is no
// routed expert's): 6 x 3 x 64 x 32 = 36,864.
TEST(MoeBlockFacts, Qwen2MoeStackedAsTheLoop) {
  check(kCorpus + "tiny_qwen2_moe.json", {2, 6, 3, 32, 64, 18, {6, 64, 64}, {6, 32, 64}});
}

// tiny_deepseek_v3: both layers sparse (first_k_dense_replace 0), n_routed_experts 6, top-3, I 16, H 48:
// 6 x 3 x 48 x 16 = 13,824 (its shared experts outside the block).
TEST(MoeBlockFacts, DeepseekV3StackedAsTheLoop) {
  check(kCorpus + "tiny_deepseek_v3.json", {2, 6, 3, 16, 48, 18, {6, 48, 32}, {6, 16, 48}});
}

// grouped_mm_models_test's tiny gpt_oss config (E 4, top-2, I 8, H 16), written to `path`.
void write_tiny_gpt_oss(const std::string& path) {
  std::ofstream(path) << R"({"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 16,
      "intermediate_size": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "vocab_size": 64,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 150000.0, "tie_word_embeddings": false,
      "torch_dtype": "float32", "hidden_act": "silu", "attention_bias": true, "num_local_experts": 4,
      "num_experts_per_tok": 2, "experts_per_token": 2, "sliding_window": 8,
      "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0})";
}

// gpt_oss (grouped_mm_models_test's tiny config): E 4, top-2, I 8, H 16, two projections an expert (gate_up_proj
// holds gate and up interleaved: no chunk), so the width is its output halved as in the loop; GptOssExperts stores
// its matrices [in, out]: gate_up [4, 16, 16], down [4, 8, 16]; 4 x 3 x 16 x 8 = 1,536 elements.
TEST(MoeBlockFacts, GptOssStackedAsTheLoop) {
  const std::filesystem::path dir = testing::process_temp_dir("memplan_moe_block_facts");
  const std::string path = (dir / "config.json").string();
  write_tiny_gpt_oss(path);
  check(path, {2, 4, 2, 8, 16, 8, {4, 16, 16}, {4, 8, 16}});
  std::filesystem::remove_all(dir);
}

// The elements rank 0 holds of `names` under `plan`.
uint64_t local_elements(const Graph& g, const TensorParallelPlan& plan, const std::vector<std::string>& names) {
  uint64_t n = 0;
  for (const std::string& name : names) {
    const int32_t t = *g.find_tensor(name);
    n += plan.local_bytes(g, t, g.tensors[t].elements());
  }
  return n;
}

// --tp 2 over the stacked experts as vLLM's FusedMoE splits them (I_p = I / 2 a rank): gate_up by every expert's
// output features, down by its inputs, the per-expert loop's layer counts. tiny_qwen3_moe: gate_up [4, 64, 96] ->
// [4, 64, 48], 12,288 elements; down [4, 48, 64] -> [4, 24, 64], 6,144; 18,432 a block = 36,864 / 2, the loop's.
// Both graphs split the same attention and dense layers, so the counts agree in all: the loop's 2 sparse blocks x 4
// experts x (2 column + 1 row).
TEST(MoeBlockFacts, TensorParallelSplitsTheStackedExpertsAsFusedMoE) {
  for (const char* name : {"tiny_qwen3_moe", "tiny_mixtral", "tiny_qwen2_moe"}) {
    SCOPED_TRACE(name);
    const Graph loop = decode(kCorpus + name + ".json", "eager"), stacked = decode(kCorpus + name + ".json", "grouped_mm");
    const TensorParallelPlan a = plan_tensor_parallel(loop, 2, false, true), b = plan_tensor_parallel(stacked, 2, false, true);
    EXPECT_EQ(a.column_parallel, b.column_parallel);
    EXPECT_EQ(a.row_parallel, b.row_parallel);
    const std::vector<MoeBlock> la = find_moe_blocks(loop), sb = find_moe_blocks(stacked);
    ASSERT_EQ(la.size(), sb.size());
    for (size_t i = 0; i < la.size(); ++i) {
      const uint64_t whole = elements(stacked, sb[i].weights);
      EXPECT_EQ(local_elements(stacked, b, sb[i].weights), whole / 2);
      EXPECT_EQ(local_elements(loop, a, la[i].weights), whole / 2);
    }
  }
  const Graph g = decode(kCorpus + "tiny_qwen3_moe.json", "grouped_mm");
  const TensorParallelPlan p = plan_tensor_parallel(g, 2, false, true);
  const MoeBlock first = find_moe_blocks(g).front();
  EXPECT_EQ(local_elements(g, p, {first.weights[0]}), 4u * 64 * 48);
  EXPECT_EQ(local_elements(g, p, {first.weights[1]}), 4u * 24 * 64);
}

// gpt_oss's stacked gate_up_proj_bias [E, 2I] is split with gate_up's columns (vLLM's w13_bias [E, 2·I_p]), its
// down_proj_bias [E, H] not: at --tp 2, E 4, I 8, H 16: 4 x 8 + 4 x 16 = 96 bias elements on rank 0.
TEST(MoeBlockFacts, TensorParallelSplitsGptOssStackedBiasWithItsColumns) {
  const std::filesystem::path dir = testing::process_temp_dir("memplan_moe_block_bias");
  const std::string path = (dir / "config.json").string();
  write_tiny_gpt_oss(path);
  const Graph g = decode(path, "grouped_mm");
  const TensorParallelPlan p = plan_tensor_parallel(g, 2, false, true);
  EXPECT_EQ(local_elements(g, p, {"layers.0.mlp.experts.gate_up_proj_bias", "layers.0.mlp.experts.down_proj_bias"}),
            96u);
  std::filesystem::remove_all(dir);
}

// --tp 8 on experts 20 wide: 2I = 40 splits over 8 GPUs, each expert's gate and up (20) do not; the stacked weight
// is refused as the loop's first expert is, by its name.
TEST(MoeBlockFacts, TensorParallelRefusesAWidthTpDoesNotDivide) {
  const std::filesystem::path dir = testing::process_temp_dir("memplan_moe_block_refusal");
  const std::string path = (dir / "config.json").string();
  std::ofstream(path) << R"({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 8, "vocab_size": 100,
      "rms_norm_eps": 1e-06, "max_position_embeddings": 128, "rope_theta": 1000000.0, "num_experts": 4,
      "num_experts_per_tok": 1, "moe_intermediate_size": 20, "norm_topk_prob": true, "decoder_sparse_step": 1,
      "mlp_only_layers": [], "attention_bias": false})";
  const Graph loop = decode(path, "eager"), stacked = decode(path, "grouped_mm");
  try {
    plan_tensor_parallel(stacked, 8, false, true);
    ADD_FAILURE() << "no refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 8 does not divide the 20 output features of each expert's gate and up "
                                         "in the stacked column-parallel weight"),
              std::string::npos)
        << e.what();
  }
  try {
    plan_tensor_parallel(loop, 8, false, true);
    ADD_FAILURE() << "no refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 8 does not divide the 20 output features of the column-parallel weight"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace memplan
