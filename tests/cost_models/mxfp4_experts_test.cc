// MXFP4 experts as vLLM and SGLang hold them (cost_models/mxfp4_experts.h), every term by hand.
#include "cost_models/mxfp4_experts.h"

#include <gtest/gtest.h>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

// gpt-oss-20b's sparse layer (E = 32, H = 2880, I = 2880) on an H100 (compute capability 9.0: the Triton backend):
//   I_pad = round_up(2880, 64) = 2880 (45 x 64)
//   w13_weight       32 x 5760 x 2880 / 2  = 265,420,800     w2_weight       32 x 2880 x 2880 / 2 = 132,710,400
//   w13_weight_scale 32 x 5760 x 2880 / 32 =  16,588,800     w2_weight_scale 32 x 2880 x 2880 / 32 =  8,294,400
//   w13_bias float32 32 x 5760 x 4         =     737,280     w2_bias float32 32 x 2880 x 4         =    368,640
//   blocks 398,131,200, scales 24,883,200 swizzled and 24,883,200 as loaded (process_weights_after_loading deletes
//   w13_weight and w2_weight only), biases 1,105,920: 449,003,520 a layer
TEST(VllmMxfp4, GptOss20bLayerOnHopperByHand) {
  const Mxfp4ExpertsLayer l = vllm_mxfp4_layer(32, 2880, 2880, 90, "gpt-oss-20b");
  EXPECT_EQ(l.intermediate_padded, 2880);
  EXPECT_EQ(l.blocks_bytes, 398'131'200u);
  EXPECT_EQ(l.scales_bytes, 24'883'200u);
  EXPECT_EQ(l.retained_scales_bytes, 24'883'200u);
  EXPECT_EQ(l.bias_bytes, 1'105'920u);
  EXPECT_EQ(l.total(), 449'003'520u);
}

// A width that is not a multiple of 64 is padded: I = 100 -> 128; E = 2, H = 64:
//   w13 2 x 256 x 64 / 2 = 16,384 and / 32 = 1,024; w2 2 x 64 x 128 / 2 = 8,192 and / 32 = 512;
//   biases 2 x (256 + 64) x 4 = 2,560; the scales again as loaded, 1,536: total 30,208.
TEST(VllmMxfp4, PadsTheWidthTo64) {
  const Mxfp4ExpertsLayer l = vllm_mxfp4_layer(2, 64, 100, 100, "m");
  EXPECT_EQ(l.intermediate_padded, 128);
  EXPECT_EQ(l.total(), 16'384u + 1'024u + 8'192u + 512u + 2'560u + 1'536u);
}

// Marlin (before 9.0) and FlashInfer (11.0 on) are refused, naming the model.
TEST(VllmMxfp4, OtherBackendsAreRefused) {
  EXPECT_THROW(vllm_mxfp4_layer(32, 2880, 2880, 80, "m"), InputError);
  EXPECT_THROW(vllm_mxfp4_layer(32, 2880, 2880, 120, "m"), InputError);
  try {
    vllm_mxfp4_layer(32, 2880, 2880, 86, "gpt-oss-20b");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gpt-oss-20b"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("Marlin"), std::string::npos);
  }
}

// triton_kernel_moe_forward at vLLM's default step of 8192 tokens on gpt-oss-20b (k = 4): output 8192 x 2880 x 2 =
// 47,185,920 and intermediate_cache 8192 x 4 x 2880 x 2 = 188,743,680: 235,929,600.
TEST(VllmMxfp4, KernelAt8192TokensByHand) {
  EXPECT_EQ(vllm_mxfp4_kernel_bytes(8192, 2880, 4, 2880), 235'929'600u);
}

// The Hub checkpoint's layer (gpt-oss-20b): gate_up_proj_blocks 32 x 5760 x 90 x 16 = 265,420,800, its scales
// 32 x 5760 x 90 = 16,588,800, its bf16 bias 32 x 5760 x 2 = 368,640; down_proj_blocks 32 x 2880 x 90 x 16 =
// 132,710,400, scales 8,294,400, bias 184,320: 423,567,360 (x 24 layers = 10,165,616,640).
TEST(VllmMxfp4, CheckpointLayerByHand) {
  EXPECT_EQ(mxfp4_checkpoint_layer_bytes(32, 2880, 2880), 423'567'360u);
  EXPECT_EQ(24 * mxfp4_checkpoint_layer_bytes(32, 2880, 2880), 10'165'616'640u);
}

// SGLang's triton_kernel (compute capability 9.x) pads to 32, not 64: I = 100 -> 128 as well, but I = 1,440 (gpt-oss at
// tp 2) stays 1,440 (45 x 32) where vLLM's round_up(1440, 64) is 1,472. E = 32, H = 2880, I = 1,440:
//   w13 32 x 2,880 x 2,880 / 2 = 132,710,400 and / 32 = 8,294,400;  w2 32 x 2,880 x 1,440 / 2 = 66,355,200 and / 32 =
//   4,147,200; the scales again as loaded 12,441,600; biases 32 x (2,880 + 2,880) x 4 = 737,280: total 224,686,080.
TEST(SglangMxfp4, TritonKernelPadsTo32ByHand) {
  EXPECT_EQ(sglang_mxfp4_backend(90, "m"), "triton_kernel");
  const Mxfp4ExpertsLayer l = sglang_mxfp4_layer(32, 2880, 1440, 90, "m");
  EXPECT_EQ(l.intermediate_padded, 1440);
  EXPECT_EQ(l.hidden_padded, 2880);
  EXPECT_EQ(l.blocks_bytes, 132'710'400u + 66'355'200u);
  EXPECT_EQ(l.scales_bytes, 8'294'400u + 4'147'200u);
  EXPECT_EQ(l.retained_scales_bytes, 12'441'600u);
  EXPECT_EQ(l.total(), 224'686'080u);
  EXPECT_EQ(vllm_mxfp4_layer(32, 2880, 1440, 90, "m").intermediate_padded, 1472);
  // At gpt-oss-20b's whole width both engines hold the same layer (2,880 is a multiple of 64).
  EXPECT_EQ(sglang_mxfp4_layer(32, 2880, 2880, 90, "m").total(), 449'003'520u);
}

// SGLang's flashinfer_mxfp4 (SM100): I and H to multiples of 256, the shuffled copies replacing every parameter (no
// scales kept twice), three float32 [E] constants. gpt-oss-20b: H_pad = I_pad = 3,072:
//   w13 32 x 6,144 x 3,072 / 2 = 301,989,888 and / 32 = 18,874,368; w2 32 x 3,072 x 3,072 / 2 = 150,994,944 and / 32 =
//   9,437,184; biases 32 x (6,144 + 3,072) x 4 = 1,179,648; constants 3 x 32 x 4 = 384: total 482,476,416.
TEST(SglangMxfp4, FlashinferPadsTo256ByHand) {
  EXPECT_EQ(sglang_mxfp4_backend(100, "m"), "flashinfer_mxfp4");
  const Mxfp4ExpertsLayer l = sglang_mxfp4_layer(32, 2880, 2880, 100, "gpt-oss-20b");
  EXPECT_EQ(l.intermediate_padded, 3072);
  EXPECT_EQ(l.hidden_padded, 3072);
  EXPECT_EQ(l.retained_scales_bytes, 0u);
  EXPECT_EQ(l.constants_bytes, 384u);
  EXPECT_EQ(l.total(), 482'476'416u);
}

// Ampere and consumer Blackwell are refused, naming the model and SGLang.
TEST(SglangMxfp4, OtherGpusAreRefused) {
  for (int capability : {80, 86, 120}) {
    EXPECT_THROW(sglang_mxfp4_backend(capability, "m"), InputError);
    try {
      sglang_mxfp4_layer(32, 2880, 2880, capability, "gpt-oss-20b");
      ADD_FAILURE() << capability;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("gpt-oss-20b"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("serve --engine sglang"), std::string::npos);
    }
  }
}

// A hidden size that MXFP4's blocks of 32 do not divide is refused by both engines, naming the model and the size
// (SGLang's flashinfer_mxfp4 would pad it to 256, but the checkpoint's blocks cannot exist).
TEST(Mxfp4, HiddenNotAMultipleOf32IsRefused) {
  for (int engine = 0; engine < 3; ++engine) {
    try {
      if (engine == 0) vllm_mxfp4_layer(8, 48, 64, 90, "m48");
      if (engine == 1) sglang_mxfp4_layer(8, 48, 64, 90, "m48");
      if (engine == 2) sglang_mxfp4_layer(8, 48, 64, 100, "m48");
      ADD_FAILURE() << engine;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()),
                "serve: m48's MXFP4 experts have a hidden size of 48, not a multiple of MXFP4's blocks of 32");
    }
  }
}

}  // namespace
}  // namespace memplan
