// vLLM's block-wise fp8 (cost_models/vllm_fp8_block.h), every term by hand.
#include "cost_models/vllm_fp8_block.h"

#include <gtest/gtest.h>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

const VllmFp8Block k128{128, 128};

// DeepSeek-V3 at tp 8 (hidden 7168, q_lora_rank 1536, kv_lora_rank 512 + rope 64, 16 heads a rank):
//  fused_qkv_a_proj (replicated): out 1536 + 576 = 2112, in 7168: 2112 x 7168 = 15,138,816 fp8 bytes and
//    ceil(2112 / 128) = 17 x 56 = 952 scales x 4 = 3,808: 15,142,624;
//  o_proj (row-parallel): out 7168, in 16 x 128 = 2048: 14,680,064 + 56 x 16 x 4 = 3,584: 14,683,648;
//  a dense layer's down_proj: out 7168, in 18432 / 8 = 2304: 16,515,072 + 56 x 18 x 4 = 4,032: 16,519,104.
// A grid that does not fill its last block rounds up: out 200, in 300: 60,000 + ceil(200/128) 2 x ceil(300/128) 3
// x 4 = 24: 60,024.
TEST(VllmFp8Block, LinearModulesByHand) {
  EXPECT_EQ(vllm_fp8_block_linear_bytes(2112, 7168, k128), 15'142'624u);
  EXPECT_EQ(vllm_fp8_block_linear_bytes(7168, 2048, k128), 14'683'648u);
  EXPECT_EQ(vllm_fp8_block_linear_bytes(7168, 2304, k128), 16'519'104u);
  EXPECT_EQ(vllm_fp8_block_linear_bytes(200, 300, k128), 60'024u);
}

// per_token_group_quant_fp8 of 8192 tokens x 7168 features: 58,720,256 fp8 bytes and 8192 x 56 x 4 = 1,835,008:
// 60,555,264. 8190 tokens on 9.0 (padded_cutlass): the originals 8190 x 7168 + 8190 x 56 x 4 = 58,705,920 +
// 1,834,560 = 60,540,480, and padded copies of 8192 rows, 60,555,264: 121,095,744. On 8.9 (Triton) no copies.
TEST(VllmFp8Block, InputQuantizationByHand) {
  EXPECT_EQ(vllm_fp8_block_input_quant_bytes(8192, 7168, k128, 90), 60'555'264u);
  EXPECT_EQ(vllm_fp8_block_input_quant_bytes(8190, 7168, k128, 90), 121'095'744u);
  EXPECT_EQ(vllm_fp8_block_input_quant_bytes(8190, 7168, k128, 89), 60'540'480u);
}

// DeepSeek-V3's sparse layer at tp 8: E 256, H 7168, I_p 2048 / 8 = 256.
//  w13 256 x 512 x 7168 = 939,524,096; w2 256 x 7168 x 256 = 469,762,048: 1,409,286,144 fp8 bytes;
//  w13_weight_scale_inv 256 x (2 x 2) x 56 = 57,344; w2_weight_scale_inv 256 x 56 x 2 = 28,672: 86,016 x 4 =
//  344,064 bytes. 58 sparse layers: 81,758,552,064 bytes a rank.
TEST(VllmFp8Block, DeepSeekV3ExpertsAtTp8ByHand) {
  const VllmFp8BlockExperts e = vllm_fp8_block_experts(256, 7168, 256, 8, k128, "DeepSeek-V3");
  EXPECT_EQ(e.weight_bytes, 1'409'286'144u);
  EXPECT_EQ(e.scale_bytes, 344'064u);
  EXPECT_EQ(58 * e.total(), 81'758'552'064u);
}

// fused_experts_impl at 8192 tokens, k 8, H 7168, I_p 256: a1 8192 x 7168 + 8192 x 56 x 4 = 60,555,264;
// a2 65,536 x 256 + 65,536 x 2 x 4 = 16,777,216 + 524,288 = 17,301,504: 77,856,768.
TEST(VllmFp8Block, MoeQuantizedActivationsByHand) {
  EXPECT_EQ(vllm_fp8_block_moe_quant_bytes(8192, 7168, 8, 256, k128), 77'856'768u);
}

// Per-tensor experts (Fp8MoEMethod without weight_block_size), Mixtral-8x7B's sparse layer at tp 1: E 8, H 4096,
// I_p 14336. w13 8 x 28672 x 4096 = 939,524,096 + w2 8 x 4096 x 14336 = 469,762,048: 1,409,286,144 fp8 bytes;
// max_w13_scales [8] and w2_weight_scale [8] float32: 64 B; static adds w13_input_scale and w2_input_scale reduced to
// one float each: 72 B. Under expert parallelism over 4 GPUs (2 experts a rank, I_p 14336): 352,321,536 + 16 + 8.
TEST(VllmFp8Block, PerTensorExpertsByHand) {
  const VllmFp8BlockExperts dynamic = vllm_fp8_tensor_experts(8, 4096, 14336, false);
  EXPECT_EQ(dynamic.weight_bytes, 1'409'286'144u);
  EXPECT_EQ(dynamic.scale_bytes, 64u);
  EXPECT_EQ(vllm_fp8_tensor_experts(8, 4096, 14336, true).scale_bytes, 72u);
  const VllmFp8BlockExperts local = vllm_fp8_tensor_experts(2, 4096, 14336, true);
  EXPECT_EQ(local.weight_bytes, 352'321'536u);
  EXPECT_EQ(local.scale_bytes, 24u);
}

// fused_experts_impl with per-tensor fp8 at 8192 tokens, k 2, H 4096, I_p 14336: scaled_fp8_quant of the chunk,
// fp8 [8192, 4096] = 33,554,432, and of intermediate_cache2, fp8 [16384, 14336] = 234,881,024: 268,435,456 with
// static scales (the layer's); dynamic adds two float32 [1] scales: 268,435,464.
TEST(VllmFp8Block, PerTensorMoeQuantizedActivationsByHand) {
  EXPECT_EQ(vllm_fp8_tensor_moe_quant_bytes(8192, 4096, 2, 14336, true), 268'435'456u);
  EXPECT_EQ(vllm_fp8_tensor_moe_quant_bytes(8192, 4096, 2, 14336, false), 268'435'464u);
}

// MLA's dequantized kv_b_proj, DeepSeek-V3 at tp 8 in bf16: 61 x 512 x 16 x (128 + 128) x 2 = 255,852,544.
TEST(VllmFp8Block, MlaAbsorbedWeightsByHand) {
  EXPECT_EQ(vllm_fp8_block_mla_absorbed_bytes(61, 512, 16, 128, 128, 2), 255'852'544u);
}

// Fp8MoEMethod.create_weights refuses I_p 192 (not a multiple of block_n 128) at any tp, and with blocks [64, 128]
// at tp 2 I_p 320 (a multiple of block_n 64, not of block_k 128: down's row-parallel input); I_p 384 passes both.
TEST(VllmFp8Block, ExpertShapesVllmRefuses) {
  EXPECT_THROW(vllm_fp8_block_experts(8, 1024, 192, 1, k128, "m"), InputError);
  EXPECT_THROW(vllm_fp8_block_experts(8, 1024, 320, 2, VllmFp8Block{64, 128}, "m"), InputError);
  EXPECT_NO_THROW(vllm_fp8_block_experts(8, 1024, 384, 2, VllmFp8Block{64, 128}, "m"));
  try {
    vllm_fp8_block_experts(8, 1024, 192, 1, k128, "tiny-moe");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tiny-moe"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("block_n 128"), std::string::npos);
  }
}

}  // namespace
}  // namespace memplan
