// ServeProbe (report/serve_probe.h): the profile steps serve --engine vllm asks for once per GPU of the catalog are
// shaped once, and the kernels' sites in them found once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cost_models/engine_kernels.h"
#include "report/serve_probe.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

// fuzz/corpus/hf_config/tiny_qwen3_moe.json: 4 layers, decoder_sparse_step 2 (transformers' Qwen3MoeDecoderLayer:
// sparse where (layer + 1) % 2 == 0, layers 1 and 3), 4 experts, top-1, moe_intermediate_size 48.
constexpr const char* kTinyQwen3Moe = R"({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 100,
 "rms_norm_eps": 1e-06, "max_position_embeddings": 128, "rope_theta": 1000000.0, "num_experts": 4,
 "num_experts_per_tok": 1, "moe_intermediate_size": 48, "norm_topk_prob": true, "decoder_sparse_step": 2,
 "mlp_only_layers": [], "attention_bias": false})";

TEST(ServeProbe, KeepsItsProfileStepsAndFindsTheirKernelSitesOnce) {
  const std::filesystem::path dir = testing::process_temp_dir("memplan_serve_probe_test");
  const std::string path = (dir / "config.json").string();
  std::ofstream(path) << kTinyQwen3Moe;
  ServeSettings s;
  s.engine = "vllm";
  s.context = 64;
  s.max_batched_tokens = 64;
  Bindings b;
  b.graph = "decode";
  ServeProbe probe(path, b, s, EstimateOptions{});
  const Graph* first = probe.shape_step(1, 0, 64).get();  // let go at once, as serve_vllm lets go of each GPU's
  const std::shared_ptr<const Graph> again = probe.shape_step(1, 0, 64);
  EXPECT_EQ(again.get(), first);  // kept, not shaped again: held by the probe and by `again`
  EXPECT_EQ(again.use_count(), 2);
  EXPECT_NE(probe.shape_step(1, 0, 32).get(), first);  // another step is another graph

  const EngineKernelSites& sites = probe.kernel_sites(again);
  EXPECT_EQ(&probe.kernel_sites(again), &sites);  // found once
  // Two sparse blocks of 4 experts, top-1, 48 wide, 3 projections an expert; 4 attention blocks; the head.
  ASSERT_EQ(sites.moe.size(), 2u);
  for (const MoeBlock& m : sites.moe) {
    EXPECT_EQ(m.experts, 4);
    EXPECT_EQ(m.top_k, 1);
    EXPECT_EQ(m.expert_intermediate, 48);
    EXPECT_EQ(m.expert_linears, 12);
    EXPECT_EQ(m.tokens, 64);
  }
  EXPECT_EQ(sites.attention_steps.size(), 4u);
  ASSERT_TRUE(sites.head.has_value());
  EXPECT_EQ(sites.head->vocab, 100);
  // What the separate finders answer on the same graph.
  std::vector<std::string> presents;
  for (const auto& [past, present] : probe.kv().pairs) presents.push_back(present);
  const EngineKernelSites fresh = find_engine_kernel_sites(*again, presents);
  EXPECT_EQ(fresh.attention_steps, sites.attention_steps);
  EXPECT_EQ(fresh.repeat.tensors, sites.repeat.tensors);
  ASSERT_EQ(fresh.moe.size(), sites.moe.size());
  for (size_t i = 0; i < fresh.moe.size(); ++i) EXPECT_EQ(fresh.moe[i].tensors, sites.moe[i].tensors);
  // A graph the probe did not shape is not one whose sites it keeps.
  EXPECT_THROW(probe.kernel_sites(std::make_shared<const Graph>(*again)), std::logic_error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace memplan
