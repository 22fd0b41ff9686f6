// vLLM's fused MoE kernel buffers (cost_models/vllm_fused_moe.h), every term by hand.
#include "cost_models/vllm_fused_moe.h"

#include <gtest/gtest.h>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

// Mixtral-8x7B (E = 8, k = 2, H = 4096, I = 14336) at --tp 2, bf16, vLLM's default step of 8192 tokens:
//   I_p = 7168, N = 2 I_p = 14336; M = min(8192, 32768) = 8192; B = 64 (M > E)
//   fused_topk      8192 x 2 x 12                          = 196,608
//   alignment       sorted 16,384 + 8 x 63 = 16,888; expert_ids cdiv(16,888, 64) = 264; + 1:
//                   (16,888 + 264 + 1) x 4                 = 68,612
//   cache13         8192 x 2 x max(14336, 4096) x 2        = 469,762,048
//   cache2          8192 x 2 x 7168 x 2                    = 234,881,024
//   output          8192 x 4096 x 2                        = 67,108,864
//   total                                                  = 772,017,156
TEST(VllmFusedMoe, MixtralAtTp2ByHand) {
  const VllmFusedMoeBytes b = vllm_fused_moe_bytes({8192, 4096, 8, 2, 7168}, DType::BFloat16);
  EXPECT_EQ(b.chunk_tokens, 8192);
  EXPECT_EQ(b.block_size_m, 64);
  EXPECT_EQ(b.topk_bytes, 196608u);
  EXPECT_EQ(b.align_bytes, 68612u);
  EXPECT_EQ(b.cache13_bytes, 469762048u);
  EXPECT_EQ(b.cache2_bytes, 234881024u);
  EXPECT_EQ(b.output_bytes, 67108864u);
  EXPECT_EQ(b.total(), 772017156u);
}

// Qwen3-30B-A3B (E = 128, k = 8, H = 2048, I = 768), tp 1, a decode step of 64 tokens in fp16: M = 64 <= E, so
// get_default_config's BLOCK_SIZE_M is 16; H = 2048 > N = 1536, so cache13 is sized by H:
//   fused_topk      64 x 8 x 12 = 6,144
//   alignment       512 + 128 x 15 = 2,432; cdiv(2,432, 16) = 152; (2,432 + 152 + 1) x 4 = 10,340
//   cache13         64 x 8 x 2048 x 2 = 2,097,152;  cache2 64 x 8 x 768 x 2 = 786,432;  output 64 x 2048 x 2 = 262,144
TEST(VllmFusedMoe, SmallStepTakesTheSmallBlockAndTheHiddenWidth) {
  const VllmFusedMoeBytes b = vllm_fused_moe_bytes({64, 2048, 128, 8, 768}, DType::Float16);
  EXPECT_EQ(b.block_size_m, 16);
  EXPECT_EQ(b.topk_bytes, 6144u);
  EXPECT_EQ(b.align_bytes, 10340u);
  EXPECT_EQ(b.cache13_bytes, 2097152u);
  EXPECT_EQ(b.cache2_bytes, 786432u);
  EXPECT_EQ(b.output_bytes, 262144u);
}

// A step above VLLM_FUSED_MOE_CHUNK_SIZE: the caches hold one chunk of 32,768 tokens, the top-k, alignment and
// output buffers every token (E = 8, k = 2, H = 16, I_p = 8, fp16, T = 40,000):
//   cache13 32,768 x 2 x 16 x 2 = 2,097,152; cache2 32,768 x 2 x 8 x 2 = 1,048,576; output 40,000 x 16 x 2 = 1,280,000
TEST(VllmFusedMoe, ChunkBoundsTheCaches) {
  const VllmFusedMoeBytes b = vllm_fused_moe_bytes({40000, 16, 8, 2, 8}, DType::Float16);
  EXPECT_EQ(b.chunk_tokens, 32768);
  EXPECT_EQ(b.cache13_bytes, 2097152u);
  EXPECT_EQ(b.cache2_bytes, 1048576u);
  EXPECT_EQ(b.output_bytes, 1280000u);
  EXPECT_EQ(b.topk_bytes, 40000u * 2 * 12);
}

// From 0.12 the variable's default is 16 x 1024 (vllm/envs.py at the v0.12.0 tag): the same step's caches hold 16,384
// tokens, half the above: cache13 16,384 x 2 x 16 x 2 = 1,048,576, cache2 524,288; the output still every token.
TEST(VllmFusedMoe, FromVersion0_12TheChunkIsHalved) {
  VllmFusedMoeShape s{40000, 16, 8, 2, 8};
  s.chunk_size = kVllmModularMoeChunkSize;
  const VllmFusedMoeBytes b = vllm_fused_moe_bytes(s, DType::Float16);
  EXPECT_EQ(b.chunk_tokens, 16384);
  EXPECT_EQ(b.cache13_bytes, 1048576u);
  EXPECT_EQ(b.cache2_bytes, 524288u);
  EXPECT_EQ(b.output_bytes, 1280000u);
}

// MarlinExperts in the modular kernel (NVFP4 experts from vLLM 0.14), Qwen3-30B-A3B's shapes (E 128, k 8, H 2,048,
// N 768) at 8,192 tokens on an H100 (132 SMs), bf16:
//   block_size_m   8,192 x 8 / 128 / 64 = 8 >= 0.9 at every size: 64
//   fused_topk     8,192 x 8 x 12                                   = 786,432
//   alignment      sorted 65,536 + 128 x 63 = 73,600; 1,150 blocks; + 1: 74,751 x 4 = 299,004
//   output         8,192 x 2,048 x 2                                = 33,554,432
//   lock           132 x 4 int32, zeroed each call                  = 2,112
//   c_tmp          min(max(1,536, 2,048) x 73,600, 132 x 4 x 64 x 256) = 8,650,752 floats = 34,603,008
//   per call                                                        = 69,244,988
//   WorkspaceManager: workspace1 65,536 x max(768, 2,048) x 2 = 268,435,456 and workspace2 65,536 x max(1,536,
//   2,048) x 2 the same: 536,870,912, no cache of the call's own.
TEST(VllmFusedMoe, MarlinExpertsInTheModularKernelByHand) {
  const VllmFusedMoeBytes b = vllm_marlin_moe_bytes(8192, 8, 128, 2048, 768, /*reduces=*/true, 132,
                                                    DType::BFloat16, /*modular=*/true);
  EXPECT_EQ(b.block_size_m, 64);
  EXPECT_EQ(b.topk_bytes, 786432u);
  EXPECT_EQ(b.align_bytes, 299004u);
  EXPECT_EQ(b.output_bytes, 33554432u);
  EXPECT_EQ(b.lock_bytes, 2112u);
  EXPECT_EQ(b.reduce_bytes, 34603008u);
  EXPECT_EQ(b.cache13_bytes + b.cache2_bytes, 0u);
  EXPECT_EQ(b.total(), 69244988u);
  EXPECT_EQ(b.workspace_bytes, 536870912u);
  // fused_marlin_moe called directly (to 0.13): its own caches, the layer's workspace passed in, no lock of its own.
  const VllmFusedMoeBytes direct = vllm_marlin_moe_bytes(8192, 8, 128, 2048, 768, true, 132, DType::BFloat16, false);
  EXPECT_EQ(direct.lock_bytes + direct.workspace_bytes, 0u);
  EXPECT_EQ(direct.cache13_bytes, 65536u * 2048 * 2);
  EXPECT_EQ(direct.cache2_bytes, 65536u * 768 * 2);
}

// get_default_config's BLOCK_SIZE_M: to 0.16 16 when M <= the rank's experts, else 64 (fp8 blocks 64); from 0.17
// (PR #34846) 16, 32, 64 up to M = 32, 96, 512, then 128 (fp8 blocks 16 up to 64, then 64).
TEST(VllmFusedMoe, DefaultBlockByRelease) {
  EXPECT_EQ(vllm_triton_moe_block_size(8, 8, false, false), 16);
  EXPECT_EQ(vllm_triton_moe_block_size(9, 8, false, false), 64);
  EXPECT_EQ(vllm_triton_moe_block_size(8192, 8, false, false), 64);
  EXPECT_EQ(vllm_triton_moe_block_size(8, 8, true, false), 64);
  EXPECT_EQ(vllm_triton_moe_block_size(32, 8, false, true), 16);
  EXPECT_EQ(vllm_triton_moe_block_size(33, 8, false, true), 32);
  EXPECT_EQ(vllm_triton_moe_block_size(96, 8, false, true), 32);
  EXPECT_EQ(vllm_triton_moe_block_size(512, 8, false, true), 64);
  EXPECT_EQ(vllm_triton_moe_block_size(513, 8, false, true), 128);
  EXPECT_EQ(vllm_triton_moe_block_size(64, 8, true, true), 16);
  EXPECT_EQ(vllm_triton_moe_block_size(65, 8, true, true), 64);
  // Mixtral's step above at 0.17: block 128, sorted 16,384 + 8 x 127 = 17,400, 136 blocks: (17,400 + 136 + 1) x 4 =
  // 70,148; under expert parallelism in the modular kernel the expert_map gather adds 136 x 4 = 544.
  VllmFusedMoeShape s{8192, 4096, 8, 2, 7168};
  s.block_by_batch = true;
  s.modular = true;
  EXPECT_EQ(vllm_fused_moe_bytes(s, DType::BFloat16).align_bytes, 70148u);
  s.remaps_expert_ids = true;
  EXPECT_EQ(vllm_fused_moe_bytes(s, DType::BFloat16).align_bytes, 70692u);
}

TEST(VllmFusedMoe, TensorParallelMustDivideTheExpertWidth) {
  EXPECT_EQ(vllm_moe_intermediate_per_rank(768, 4, "m"), 192);
  EXPECT_THROW(vllm_moe_intermediate_per_rank(768, 5, "m"), InputError);
}

}  // namespace
}  // namespace memplan
