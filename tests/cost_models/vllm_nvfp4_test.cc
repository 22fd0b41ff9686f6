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

#include "cost_models/vllm_nvfp4.h"

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

TEST(VllmNvfp4, KernelByCapability) {
  EXPECT_TRUE(vllm_nvfp4_marlin(75));
  EXPECT_TRUE(vllm_nvfp4_marlin(90));
  EXPECT_FALSE(vllm_nvfp4_marlin(100));
  EXPECT_FALSE(vllm_nvfp4_marlin(120));
}

}  // namespace
}  // namespace memplan
