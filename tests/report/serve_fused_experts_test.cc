// serve's vLLM analysis (--engine vllm, sglang, trtllm, all) reads a config's sparse blocks in the form its fused MoE
// kernel replaces (DecoderConfig::engine_experts, onnx_import/hf_moe.h): each layer's experts as the two stacked
// weights vLLM's FusedMoE allocates (w13_weight and w2_weight) read by one grouped GEMM each, the block scattered
// once, where transformers' eager loop gathers, weighs and scatters per expert, one weight a projection. What the
// engines read of a block (find_moe_blocks' facts) and the profile step's bytes with the blocks held outside
// (report/serve_vllm.cc) must be the eager loop's, but for what the caching allocator does with one stacked weight
// instead of E small ones (the last test).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "cost_models/engine_kernels.h"
#include "report/estimate.h"
#include "report/serve_probe.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

const std::string kCorpus = std::string(MEMPLAN_ZOO_DIR) + "/../../fuzz/corpus/hf_config/";

struct Read {
  std::shared_ptr<const Graph> graph;
  EngineKernelSites sites;
  Estimate step;
};

// `engine`'s profile step of 64 tokens (one sequence) in bfloat16 on `tp` GPUs, the head's logits, repeat_kv and the
// sparse blocks held outside it as serve_vllm holds them.
Read read(const std::string& path, const std::string& engine, int tp) {
  ServeSettings s;
  s.engine = engine;
  s.context = 64;
  s.max_batched_tokens = 64;
  Bindings b;
  b.graph = "decode";
  EstimateOptions o;
  o.inference.float_dtype = DType::BFloat16;
  ServeProbe probe(path, b, s, o);
  Read r;
  r.graph = probe.shape_step(1, 0, 64);
  r.sites = probe.kernel_sites(r.graph);
  EstimateOptions options = probe.options();
  options.execution.runtime = Runtime::PyTorch;
  options.execution.attention = AttentionImpl::EngineKernel;
  options.execution.replicate_kv_heads = true;
  options.execution.tp = tp;
  std::vector<std::string>& held = options.inference.held_outside;
  if (r.sites.head) held.insert(held.end(), r.sites.head->logits.begin(), r.sites.head->logits.end());
  held.insert(held.end(), r.sites.repeat.tensors.begin(), r.sites.repeat.tensors.end());
  for (const MoeBlock& m : r.sites.moe) held.insert(held.end(), m.tensors.begin(), m.tensors.end());
  r.step = estimate_graph(*r.graph, options);
  return r;
}

int64_t count(const Graph& g, const std::string& op) {
  return std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op_type == op; });
}

uint64_t at_step(const Estimate& e, const std::string& node) {
  const auto it = std::find(e.step_names.begin(), e.step_names.end(), node);
  EXPECT_NE(it, e.step_names.end()) << node;
  return it == e.step_names.end() ? 0 : e.allocated_per_step.at(size_t(it - e.step_names.begin()));
}

// tiny_qwen3_moe: 4 layers, decoder_sparse_step 2 (sparse layers 1 and 3), 4 experts, top-1, moe_intermediate_size
// 48, hidden 64. transformers' loop index_adds once an expert: 2 layers x 4 = 8 ScatterElements; the engines' form
// once a block: 2. Its two stacked weights a layer stand for the loop's 4 x 3 projections.
TEST(ServeFusedExperts, TheEnginesReadOneScatterABlockWithTheEagerLoopsFacts) {
  const std::string path = kCorpus + "tiny_qwen3_moe.json";
  const Read served = read(path, "vllm", 1), eager = read(path, "eager", 1);
  EXPECT_EQ(count(*served.graph, "ScatterElements"), 2);
  EXPECT_EQ(count(*eager.graph, "ScatterElements"), 8);
  EXPECT_LT(served.graph->nodes.size(), eager.graph->nodes.size());
  ASSERT_EQ(served.sites.moe.size(), 2u);
  for (const MoeBlock& m : served.sites.moe) {
    EXPECT_EQ(m.experts, 4);
    EXPECT_EQ(m.top_k, 1);
    EXPECT_EQ(m.hidden, 64);
    EXPECT_EQ(m.expert_intermediate, 48);
    EXPECT_EQ(m.expert_linears, 12);
    EXPECT_EQ(m.tokens, 64);
  }
}

// Every tiny mixture of experts the identity matrix (bench/serve_moe_identity.py) serves, on one GPU and on two (one only for
// tiny_deepseek_v3, whose 3 heads' latent attention splits over no tensor-parallel group without vLLM's MLA): the same
// blocks (router, sizes, projections) and the same profile step (its allocated peak, the bytes at each router, the
// weights), whichever form the experts are read in; but for the caching allocator's rounding of the resident expert
// weights, the same at every step (the last test): tiny_deepseek_v2_lite_greedy at --tp 2 holds 8 experts x 3
// projections of 10 x 64 bfloat16 = 1,280 B in the loop, each a 1,536 B block (kMinBlockSize rounding, 512), 256 B
// rounded each: 6,144 B a sparse layer (1 of its 2 layers; first_k_dense_replace 1); the stacked w13 [8, 64, 2 x 10]
// and w2 [8, 10, 64] on a rank, 10,240 B each, 20 x 512: none.
TEST(ServeFusedExperts, TheEnginesFormAnswersAsTheEagerLoop) {
  for (const char* name : {"tiny_qwen3_moe", "tiny_mixtral", "tiny_qwen2_moe", "tiny_deepseek_v3",
                           "tiny_deepseek_v2_lite_greedy"}) {
    for (int tp : {1, 2}) {
      if (tp > 1 && std::string(name) == "tiny_deepseek_v3") continue;
      SCOPED_TRACE(std::string(name) + " --tp " + std::to_string(tp));
      const std::string path = kCorpus + name + ".json";
      const Read served = read(path, "vllm", tp), eager = read(path, "eager", tp);
      const uint64_t rounded = std::string(name) == "tiny_deepseek_v2_lite_greedy" && tp == 2 ? 6144 : 0;
      ASSERT_EQ(served.sites.moe.size(), eager.sites.moe.size());
      ASSERT_FALSE(served.sites.moe.empty());
      for (size_t i = 0; i < served.sites.moe.size(); ++i) {
        const MoeBlock &s = served.sites.moe[i], &e = eager.sites.moe[i];
        EXPECT_EQ(s.topk, e.topk);
        EXPECT_EQ(s.tokens, e.tokens);
        EXPECT_EQ(s.hidden, e.hidden);
        EXPECT_EQ(s.experts, e.experts);
        EXPECT_EQ(s.top_k, e.top_k);
        EXPECT_EQ(s.expert_intermediate, e.expert_intermediate);
        EXPECT_EQ(s.expert_linears, e.expert_linears);
        EXPECT_EQ(at_step(eager.step, e.topk) - at_step(served.step, s.topk), rounded);
      }
      EXPECT_LT(count(*served.graph, "ScatterElements"), count(*eager.graph, "ScatterElements"));
      EXPECT_EQ(eager.step.allocated_bytes - served.step.allocated_bytes, rounded);
      EXPECT_EQ(eager.step.breakdown.allocator_rounding - served.step.breakdown.allocator_rounding, rounded);
      EXPECT_EQ(served.step.breakdown.weights, eager.step.breakdown.weights);
    }
  }
}

// tiny_deepseek_v2_grouped: DeepseekV2MoEGate's group_limited_greedy, a router find_moe_blocks does not read, so the
// analysis keeps its experts in the step: the engines get the eager loop (8 experts x 2 sparse layers = 16 index_add_
// scatters, and each router's group mask, zeros.scatter_(1, group_idx, 1): 2 more).
TEST(ServeFusedExperts, ARouterTheEnginesDoNotReadKeepsTheLoop) {
  const std::string path = kCorpus + "tiny_deepseek_v2_grouped.json";
  const Read served = read(path, "vllm", 1), eager = read(path, "eager", 1);
  EXPECT_TRUE(served.sites.moe.empty());
  EXPECT_EQ(count(*served.graph, "ScatterElements"), 18);
  EXPECT_EQ(served.graph->nodes.size(), eager.graph->nodes.size());
  EXPECT_EQ(served.step.allocated_bytes, eager.step.allocated_bytes);
}

// The caching allocator on one stacked weight instead of E small ones (planner/alloc_pytorch.h, PyTorch's
// CUDACachingAllocator.cpp: a request above kMinLargeAlloc, 10 MiB, gets its own segment rounded up to kRoundLarge,
// 2 MiB, and the block is split only when the rest is above kSmallSize, 1 MiB; else the whole segment is the block,
// and memory_allocated counts it). One sparse layer of 2 experts, H 2048, I 3000, bfloat16; every other weight and
// every activation of the 64-token step is at most 1 MiB (the small pool, sizes multiples of 512: nothing rounds).
//  - the eager loop, 6 weights of 3000 x 2048 x 2 = 12,288,000 B: each a segment of 12,582,912 (6 x 2 MiB), the rest
//    294,912 < 1 MiB, unsplit: 6 x 294,912 = 1,769,472 B of rounding;
//  - the engines' form, as vLLM allocates it (UnquantizedFusedMoEMethod.create_weights: w13_weight [E, 2I, H],
//    w2_weight [E, H, I], one tensor each): w13 2 x 6000 x 2048 x 2 = 49,152,000 B in 50,331,648 (24 x 2 MiB), the
//    rest 1,179,648 > 1 MiB, split (no rounding); w2 24,576,000 B in 25,165,824 (12 x 2 MiB), the rest 589,824,
//    unsplit: 589,824 B.
// The weights' bytes are equal (12,288,000 x 6 = 73,728,000 = 49,152,000 + 24,576,000); the step's allocated bytes
// differ by 1,769,472 - 589,824 = 1,179,648, at every step (the weights are resident).
TEST(ServeFusedExperts, OneStackedWeightRoundsAsTheCachingAllocatorRoundsIt) {
  const std::filesystem::path dir = testing::process_temp_dir("memplan_serve_stacked_rounding");
  const std::string path = (dir / "config.json").string();
  std::ofstream(path) << R"({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 128,
      "rms_norm_eps": 1e-06, "max_position_embeddings": 128, "rope_theta": 1000000.0, "num_experts": 2,
      "num_experts_per_tok": 1, "moe_intermediate_size": 3000, "norm_topk_prob": true, "decoder_sparse_step": 1,
      "mlp_only_layers": [], "attention_bias": false})";
  const Read served = read(path, "vllm", 1), eager = read(path, "eager", 1);
  ASSERT_EQ(served.sites.moe.size(), 1u);
  EXPECT_EQ(served.sites.moe[0].weights.size(), 2u);
  EXPECT_EQ(eager.sites.moe[0].weights.size(), 6u);
  EXPECT_EQ(served.step.breakdown.weights, eager.step.breakdown.weights);
  EXPECT_EQ(eager.step.allocated_bytes - served.step.allocated_bytes, 1179648u);
  EXPECT_EQ(eager.step.breakdown.allocator_rounding - served.step.breakdown.allocator_rounding, 1179648u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace memplan
