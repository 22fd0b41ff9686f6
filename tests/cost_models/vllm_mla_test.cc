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

// cuda.py check_and_update_config: CUTLASS MLA on 10.0 (multiples of 128 kept), FlashMLA on 9.x (multiples of 64
// kept), Triton MLA below (unchanged).
TEST(VllmMla, BlockSizeByBackend) {
  const VllmRule r = vllm_rule("0.12");
  EXPECT_EQ(vllm_mla_block_size(16, 90, r), 64);
  EXPECT_EQ(vllm_mla_block_size(128, 90, r), 128);
  EXPECT_EQ(vllm_mla_block_size(16, 100, r), 128);
  EXPECT_EQ(vllm_mla_block_size(256, 100, r), 256);
  EXPECT_EQ(vllm_mla_block_size(16, 80, r), 16);
  EXPECT_EQ(vllm_mla_backend(90, r), "FLASHMLA");
  EXPECT_EQ(vllm_mla_backend(100, r), "CUTLASS_MLA");
  EXPECT_EQ(vllm_mla_backend(89, r), "TRITON_MLA");
}

// By release: v0.11.0 forces the block when it is not the backend's own (`!= 64`, `!= 128`); v0.12.0 keeps
// multiples; v0.13.0 sends the 10.x family (10.3, B300) to CUTLASS MLA, v0.12.0 10.0 alone.
TEST(VllmMla, BlockAndBackendByRelease) {
  const VllmRule v11 = vllm_rule("0.11"), v12 = vllm_rule("0.12"), v13 = vllm_rule("0.13");
  EXPECT_EQ(vllm_mla_block_size(128, 90, v11), 64);
  EXPECT_EQ(vllm_mla_block_size(256, 100, v11), 128);
  EXPECT_EQ(vllm_mla_block_size(64, 90, v11), 64);
  EXPECT_EQ(vllm_mla_block_size(128, 90, v12), 128);
  EXPECT_EQ(vllm_mla_backend(103, v12), "TRITON_MLA");
  EXPECT_EQ(vllm_mla_backend(103, v13), "CUTLASS_MLA");
  EXPECT_EQ(vllm_mla_block_size(16, 103, v13), 128);
}

}  // namespace
}  // namespace memplan
