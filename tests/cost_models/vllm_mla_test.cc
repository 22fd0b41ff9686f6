// vLLM's multi-head latent attention rules (cost_models/vllm_mla.h), every term by hand.
#include "cost_models/vllm_mla.h"

#include <gtest/gtest.h>

namespace memplan {
namespace {

// DeepSeek-V3 (61 layers, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, 128 heads):
//   a token: 61 x (512 + 64) x 2 = 70,272 B in bf16, 61 x 576 x 1 = 35,136 B in fp8.
//   vLLM's defaults on an H200: max_model_len 163,840, max_num_seqs 1024, block 64 (FlashMLA):
//   W = max(min(max(8 x 163,840 = 1,310,720, 4 x 1024 x 64 = 262,144), 65,536), 1024 x 64 = 65,536) = 65,536;
//   simulated 65,536 x 128 x (128 + 128) x 2 = 4,294,967,296; workspace 65,536 x 576 x 2 = 75,497,472.
TEST(VllmMla, DeepSeekV3ByHand) {
  const VllmMlaShape s{512, 64, 128, 128, 128, 61};
  EXPECT_EQ(vllm_mla_kv_bytes_per_token(s, 2), 70272u);
  EXPECT_EQ(vllm_mla_kv_bytes_per_token(s, 1), 35136u);
  const VllmMlaProfile p = vllm_mla_profile(s, 163840, 1024, 64, DType::BFloat16);
  EXPECT_EQ(p.workspace_tokens, 65536);
  EXPECT_EQ(p.simulated_bytes, 4294967296u);
  EXPECT_EQ(p.workspace_bytes, 75497472u);
}

// The three terms of determine_chunked_prefill_workspace_size:
//   8 x L wins: L 1000, S 4, B 16 -> max(8000, 256) = 8000 (below 65,536; above S x B = 64);
//   4 x S x B wins: L 100, S 64, B 64 -> max(800, 16,384) = 16,384;
//   the 64 K cap: L 163,840 -> 65,536; the floor S x B: S 2048, B 64 -> min(max(8 x 1000, 524,288), 65,536) =
//   65,536 < 131,072 = S x B -> 131,072.
TEST(VllmMla, WorkspaceTokensEachTerm) {
  EXPECT_EQ(vllm_mla_workspace_tokens(1000, 4, 16), 8000);
  EXPECT_EQ(vllm_mla_workspace_tokens(100, 64, 64), 16384);
  EXPECT_EQ(vllm_mla_workspace_tokens(163840, 256, 64), 65536);
  EXPECT_EQ(vllm_mla_workspace_tokens(1000, 2048, 64), 131072);
}

// The backend, its block and the modules' workspaces for DeepSeek-V3's dimensions at --block-size `block` (given or
// vLLM's default 16).
VllmMlaChoice choice(const char* version, int capability, int64_t block = 16, bool given = false, bool fp8 = false,
                     bool flashinfer = true, VllmMlaShape shape = {512, 64, 128, 128, 128, 61}) {
  return vllm_mla_choice(block, given, fp8 ? "fp8" : "auto", capability, vllm_rule(version), flashinfer, shape);
}

// cuda.py check_and_update_config at v0.12.0: CUTLASS MLA on 10.0 (multiples of 128 kept), FlashMLA's block on 9.x
// (multiples of 64 kept), Triton MLA below (unchanged).
TEST(VllmMla, BlockSizeByBackend) {
  EXPECT_EQ(choice("0.12", 90).block_size, 64);
  EXPECT_EQ(choice("0.12", 90, 128, true).block_size, 128);
  EXPECT_EQ(choice("0.12", 100).block_size, 128);
  EXPECT_EQ(choice("0.12", 100, 256, true).block_size, 256);
  EXPECT_EQ(choice("0.12", 80).block_size, 16);
  EXPECT_EQ(choice("0.12", 100).backend, "CUTLASS_MLA");
  EXPECT_EQ(choice("0.12", 89).backend, "TRITON_MLA");
}

// By release: v0.11.0 forces the block when it is not the backend's own (`!= 64`, `!= 128`) and runs FlashMLA on
// 9.x; from 0.11.1 FlashAttention MLA comes first (PR #27363, in v0.11.2), the block still FlashMLA's to 0.16;
// v0.12.0 keeps multiples; v0.13.0 sends the 10.x family (10.3, B300) to CUTLASS MLA, v0.12.0 10.0 alone.
TEST(VllmMla, BlockAndBackendByRelease) {
  EXPECT_EQ(choice("0.11", 90, 128, true).block_size, 64);
  EXPECT_EQ(choice("0.11", 100, 256, true).block_size, 128);
  EXPECT_EQ(choice("0.11", 90, 64, true).block_size, 64);
  EXPECT_EQ(choice("0.11", 90).backend, "FLASHMLA");
  EXPECT_EQ(choice("0.11.2", 90).backend, "FLASH_ATTN_MLA");
  EXPECT_EQ(choice("0.11.2", 90).block_size, 64);
  EXPECT_EQ(choice("0.16.0", 90, 16, false, true).backend, "FLASHMLA");  // FlashAttention MLA refuses fp8
  EXPECT_EQ(choice("0.12", 103).backend, "TRITON_MLA");
  EXPECT_EQ(choice("0.13", 103).backend, "CUTLASS_MLA");
  EXPECT_EQ(choice("0.13", 103).block_size, 128);
}

// From PR #35122 (v0.17.1rc0) nothing forces the block: FlashAttention MLA on 9.x takes any multiple of 16, its
// preferred 16 when none is given; an fp8 cache runs FlashMLA at its preferred 64, and a given block that is not a
// multiple of 64 has no backend at 0.17.1 and runs Triton MLA from 0.17.2 (PR #34597); below 9.0 Triton MLA takes
// multiples of 16, fp8 from 0.17.2 (docs/research/vllm-mla-hopper-ampere.md section 2).
TEST(VllmMla, HopperBlockFrom0171) {
  EXPECT_EQ(choice("0.17.0", 90).block_size, 64);
  EXPECT_EQ(choice("0.17.1", 90).block_size, 16);
  EXPECT_EQ(choice("0.17.1", 90).backend, "FLASH_ATTN_MLA");
  EXPECT_EQ(choice("0.18.0", 90, 32, true).block_size, 32);
  EXPECT_NE(choice("0.18.0", 90, 8, true).refused, "");
  const VllmMlaChoice fp8 = choice("0.17.1", 90, 16, false, true);
  EXPECT_EQ(fp8.backend, "FLASHMLA");
  EXPECT_EQ(fp8.block_size, 64);
  EXPECT_EQ(fp8.refused, "");
  EXPECT_NE(choice("0.17.1", 90, 16, true, true).refused, "");
  const VllmMlaChoice triton = choice("0.17.2", 90, 16, true, true);
  EXPECT_EQ(triton.backend, "TRITON_MLA");
  EXPECT_EQ(triton.block_size, 16);
  EXPECT_EQ(triton.refused, "");
  EXPECT_EQ(choice("0.18.0", 90, 128, true, true).backend, "FLASHMLA");
  EXPECT_EQ(choice("0.18.0", 90, 128, true, true).block_size, 128);
  EXPECT_NE(choice("0.17.1", 80, 16, false, true).refused, "");
  EXPECT_EQ(choice("0.17.2", 80, 16, false, true).refused, "");
  EXPECT_NE(choice("0.12", 80, 16, false, true).refused, "");
  EXPECT_NE(choice("0.17.1", 80, 24, true).refused, "");
  EXPECT_EQ(choice("0.16.0", 80, 24, true).refused, "");
}

// Module-level workspaces allocated when a backend's module is imported during the model's construction: CUTLASS
// MLA's SM100Workspace(128 MiB) on 10.x at every release; from 0.11.1 on 9.x and below FlashInfer MLA's
// torch.zeros(128 MiB), get_valid_backends importing every listed backend, none where FlashInfer does not import;
// v0.11.0's if/else chain returns before FlashInfer MLA on 9.x and 8.x.
TEST(VllmMla, ModuleWorkspacesAtImport) {
  EXPECT_EQ(choice("0.11", 100).module_workspace_bytes, 134217728u);
  EXPECT_EQ(choice("0.14.0", 100).module_workspace_bytes, 134217728u);
  EXPECT_EQ(choice("0.16.0", 100).module_workspace, "flashinfer_mla.py g_fi_workspace");  // preselected alone
  EXPECT_EQ(choice("0.16.0", 100).module_workspace_bytes, 134217728u);
  EXPECT_EQ(choice("0.18.0", 100).module_workspace_bytes, 2 * 134217728u);  // every listed module imported
  EXPECT_EQ(choice("0.18.0", 100, 16, false, false, false).module_workspace_bytes, 134217728u);
  EXPECT_EQ(choice("0.11", 90).module_workspace_bytes, 0u);
  EXPECT_EQ(choice("0.11", 80).module_workspace_bytes, 0u);
  EXPECT_EQ(choice("0.11.2", 90).module_workspace_bytes, 134217728u);
  EXPECT_EQ(choice("0.18.0", 80).module_workspace_bytes, 134217728u);
  EXPECT_EQ(choice("0.18.0", 90, 16, false, false, false).module_workspace_bytes, 0u);
}

// FlashInfer MLA on 10.x for qk_nope_head_dim 128 (PR #32615, 0.15 on; docs/research/vllm-flashinfer-mla-blackwell.md
// section 1): at 0.16 preselected, the block forced to 64 unless 32 or a multiple of 64; from 0.17.1 its preferred 32,
// a given multiple of 32 kept, a given 16 to Triton MLA. Another qk_nope_head_dim keeps CUTLASS MLA (64 too from 0.18
// takes FlashInfer); the preselected backend refuses another head size and an fp8_e5m2 cache.
TEST(VllmMla, FlashInferOnBlackwell) {
  EXPECT_EQ(choice("0.14.0", 100).backend, "CUTLASS_MLA");
  for (const char* v : {"0.15.0", "0.16.0"}) {
    EXPECT_EQ(choice(v, 100).backend, "FLASHINFER_MLA") << v;
    EXPECT_EQ(choice(v, 100).block_size, 64) << v;
    EXPECT_EQ(choice(v, 103, 32, true).block_size, 32) << v;
    EXPECT_EQ(choice(v, 100, 16, true).block_size, 64) << v;
    EXPECT_EQ(choice(v, 100, 128, true).block_size, 128) << v;
    EXPECT_EQ(choice(v, 100, 16, false, true).refused, "") << v;  // fp8 (e4m3) taken
  }
  EXPECT_EQ(choice("0.18.0", 100).backend, "FLASHINFER_MLA");
  EXPECT_EQ(choice("0.18.0", 100).block_size, 32);
  EXPECT_EQ(choice("0.18.0", 100, 64, true).block_size, 64);
  EXPECT_EQ(choice("0.18.0", 100, 96, true).block_size, 96);
  const VllmMlaChoice triton = choice("0.18.0", 100, 16, true);
  EXPECT_EQ(triton.backend, "TRITON_MLA");
  EXPECT_EQ(triton.block_size, 16);
  EXPECT_EQ(choice("0.18.0", 100, 16, false, false, false).backend, "CUTLASS_MLA");  // FlashInfer does not import
  const VllmMlaShape nope64{512, 64, 64, 128, 128, 61}, small{8, 2, 128, 4, 2, 2};
  EXPECT_EQ(choice("0.16.0", 100, 16, false, false, true, nope64).backend, "CUTLASS_MLA");
  EXPECT_EQ(choice("0.18.0", 100, 16, false, false, true, nope64).backend, "FLASHINFER_MLA");
  EXPECT_NE(choice("0.16.0", 100, 16, false, false, true, small).refused, "");
  EXPECT_EQ(choice("0.18.0", 100, 16, false, false, true, small).backend, "CUTLASS_MLA");
  EXPECT_NE(vllm_mla_choice(16, false, "fp8_e5m2", 100, vllm_rule("0.16.0"), true, VllmMlaShape{512, 64, 128, 128, 128, 61})
                .refused, "");
}

}  // namespace
}  // namespace memplan
