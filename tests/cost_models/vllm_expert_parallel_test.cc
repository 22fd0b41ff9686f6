// vLLM's expert parallelism (cost_models/vllm_expert_parallel.h) and the fused MoE kernel at a rank's whole experts,
// every number by hand.
#include "cost_models/vllm_expert_parallel.h"

#include <gtest/gtest.h>

#include "cost_models/vllm_fused_moe.h"

namespace memplan {
namespace {

// determine_expert_map's balanced rule: base = E // ep, the first E % ep ranks one more; rank 0 the most.
//   Qwen3-30B-A3B, E = 128 over 8: 16 each.  Qwen1.5-MoE-A2.7B, E = 60 over 8: base 7, remainder 4: ranks 0-3 hold 8.
//   Mixtral, E = 8 over 16 (more GPUs than experts): base 0, remainder 8: rank 0 holds 1.
//   The map: int32 [E], 128 x 4 = 512 B, 60 x 4 = 240 B a layer.
TEST(VllmExpertParallel, RankZeroHoldsTheCeiling) {
  const VllmExpertParallel qwen3 = vllm_expert_parallel(128, 8);
  EXPECT_EQ(qwen3.ep_size, 8);
  EXPECT_EQ(qwen3.local_experts, 16);
  EXPECT_EQ(qwen3.expert_map_bytes, 512u);
  const VllmExpertParallel qwen15 = vllm_expert_parallel(60, 8);
  EXPECT_EQ(qwen15.local_experts, 8);
  EXPECT_EQ(qwen15.expert_map_bytes, 240u);
  EXPECT_EQ(vllm_expert_parallel(8, 16).local_experts, 1);
  EXPECT_EQ(vllm_expert_parallel(60, 4).local_experts, 15);
}

// One GPU: FusedMoEParallelConfig.make's use_ep needs tp x dp > 1; every expert, no map.
TEST(VllmExpertParallel, OneGpuHoldsEveryExpertAndNoMap) {
  const VllmExpertParallel one = vllm_expert_parallel(8, 1);
  EXPECT_EQ(one.local_experts, 8);
  EXPECT_EQ(one.expert_map_bytes, 0u);
}

// Mixtral-8x7B at --tp 2 with expert parallelism, bf16, 8192 tokens (vllm_fused_moe_test.cc has it without):
// I_p = I = 14336, N = 28672, E_local = 4; M = 8192 > 4: B = 64; the alignment over the global E = 8 as before.
//   fused_topk   196,608;  alignment 68,612 (unchanged)
//   cache13      8192 x 2 x max(28672, 4096) x 2 = 939,524,096   (tensor parallelism's: 469,762,048)
//   cache2       8192 x 2 x 14336 x 2            = 469,762,048   (234,881,024)
//   output       8192 x 4096 x 2                 = 67,108,864
//   total                                        = 1,476,660,228 (772,017,156: 704,643,072 more a rank)
TEST(VllmExpertParallel, MixtralKernelAtTheFullWidth) {
  const VllmFusedMoeBytes b = vllm_fused_moe_bytes({8192, 4096, 8, 2, 14336, 4}, DType::BFloat16);
  EXPECT_EQ(b.block_size_m, 64);
  EXPECT_EQ(b.topk_bytes, 196608u);
  EXPECT_EQ(b.align_bytes, 68612u);
  EXPECT_EQ(b.cache13_bytes, 939524096u);
  EXPECT_EQ(b.cache2_bytes, 469762048u);
  EXPECT_EQ(b.output_bytes, 67108864u);
  EXPECT_EQ(b.total(), 1476660228u);
}

// get_default_config's E is the rank's (w2.size(0)): Qwen3-30B-A3B at 64 tokens, 16 local experts of 128: M = 64 >
// 16 takes BLOCK_SIZE_M 64 where all 128 would take 16; the alignment stays over the global E = 128:
//   sorted 64 x 8 + 128 x 63 = 8,576; expert_ids cdiv(8,576, 64) = 134; (8,576 + 134 + 1) x 4 = 34,844
TEST(VllmExpertParallel, TheBlockSizeFollowsTheLocalExperts) {
  const VllmFusedMoeBytes ep = vllm_fused_moe_bytes({64, 2048, 128, 8, 768, 16}, DType::Float16);
  EXPECT_EQ(ep.block_size_m, 64);
  EXPECT_EQ(ep.align_bytes, 34844u);
  EXPECT_EQ(vllm_fused_moe_bytes({64, 2048, 128, 8, 768}, DType::Float16).block_size_m, 16);
}

// --data-parallel-size D with expert parallelism: FusedMoEParallelConfig.make's ep_size = D x T, the same balanced
// rule over it. DeepSeek-V3, E = 256 at dp 8 x tp 1: 32 a rank; Qwen3-30B-A3B, E = 128 at dp 4 x tp 2: 16;
// Qwen1.5-MoE-A2.7B, E = 60 at dp 2 x tp 4: base 7, remainder 4, rank 0 holds 8. The map stays int32 [E]: 1,024 B.
TEST(VllmExpertParallel, DataParallelRanksJoinTheGroup) {
  const VllmExpertParallel v3 = vllm_expert_parallel(256, 8 * 1);
  EXPECT_EQ(v3.ep_size, 8);
  EXPECT_EQ(v3.local_experts, 32);
  EXPECT_EQ(v3.expert_map_bytes, 1024u);
  EXPECT_EQ(vllm_expert_parallel(128, 4 * 2).local_experts, 16);
  EXPECT_EQ(vllm_expert_parallel(60, 2 * 4).local_experts, 8);
}

// The naive dispatch at dp > 1 gathers [D x T, H] hidden states and [D x T, E] router logits, bf16:
//   Qwen3-30B-A3B (H 2048, E 128), T 8192, dp 4: 32,768 x (2048 + 128) x 2 = 32,768 x 4,352 = 142,606,336
//   DeepSeek-V3 (H 7168, E 256), T 8192, dp 8: 65,536 x (7168 + 256) x 2 = 65,536 x 14,848 = 973,078,528
//   dp 1: no dispatch, 0.
TEST(VllmExpertParallel, TheDispatchGathersEveryRanksTokens) {
  EXPECT_EQ(vllm_dp_dispatch_bytes(8192, 4, 2048, 128, 2), 142606336u);
  EXPECT_EQ(vllm_dp_dispatch_bytes(8192, 8, 7168, 256, 2), 973078528u);
  EXPECT_EQ(vllm_dp_dispatch_bytes(8192, 1, 7168, 256, 2), 0u);
}

// The kernel on the gathered tokens: Qwen3-30B-A3B at dp 4 x tp 1 with EP, bf16, 8192 tokens a rank: T = 32,768
// (M = min(32,768, VLLM_FUSED_MOE_CHUNK_SIZE 32,768) = 32,768), E_local 32, I 768 (N = 1,536), k 8, H 2048:
//   fused_topk  32,768 x 8 x (4 + 4 + 4)                = 3,145,728
//   B 64 (M > 32); sorted 32,768 x 8 + 128 x 63 = 270,208; expert_ids cdiv(270,208, 64) = 4,222; + 1:
//               (270,208 + 4,222 + 1) x 4               = 1,097,724
//   cache13     32,768 x 8 x max(1,536, 2,048) x 2      = 1,073,741,824
//   cache2      32,768 x 8 x 768 x 2                    = 402,653,184
//   output      32,768 x 2,048 x 2                      = 134,217,728
//   total                                               = 1,614,856,188
TEST(VllmExpertParallel, Qwen3KernelOnFourRanksOfTokens) {
  const VllmFusedMoeBytes b = vllm_fused_moe_bytes({8192 * 4, 2048, 128, 8, 768, 32}, DType::BFloat16);
  EXPECT_EQ(b.chunk_tokens, 32768);
  EXPECT_EQ(b.block_size_m, 64);
  EXPECT_EQ(b.topk_bytes, 3145728u);
  EXPECT_EQ(b.align_bytes, 1097724u);
  EXPECT_EQ(b.cache13_bytes, 1073741824u);
  EXPECT_EQ(b.cache2_bytes, 402653184u);
  EXPECT_EQ(b.output_bytes, 134217728u);
  EXPECT_EQ(b.total(), 1614856188u);
}

}  // namespace
}  // namespace memplan
