// ModelOpt NVFP4 under vLLM (cost_models/vllm_nvfp4.h), by hand on a module off every alignment: N = 100 outputs,
// K = 48 inputs, 10 multiprocessors, M = 100 rows of bfloat16.
//  - The FP4 GEMM's layout: weight uint8 [round_up(100, 32), round_up(48, 32) / 2] = [128, 32] 4,096 B; swizzled fp8
//    scales [round_up(100, 128), round_up(48 / 16, 4)] = [128, 4] 512 B; four float32 scalars 16 B: 4,624.
//  - Marlin's: N_m = round_up(100, 64) = 128; weight int32 [3, 256] = 48 x 128 / 2 = 3,072 B; scales fp8 [3, 128]
//    384 B; workspace 10 x 4 = 40 B; scalars 16 B: 3,512.
//  - A call of the FP4 GEMM: padded_n K_p = 64: input uint8 [100, 32] 3,200 B; scales round_up(100, 128) x
//    round_up(64 / 16, 4) = 128 x 4 = 512 B; output [100, 128] bf16 25,600 B before its slice: 29,312.
//  - A Marlin call: c_tmp float32 10 x min(round_up(100, 16), 64) x 256 = 163,840 elements, 655,360 B; output
//    [100, 128] 25,600 B before its slice: 680,960.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>

#include "cost_models/vllm_nvfp4.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

TEST(VllmNvfp4, LayoutsByHand) {
  EXPECT_EQ(vllm_nvfp4_linear_bytes(100, 48, /*marlin=*/false, 10), 4624u);
  EXPECT_EQ(vllm_nvfp4_linear_bytes(100, 48, /*marlin=*/true, 10), 3512u);
  // Aligned: nothing padded (a Llama-3.1-8B o_proj on one rank, 4,096 x 4,096): 8,388,608 + 1,048,576 + 16.
  EXPECT_EQ(vllm_nvfp4_linear_bytes(4096, 4096, false, 148), 9437200u);
}

TEST(VllmNvfp4, CallsByHand) {
  EXPECT_EQ(vllm_nvfp4_call_bytes(100, 100, 48, /*marlin=*/false, 10, DType::BFloat16), 29312u);
  EXPECT_EQ(vllm_nvfp4_call_bytes(100, 100, 48, /*marlin=*/true, 10, DType::BFloat16), 680960u);
  // Marlin's c_tmp stops growing at 64 rows: 8,192 rows of an aligned module, 132 multiprocessors: 132 x 64 x 1,024.
  EXPECT_EQ(vllm_nvfp4_call_bytes(8192, 4096, 4096, true, 132, DType::BFloat16), 8650752u);
}

// NVFP4 experts on Marlin, one layer: E 4, H 256, I_p 128, bfloat16, 132 multiprocessors. E x (2 I_p H + H I_p) =
// 4 x 98,304 = 393,216 values: weights 196,608 B (two a byte), fp8 scales 24,576 (one a 16); the global scales [E]
// twice in bfloat16, 16 B; the loaded input scales float32 [E, 2] and [E], 48 B; the workspace 132 x 4 int32,
// 2,112 B: 223,360. Qwen3-30B-A3B's layer (E 128, H 2,048, I 768, tp 1): 603,979,776 values, 301,989,888 +
// 37,748,736 + 512 + 1,536 + 2,112 = 339,742,784.
// From 0.14 the input scales are dropped (223,312; Qwen3-30B-A3B 339,741,248); from 0.20 the global scales are
// float32, 32 B (223,328); from 0.24 the width is padded: H 256 a multiple of 128, so round_up(I_p, 64): 80 -> 128,
// the layer of I_p 128 (223,328); H 192 (a multiple of 64, not of 128): round_up(80, 128) = 128 too, E x 3 x 192 x
// 128 = 294,912 values, 147,456 + 18,432 + 32 + 2,112 = 168,032.
TEST(VllmNvfp4, MarlinExpertsByHand) {
  const VllmNvfp4MarlinLayout to_0_13{}, from_0_14{true, false, false}, from_0_20{true, true, false},
      from_0_24{true, true, true};
  const VllmNvfp4Experts l = vllm_nvfp4_marlin_experts(4, 256, 128, 132, DType::BFloat16, to_0_13, "m");
  EXPECT_EQ(l.width, 128);
  EXPECT_EQ(l.weight_bytes, 196608u);
  EXPECT_EQ(l.scale_bytes, 24576u);
  EXPECT_EQ(l.global_scale_bytes, 16u);
  EXPECT_EQ(l.input_scale_bytes, 48u);
  EXPECT_EQ(l.workspace_bytes, 2112u);
  EXPECT_EQ(l.total(), 223360u);
  EXPECT_EQ(vllm_nvfp4_marlin_experts(128, 2048, 768, 132, DType::BFloat16, to_0_13, "m").total(), 339742784u);
  EXPECT_EQ(vllm_nvfp4_marlin_experts(4, 256, 128, 132, DType::BFloat16, from_0_14, "m").total(), 223312u);
  EXPECT_EQ(vllm_nvfp4_marlin_experts(128, 2048, 768, 132, DType::BFloat16, from_0_14, "m").total(), 339741248u);
  EXPECT_EQ(vllm_nvfp4_marlin_experts(4, 256, 128, 132, DType::BFloat16, from_0_20, "m").total(), 223328u);
  const VllmNvfp4Experts padded = vllm_nvfp4_marlin_experts(4, 256, 80, 132, DType::BFloat16, from_0_24, "m");
  EXPECT_EQ(padded.width, 128);
  EXPECT_EQ(padded.total(), 223328u);
  const VllmNvfp4Experts padded_128 = vllm_nvfp4_marlin_experts(4, 192, 80, 132, DType::BFloat16, from_0_24, "m");
  EXPECT_EQ(padded_128.width, 128);
  EXPECT_EQ(padded_128.total(), 168032u);
  EXPECT_EQ(vllm_nvfp4_marlin_moe_width(2048, 96, true, "m"), 128);  // Qwen3-30B-A3B at tp 8 from 0.24
  EXPECT_EQ(vllm_nvfp4_marlin_moe_width(2048, 96, false, "m"), 96);  // unpadded to 0.23: 2 x 96 by 64
  // gptq_marlin_repack's tiles, unpadded: a width whose double is off 64 (I_p 48, I_p 80), a hidden size off 64;
  // padded: a hidden size off 64 (the assert), a width off the scales' groups of 16.
  for (const auto& [h, ip, pads] : {std::tuple{256, 48, false}, std::tuple{256, 80, false},
                                    std::tuple{200, 128, false}, std::tuple{200, 128, true},
                                    std::tuple{256, 72, true}}) {
    try {
      vllm_nvfp4_marlin_experts(4, h, ip, 132, DType::BFloat16, {true, true, pads}, "tiny");
      ADD_FAILURE() << h << " " << ip;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("tiny's NVFP4 experts"), std::string::npos) << e.what();
    }
  }
}

TEST(VllmNvfp4, KernelByCapability) {
  EXPECT_TRUE(vllm_nvfp4_marlin(75));
  EXPECT_TRUE(vllm_nvfp4_marlin(90));
  EXPECT_FALSE(vllm_nvfp4_marlin(100));
  EXPECT_FALSE(vllm_nvfp4_marlin(120));
}

}  // namespace
}  // namespace memplan
