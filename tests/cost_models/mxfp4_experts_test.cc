// MXFP4 experts as vLLM and SGLang hold them (cost_models/mxfp4_experts.h), every term by hand.
#include "cost_models/mxfp4_experts.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

// gpt-oss-20b's sparse layer (E = 32, H = 2880, I = 2880) on an H100 (compute capability 9.0: the Triton backend):
//   I_pad = round_up(2880, 64) = 2880 (45 x 64)
//   as created: w13_weight 32 x 5760 x 2880 / 2 = 265,420,800, w13_weight_scale 32 x 5760 x 2880 / 32 = 16,588,800,
//   w2_weight 32 x 2880 x 2880 / 2 = 132,710,400, w2_weight_scale 32 x 2880 x 2880 / 32 = 8,294,400;
//   w13_bias float32 32 x 5760 x 4 = 737,280, w2_bias float32 32 x 2880 x 4 = 368,640.
//   _swizzle_mxfp4's copies in triton_kernels v3.5's Hopper layouts (mxfp4_experts.h):
//     HopperMXValueLayout (rows to 16, packed bytes to 32): w13 rows 5,760 = 360 x 16, bytes 1,440 = 45 x 32, and
//     w2 rows 2,880 = 180 x 16, bytes 1,440: no padding, 265,420,800 + 132,710,400 = 398,131,200;
//     HopperMXScaleLayout, num_warps 8 (rows to 2 x 8 x 2 x 8 = 256, scales to 2): w13 rows 5,760 -> 5,888 (23 x 256),
//     90 scales (even): 32 x 5,888 x 90 = 16,957,440; w2 rows 2,880 -> 3,072 (12 x 256): 32 x 3,072 x 90 =
//     8,847,360; 25,804,800, of which padding 25,804,800 - 24,883,200 = 921,600.
//   blocks 398,131,200, scales 25,804,800 swizzled and 24,883,200 as loaded (process_weights_after_loading deletes
//   w13_weight and w2_weight only), biases 1,105,920: 449,925,120 a layer
TEST(VllmMxfp4, GptOss20bLayerOnHopperByHand) {
  const Mxfp4ExpertsLayer l = vllm_mxfp4_layer(32, 2880, 2880, 90, "gpt-oss-20b");
  EXPECT_EQ(l.intermediate_padded, 2880);
  EXPECT_EQ(l.blocks_bytes, 398'131'200u);
  EXPECT_EQ(l.scales_bytes, 25'804'800u);
  EXPECT_EQ(l.swizzle_padding_bytes, 921'600u);
  EXPECT_EQ(l.retained_scales_bytes, 24'883'200u);
  EXPECT_EQ(l.bias_bytes, 1'105'920u);
  EXPECT_EQ(l.total(), 449'925'120u);
  // On 10.x the copies are in triton_kernels' Blackwell layouts, not read: sized at the bytes they relay out,
  // 398,131,200 + 24,883,200 twice + 1,105,920 = 449,003,520.
  const Mxfp4ExpertsLayer b = vllm_mxfp4_layer(32, 2880, 2880, 100, "gpt-oss-20b");
  EXPECT_EQ(b.swizzle_padding_bytes, 0u);
  EXPECT_EQ(b.total(), 449'003'520u);
}

// gpt-oss-120b (E = 128, H = I = 2,880, 36 layers) on an H100: the same rows, so the scales' padding is
// 128 x (128 + 192) x 90 = 3,686,400 a layer, 132,710,400 over 36 (vllm#33155's "Model loading took 64.38 GiB" against
// memplan's 64.19 GiB without it, bench/serving.md).
TEST(VllmMxfp4, GptOss120bScalePaddingByHand) {
  EXPECT_EQ(vllm_mxfp4_layer(128, 2880, 2880, 90, "gpt-oss-120b").swizzle_padding_bytes, 3'686'400u);
}

// The tiny gpt_oss of tests/cli/test_serve_mxfp4.py at --tp 2 (E = 8, H = 64, I_p = 32 a rank) on an H100:
//   vLLM, I_pad = round_up(32, 64) = 64: values w13 [8, 128 rows (8 x 16), 32 bytes (1 x 32)] 32,768, w2 [8, 64
//     rows, 32 bytes] 16,384, no padding; scales w13 rows 128 -> 256, 64 / 32 = 2 scales: 8 x 256 x 2 = 4,096 (as
//     loaded 2,048), w2 rows 64 -> 256, 2 scales: 4,096 (as loaded 1,024); the loaded scales 3,072; biases 8 x (128 +
//     64) x 4 = 6,144: 32,768 + 16,384 + 8,192 + 3,072 + 6,144 = 66,560, padding 8,192 - 3,072 = 5,120;
//   SGLang (triton_kernel), I_pad = round_up(32, 32) = 32: values w13 [8, 64 rows, 32 bytes] 16,384, w2 [8, 64 rows,
//     32 / 2 = 16 bytes -> 32] 16,384 (as loaded 8,192); scales w13 rows 64 -> 256, 2 scales: 4,096 (as loaded
//     1,024), w2 rows 64 -> 256, 32 / 32 = 1 scale -> 2: 4,096 (as loaded 512); the loaded scales 1,536; biases
//     8 x (64 + 64) x 4 = 4,096: 32,768 + 8,192 + 1,536 + 4,096 = 46,592, padding 8,192 + 8,192 - 1,536 = 14,848.
TEST(Mxfp4, TinyLayerAtTp2OnHopperByHand) {
  const Mxfp4ExpertsLayer v = vllm_mxfp4_layer(8, 64, 32, 90, "tiny");
  EXPECT_EQ(v.blocks_bytes, 49'152u);
  EXPECT_EQ(v.scales_bytes, 8'192u);
  EXPECT_EQ(v.retained_scales_bytes, 3'072u);
  EXPECT_EQ(v.swizzle_padding_bytes, 5'120u);
  EXPECT_EQ(v.total(), 66'560u);
  const Mxfp4ExpertsLayer s = sglang_mxfp4_layer(8, 64, 32, 90, "tiny");
  EXPECT_EQ(s.blocks_bytes, 32'768u);
  EXPECT_EQ(s.scales_bytes, 8'192u);
  EXPECT_EQ(s.retained_scales_bytes, 1'536u);
  EXPECT_EQ(s.swizzle_padding_bytes, 14'848u);
  EXPECT_EQ(s.total(), 46'592u);
}

// A width that is not a multiple of 64 is padded: I = 100 -> 128; E = 2, H = 64, on compute capability 10.0 (the
// Triton backend's Blackwell layouts, whose copies are sized unpadded):
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

// vLLM's Marlin backend (mxfp4.py create_weights: I_pad = round_up(I, 128), H_pad = round_up(H, 256); the repacked
// blocks and float8_e8m0fnu scales the bytes loaded, bfloat16 biases, an int32 workspace of SMs x 4), gpt-oss-120b's
// layer on an H100 (132 SMs): I_pad 2,944, H_pad 3,072;
//   w13 blocks 128 x 5,888 x 1,536 = 1,157,627,904, w2 blocks 128 x 3,072 x 1,472 = 578,813,952;
//   w13 scales 128 x 5,888 x 96 = 72,351,744, w2 scales 128 x 3,072 x 92 = 36,175,872;
//   biases 128 x (5,888 + 3,072) x 2 = 2,293,760; workspace 132 x 4 x 4 = 2,112.
// Over 36 layers 66,501,552,384 B, 1,712,335,104 more than the Triton layout's 64,789,217,280: what a 0.11.2 log that
// prints "Using Marlin backend" shows over a Triton one (bench/serving.md, finding 9).
TEST(VllmMxfp4, MarlinLayerByHand) {
  const Mxfp4ExpertsLayer l = vllm_mxfp4_marlin_layer(128, 2880, 2880, 132, "gpt-oss-120b");
  EXPECT_EQ(l.intermediate_padded, 2944);
  EXPECT_EQ(l.hidden_padded, 3072);
  EXPECT_EQ(l.blocks_bytes, 1'157'627'904u + 578'813'952u);
  EXPECT_EQ(l.scales_bytes, 72'351'744u + 36'175'872u);
  EXPECT_EQ(l.retained_scales_bytes, 0u);
  EXPECT_EQ(l.bias_bytes, 2'293'760u);
  EXPECT_FALSE(l.bias_float32);
  EXPECT_EQ(l.workspace_bytes, 2'112u);
  EXPECT_EQ(36 * l.total(), 66'501'552'384u);
  EXPECT_EQ(36 * (l.total() - vllm_mxfp4_layer(128, 2880, 2880, 90, "gpt-oss-120b").total()), 1'712'335'104u);
  // The GPU's multiprocessors not known: no workspace counted.
  EXPECT_EQ(vllm_mxfp4_marlin_layer(128, 2880, 2880, 0, "m").workspace_bytes, 0u);
}

// fused_marlin_moe's block_size_m: 8192 x 4 / 128 = 256 tokens an expert, 256 / 64 = 4 >= 0.9 for every block: 64;
// 16 x 4 / 128 = 0.5, 0.5 / 8 < 0.9: 8; 300 x 4 / 128 = 9.375: / 8 = 1.17, / 16 = 0.59: 16.
TEST(VllmMxfp4, MarlinBlockSize) {
  EXPECT_EQ(vllm_marlin_moe_block_size(8192, 4, 128), 64);
  EXPECT_EQ(vllm_marlin_moe_block_size(16, 4, 128), 8);
  EXPECT_EQ(vllm_marlin_moe_block_size(300, 4, 128), 16);
}

// The Marlin kernel at vLLM's 8,192-token step on gpt-oss-120b (k = 4, 128 experts, I_pad 2,944, H_pad 3,072):
// fused_topk 8,192 x 4 x 12 = 393,216; moe_align_block_size at 64: 32,768 + 128 x 63 = 40,832 sorted ids,
// cdiv(40,832, 64) = 638 expert ids and 1: 41,471 x 4 = 165,884; cache13 32,768 x max(5,888, 3,072) x 2 =
// 385,875,968; cache2 32,768 x 2,944 x 2 = 192,937,984; the output and the padded input 8,192 x 3,072 x 2 =
// 50,331,648 each. On an H100 (9.0, 132 SMs) the GEMMs add atomically: no reduction buffer. On an A100 (8.0, 108 SMs)
// each takes a float32 c_tmp of min(n x 40,832, 108 x 4 x 64 x 256 = 7,077,888) elements: 7,077,888 for both
// (n = 5,888 and 3,072), 28,311,552 B.
TEST(VllmMxfp4, MarlinKernelAt8192TokensByHand) {
  const Mxfp4ExpertsLayer layer = vllm_mxfp4_marlin_layer(128, 2880, 2880, 132, "gpt-oss-120b");
  const VllmFusedMoeBytes b = vllm_mxfp4_marlin_kernel_bytes(8192, 4, 128, layer,
                                                              vllm_marlin_moe_reduces(90, DType::BFloat16, true), 132,
                                                              /*modular=*/false);
  EXPECT_EQ(b.block_size_m, 64);
  EXPECT_EQ(b.topk_bytes, 393'216u);
  EXPECT_EQ(b.align_bytes, 165'884u);
  EXPECT_EQ(b.cache13_bytes, 385'875'968u);
  EXPECT_EQ(b.cache2_bytes, 192'937'984u);
  EXPECT_EQ(b.output_bytes, 50'331'648u);
  EXPECT_EQ(b.padded_input_bytes, 50'331'648u);
  EXPECT_EQ(b.reduce_bytes, 0u);
  EXPECT_EQ(b.total(), 680'036'348u);
  const VllmFusedMoeBytes a100 = vllm_mxfp4_marlin_kernel_bytes(8192, 4, 128, layer,
                                                                 vllm_marlin_moe_reduces(80, DType::BFloat16, true), 108,
                                                                 /*modular=*/false);
  EXPECT_EQ(a100.reduce_bytes, 28'311'552u);
  EXPECT_EQ(a100.total(), 680'036'348u + 28'311'552u);
}

// get_mxfp4_backend from 0.12: Marlin below 9.0 whatever is asked but Triton (refused), Triton from 9.0 to 10.x by
// default, Marlin anywhere when asked (VLLM_MXFP4_USE_MARLIN, or no triton_kernels); 11.0 on refused but for Marlin.
TEST(VllmMxfp4, BackendByCapability) {
  const VllmRule r = vllm_rule("0.12");
  EXPECT_EQ(vllm_mxfp4_backend(80, std::nullopt, r, std::nullopt, "m"), VllmMxfp4Backend::Marlin);
  EXPECT_EQ(vllm_mxfp4_backend(89, std::nullopt, r, std::nullopt, "m"), VllmMxfp4Backend::Marlin);
  EXPECT_EQ(vllm_mxfp4_backend(90, std::nullopt, r, std::nullopt, "m"), VllmMxfp4Backend::Triton);
  EXPECT_EQ(vllm_mxfp4_backend(100, std::nullopt, r, false, "m"), VllmMxfp4Backend::Triton);  // --flashinfer no
  EXPECT_EQ(vllm_mxfp4_backend(100, VllmMxfp4Backend::Triton, r, std::nullopt, "m"), VllmMxfp4Backend::Triton);
  EXPECT_EQ(vllm_mxfp4_backend(90, VllmMxfp4Backend::Marlin, r, std::nullopt, "m"), VllmMxfp4Backend::Marlin);
  EXPECT_EQ(vllm_mxfp4_backend(120, VllmMxfp4Backend::Marlin, r, std::nullopt, "m"), VllmMxfp4Backend::Marlin);
  for (const auto& [capability, requested, says] :
       {std::tuple<int, std::optional<VllmMxfp4Backend>, const char*>{80, VllmMxfp4Backend::Triton,
                                                                       "with --mxfp4-backend triton: vLLM runs its Marlin"},
        {120, std::nullopt, "give --mxfp4-backend marlin if vLLM's log says"},
        {94, VllmMxfp4Backend::Marlin, "on compute capability 9.4 (ROCm): vLLM's mxfp4.py pads them"}}) {
    try {
      vllm_mxfp4_backend(capability, requested, r, std::nullopt, "gpt-oss-20b");
      ADD_FAILURE() << capability;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("gpt-oss-20b"), std::string::npos) << e.what();
    }
  }
}

// Before 0.12 no vLLM install ships triton_kernels (v0.11.2's requirements/cuda.txt and Dockerfile have none; the
// build fetches it from v0.12.0), so get_mxfp4_backend's `not has_triton_kernels()` takes Marlin on Hopper, and on
// 11.0 and 12.0 too (no upper bound before 0.12); 10.0 asks for FlashInfer first (refused). Asked for Triton (a
// triton_kernels installed by hand): sized from 0.11.1, whose torch 2.9.0 gives Hopper's swizzled layouts.
TEST(VllmMxfp4, BackendBefore012) {
  const VllmRule v110 = vllm_rule("0.11.0"), v112 = vllm_rule("0.11.2");
  EXPECT_FALSE(v112.bundles_triton_kernels);
  EXPECT_TRUE(vllm_rule("0.12.0").bundles_triton_kernels);
  EXPECT_FALSE(v110.mxfp4_hopper_swizzle);
  EXPECT_TRUE(v112.mxfp4_hopper_swizzle);
  for (int capability : {90, 103, 120}) {
    EXPECT_EQ(vllm_mxfp4_backend(capability, std::nullopt, v110, std::nullopt, "m"), VllmMxfp4Backend::Marlin)
        << capability;
    EXPECT_EQ(vllm_mxfp4_backend(capability, std::nullopt, v112, std::nullopt, "m"), VllmMxfp4Backend::Marlin)
        << capability;
  }
  EXPECT_EQ(vllm_mxfp4_backend(90, VllmMxfp4Backend::Triton, v112, std::nullopt, "m"), VllmMxfp4Backend::Triton);
  // --flashinfer no on 10.0: no FlashInfer, no triton_kernels: Marlin.
  EXPECT_EQ(vllm_mxfp4_backend(100, std::nullopt, v110, false, "m"), VllmMxfp4Backend::Marlin);
  for (const auto& [capability, requested, says] :
       {std::tuple<int, std::optional<VllmMxfp4Backend>, const char*>{
            100, std::nullopt, "compute capability 10.0 before vLLM 0.12: vLLM takes FlashInfer's MXFP4 layout"},
        {90, VllmMxfp4Backend::Triton, "before vLLM 0.11.1: its pinned torch 2.8.0"}}) {
    try {
      vllm_mxfp4_backend(capability, requested, v110, std::nullopt, "gpt-oss-20b");
      ADD_FAILURE() << capability;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

// get_mxfp4_backend's SM100 FlashInfer branch comes before every other (v0.11.0 to v0.18.0), on 10.0, and from 0.13
// on the 10.x family (is_device_capability_family(100)); Hopper's FlashInfer backend needs an opt-in environment
// variable, so 9.0 keeps its backend. Its layout is read from 0.12: FlashInfer there under --flashinfer yes or auto
// (the larger layout, where an install without it would run Triton's), refused before.
TEST(VllmMxfp4, FlashInferTakesSm100First) {
  using B = VllmMxfp4Backend;
  for (const char* version : {"0.12", "0.14.0", "0.18"}) {
    const VllmRule r = vllm_rule(version);
    for (std::optional<bool> usable : {std::optional<bool>(true), std::optional<bool>()}) {
      EXPECT_EQ(vllm_mxfp4_backend(100, std::nullopt, r, usable, "m"), B::FlashInfer) << version;
      EXPECT_EQ(vllm_mxfp4_backend(100, B::FlashInfer, r, usable, "m"), B::FlashInfer) << version;
    }
    EXPECT_THROW(vllm_mxfp4_backend(100, B::Marlin, r, true, "m"), InputError) << version;
    EXPECT_THROW(vllm_mxfp4_backend(100, B::Triton, r, true, "m"), InputError) << version;
    EXPECT_EQ(vllm_mxfp4_backend(100, B::Triton, r, std::nullopt, "m"), B::Triton) << version;
    EXPECT_EQ(vllm_mxfp4_backend(100, std::nullopt, r, false, "m"), B::Triton) << version;
    EXPECT_EQ(vllm_mxfp4_backend(90, std::nullopt, r, true, "m"), B::Triton) << version;
    EXPECT_THROW(vllm_mxfp4_backend(90, B::FlashInfer, r, true, "m"), InputError) << version;
    EXPECT_THROW(vllm_mxfp4_backend(100, B::FlashInfer, r, false, "m"), InputError) << version;
  }
  // 10.3: Triton at 0.12 (v0.12.0 tests 10.0 alone), FlashInfer from 0.13.
  EXPECT_EQ(vllm_mxfp4_backend(103, std::nullopt, vllm_rule("0.12"), true, "m"), B::Triton);
  EXPECT_EQ(vllm_mxfp4_backend(103, std::nullopt, vllm_rule("0.13"), std::nullopt, "m"), B::FlashInfer);
  // Before 0.12 the FlashInfer layout is not read: refused on 10.0 unless FlashInfer is stated absent.
  const VllmRule v110 = vllm_rule("0.11.0");
  EXPECT_THROW(vllm_mxfp4_backend(100, std::nullopt, v110, true, "m"), InputError);
  EXPECT_THROW(vllm_mxfp4_backend(100, B::Marlin, v110, true, "m"), InputError);
  EXPECT_THROW(vllm_mxfp4_backend(100, B::FlashInfer, v110, true, "m"), InputError);
  EXPECT_EQ(vllm_mxfp4_backend(90, std::nullopt, v110, true, "m"), B::Marlin);
}

// vLLM's SM100_FI_MXFP4_BF16 on gpt-oss-120b (E 128, H = I = 2880, both padded to 3072), by hand from mxfp4.py's
// create_weights and process_weights_after_loading (v0.12.0 to v0.18.0): w13 128 x 6144 x 1536 = 1,207,959,552 and
// w2 128 x 3072 x 1536 = 603,979,776 blocks; scales 128 x 6144 x 96 + 128 x 3072 x 96 = 113,246,208; float32
// biases 128 x (6144 + 3072) x 4 = 4,718,592; gemm1 constants 128 x 12 = 1,536: 1,929,905,664 B (SGLang's
// flashinfer_mxfp4 alike); vLLM's permute indices (3 x 6144 + 3 x 3072) x 8 = 221,184 more.
TEST(VllmMxfp4, FlashInferLayerByHand) {
  const Mxfp4ExpertsLayer l = vllm_mxfp4_flashinfer_layer(128, 2880, 2880, "gpt-oss-120b");
  EXPECT_EQ(l.blocks_bytes, 1'811'939'328u);
  EXPECT_EQ(l.scales_bytes, 113'246'208u);
  EXPECT_EQ(l.retained_scales_bytes, 0u);
  EXPECT_EQ(l.bias_bytes, 4'718'592u);
  EXPECT_EQ(l.constants_bytes, 1'536u);
  EXPECT_EQ(l.index_cache_bytes, 221'184u);
  EXPECT_EQ(l.total(), 1'929'905'664u + 221'184u);
  EXPECT_EQ(flashinfer_trtllm_mxfp4_layer(128, 2880, 2880, "m").total(), 1'929'905'664u);
}

// One trtllm_fp4_block_scale_moe call of gpt-oss-120b at 8,192 tokens (k 4, E 128, H_pad = I_pad = 3072), by hand
// from FlashInfer 0.5.3 to 0.6.6 (core.py and the launcher): T·k = 32,768; ceil(32,768 / 128) = 256, so t0 = 64 and
// the fallback tile 32; C = 128 + (32,768 - 128) / 32 = 1,148, P = 36,736. gemm1 and gemm2 outputs 36,736 x 3072 x 2
// = 225,705,984 each; the output and vLLM's padded input 8192 x 3072 x 2 = 50,331,648 each; topk_ids and
// expert_weights 32,768 x 6 = 196,608; routing (128 + 1 + 32,768 + 36,736 + 512 + 2 x 1,148 + 1) x 4 = 289,768.
// Total 552,561,640. At 16,384 tokens: C = 2,172, P = 69,504: 2 x 427,032,576 + 2 x 100,663,296 + 393,216 +
// (128 + 1 + 65,536 + 69,504 + 512 + 4,344 + 1) x 4 = 560,104: 1,056,345,064. gpt-oss-20b (E 32) at 8,192: t0 = 64,
// tile 32, C = 32 + 32,736 / 32 = 1,055, P = 33,760: 2 x 207,421,440 + 2 x 50,331,648 + 196,608 +
// (32 + 1 + 32,768 + 33,760 + 512 + 2,110 + 1) x 4 = 276,736: 515,979,520.
TEST(VllmMxfp4, FlashInferKernelByHand) {
  const Mxfp4ExpertsLayer big = vllm_mxfp4_flashinfer_layer(128, 2880, 2880, "m");
  const VllmFusedMoeBytes b = vllm_mxfp4_flashinfer_kernel_bytes(8192, 4, 128, big);
  EXPECT_EQ(b.block_size_m, 32);
  EXPECT_EQ(b.cache13_bytes, 225'705'984u);
  EXPECT_EQ(b.cache2_bytes, 225'705'984u);
  EXPECT_EQ(b.align_bytes, 289'768u);
  EXPECT_EQ(b.total(), 552'561'640u);
  EXPECT_EQ(vllm_mxfp4_flashinfer_kernel_bytes(16384, 4, 128, big).total(), 1'056'345'064u);
  const Mxfp4ExpertsLayer small = vllm_mxfp4_flashinfer_layer(32, 2880, 2880, "m");
  EXPECT_EQ(vllm_mxfp4_flashinfer_kernel_bytes(8192, 4, 32, small).total(), 515'979'520u);
  // A short step: T·k = 64 over 128 experts: t0 = 8, tile 8; C = 64, P = 512; M = max(512, ceil(65536 / 3072) = 22).
  EXPECT_EQ(vllm_mxfp4_flashinfer_kernel_bytes(16, 4, 128, big).block_size_m, 8);
  EXPECT_EQ(vllm_mxfp4_flashinfer_kernel_bytes(16, 4, 128, big).cache13_bytes, 512u * 3072 * 2);
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
// tp 2) stays 1,440 (45 x 32) where vLLM's round_up(1440, 64) is 1,472. E = 32, H = 2880, I = 1,440, the copies in
// the Hopper layouts:
//   w13 values rows 2,880 (180 x 16), 1,440 bytes (45 x 32): 32 x 2,880 x 1,440 = 132,710,400; its scales rows 2,880
//   -> 3,072, 90 scales: 32 x 3,072 x 90 = 8,847,360;
//   w2 values rows 2,880, 1,440 / 2 = 720 bytes -> 736 (23 x 32): 32 x 2,880 x 736 = 67,829,760 (unpadded
//   66,355,200); its scales rows 2,880 -> 3,072, 1,440 / 32 = 45 scales -> 46: 32 x 3,072 x 46 = 4,521,984;
//   the scales as loaded 32 x 2,880 x (90 + 45) = 12,441,600; biases 32 x (2,880 + 2,880) x 4 = 737,280:
//   200,540,160 + 13,369,344 + 12,441,600 + 737,280 = 227,088,384.
TEST(SglangMxfp4, TritonKernelPadsTo32ByHand) {
  EXPECT_EQ(sglang_mxfp4_backend(90, "m"), "triton_kernel");
  const Mxfp4ExpertsLayer l = sglang_mxfp4_layer(32, 2880, 1440, 90, "m");
  EXPECT_EQ(l.intermediate_padded, 1440);
  EXPECT_EQ(l.hidden_padded, 2880);
  EXPECT_EQ(l.blocks_bytes, 132'710'400u + 67'829'760u);
  EXPECT_EQ(l.scales_bytes, 8'847'360u + 4'521'984u);
  EXPECT_EQ(l.retained_scales_bytes, 12'441'600u);
  EXPECT_EQ(l.total(), 227'088'384u);
  EXPECT_EQ(vllm_mxfp4_layer(32, 2880, 1440, 90, "m").intermediate_padded, 1472);
  // At gpt-oss-20b's whole width both engines hold the same layer (2,880 is a multiple of 64; the test above).
  EXPECT_EQ(sglang_mxfp4_layer(32, 2880, 2880, 90, "m").total(), 449'925'120u);
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
