// vLLM's V1 start-up rule (cost_models/vllm_engine.h), by hand, term by term.
#include "cost_models/vllm_engine.h"
#include "cost_models/vllm_weights.h"

#include <gtest/gtest.h>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

TEST(VllmEngine, AvailableIsRequestedLessWeightsPeakAndNonTorch) {
  // 80 GiB x 0.9 = 77,309,411,328 B exactly; 16 GiB of weights, a peak of 18 GiB allocated (2 GiB above the
  // weights), 1 GiB outside PyTorch: 77,309,411,328 - 16 GiB - 2 GiB - 1 GiB = 56,908,316,672 B.
  const VllmMemory m = vllm_available_memory(uint64_t{80} << 30, 0.9, uint64_t{16} << 30, uint64_t{18} << 30,
                                             uint64_t{1} << 30);
  EXPECT_EQ(m.requested, 77309411328u);
  EXPECT_EQ(m.activation_peak, uint64_t{2} << 30);
  EXPECT_EQ(m.available, 56908316672);
}

TEST(VllmEngine, RequestedIsTruncatedAsVllmsIntOfAFloat) {
  // 64 MiB x 0.9 = 60,397,977.6: int(60,397,977.6 - 1000) = 60,396,977.
  const VllmMemory m = vllm_available_memory(uint64_t{64} << 20, 0.9, 1000, 1000, 0);
  EXPECT_EQ(m.requested, 60397977u);
  EXPECT_EQ(m.available, 60396977);
}

TEST(VllmEngine, BlocksTokensAndConcurrency) {
  // 128 B a token over every layer, blocks of 16: 2048 B a block. 26,803,609 B hold 13,087 blocks (1,433 B left),
  // 209,392 tokens; a 64-token request takes 4 blocks: 13,087 / 4 = 3,271.75 requests.
  const VllmKvCapacity c = vllm_kv_capacity(26803609, PagedKvCache{16, 128}, 64);
  EXPECT_EQ(c.num_blocks, 13087);
  EXPECT_EQ(c.tokens, 209392);
  EXPECT_EQ(c.blocks_per_request, 4);
  EXPECT_DOUBLE_EQ(c.max_concurrency, 3271.75);
  EXPECT_TRUE(c.starts);
  // One byte less than 13,087 blocks: one block fewer.
  EXPECT_EQ(vllm_kv_capacity(13087 * 2048 - 1, PagedKvCache{16, 128}, 64).num_blocks, 13086);
}

TEST(VllmEngine, ARequestThatDoesNotFitRefusesToStartAndNamesTheLongestThatWould) {
  // 10 blocks of 16 tokens hold one request of at most 160 tokens; max_model_len 200 takes 13 blocks.
  const VllmKvCapacity c = vllm_kv_capacity(10 * 2048 + 5, PagedKvCache{16, 128}, 200);
  EXPECT_FALSE(c.starts);
  EXPECT_EQ(c.estimated_max_model_len, 160);
  const VllmKvCapacity none = vllm_kv_capacity(-5, PagedKvCache{16, 128}, 200);
  EXPECT_FALSE(none.starts);
  EXPECT_EQ(none.num_blocks, 0);
  EXPECT_EQ(none.refusal, "No available memory for the cache blocks");
}

TEST(VllmEngine, ASlidingWindowBoundsTheBlocksOfARequest) {
  // SlidingWindowSpec.max_memory_usage_bytes: window 4096, steps of 8192 tokens, max_model_len 32768, blocks of 16:
  // cdiv(min(4095 + 8192, 32768), 16) + 1 = cdiv(12287, 16) + 1 = 768 + 1 = 769 blocks, not cdiv(32768, 16) = 2048.
  const PagedKvCache cache{16, 128};
  EXPECT_EQ(vllm_blocks_per_request(cache, 32768, VllmSlidingWindow{4096, 8192}), 769);
  EXPECT_EQ(vllm_blocks_per_request(cache, 32768), 2048);
  // A max_model_len inside the window: min() takes it, and the extra block stays: cdiv(100, 16) + 1 = 8.
  EXPECT_EQ(vllm_blocks_per_request(cache, 100, VllmSlidingWindow{4096, 8192}), 8);
  // 1,000 blocks (2,048 B each) and one byte: 1,000 blocks, 16,000 tokens as full attention logs them, and
  // 1,000 / 769 requests.
  const VllmKvCapacity c = vllm_kv_capacity(1000 * 2048 + 1, cache, 32768, VllmSlidingWindow{4096, 8192});
  EXPECT_EQ(c.num_blocks, 1000);
  EXPECT_EQ(c.tokens, 16000);
  EXPECT_EQ(c.blocks_per_request, 769);
  EXPECT_DOUBLE_EQ(c.max_concurrency, 1000.0 / 769.0);
  EXPECT_TRUE(c.starts);
  // 768 blocks: no request of 32768 tokens fits; the longest that does holds 767 blocks and the extra one:
  // 767 x 16 = 12,272 tokens (cdiv(12272, 16) + 1 = 768; 12,273 would need 769).
  const VllmKvCapacity no = vllm_kv_capacity(768 * 2048, cache, 32768, VllmSlidingWindow{4096, 8192});
  EXPECT_FALSE(no.starts);
  EXPECT_EQ(no.estimated_max_model_len, 12272);
  // One block: not even one token's request (it holds 2 blocks).
  EXPECT_EQ(vllm_kv_capacity(2048, cache, 32768, VllmSlidingWindow{4096, 8192}).estimated_max_model_len, 0);
}

TEST(VllmEngine, SamplerWarmUpByHand) {
  // bf16 (d = 2), 4 rows, vocab 10 (logits 10 wide), hidden 3: (2 + 26) x 4 x 10 + 2 x 2 x 4 x 3 = 1120 + 48.
  EXPECT_EQ(vllm_sampler_peak_bytes(4, 10, 10, 3, DType::BFloat16), 1168u);
  // float32 (d = 4): (4 + 26) x 4 x 10 + 2 x 4 x 4 x 3 = 1200 + 96.
  EXPECT_EQ(vllm_sampler_peak_bytes(4, 10, 10, 3, DType::Float32), 1296u);
  // The head's logits 64 wide (vocab 10 padded), the sampler's copies 10: 2 x 4 x 64 + 26 x 4 x 10 + 48.
  EXPECT_EQ(vllm_sampler_peak_bytes(4, 10, 64, 3, DType::BFloat16), 512u + 1040u + 48u);
}

TEST(VllmEngine, VocabularyPaddedToAMultipleOf64) {
  // pad_vocab_size: ((v + 63) // 64) x 64.
  EXPECT_EQ(vllm_padded_vocab(16), 64);
  EXPECT_EQ(vllm_padded_vocab(64), 64);
  EXPECT_EQ(vllm_padded_vocab(65), 128);
  EXPECT_EQ(vllm_padded_vocab(128256), 128256);  // Llama 3: 2,004 x 64
  EXPECT_EQ(vllm_padded_vocab(151936), 151936);  // Qwen2.5: 2,374 x 64
  EXPECT_EQ(vllm_padded_vocab(32001), 32064);
}

TEST(VllmEngine, TheLargerOfForwardAndSamplerIsThePeak) {
  EXPECT_EQ(vllm_profile_peak_allocated(5000, 1000, 200, 300), 5000u);  // the forward
  EXPECT_EQ(vllm_profile_peak_allocated(1400, 1000, 200, 300), 1500u);  // kept + hidden + sampler
}

TEST(VllmEngine, ProfileRequestsAndStepDefaults) {
  // An H100 (85,045,477,376 B, over 70 GiB): 8192 tokens, 1024 requests; an A100 80GB: 2048 and 256; a 24 GiB
  // card: 2048 and 256.
  EXPECT_EQ(vllm_step_defaults(85045477376u, "H100-80GB").max_num_batched_tokens, 8192);
  EXPECT_EQ(vllm_step_defaults(85045477376u, "H100-80GB").max_num_seqs, 1024);
  EXPECT_EQ(vllm_step_defaults(uint64_t{81034} << 20, "A100-80GB").max_num_batched_tokens, 2048);
  EXPECT_EQ(vllm_step_defaults(uint64_t{24} << 30, "").max_num_seqs, 256);
  VllmEngineSettings s;
  s.max_num_batched_tokens = 100;
  s.max_num_seqs = 256;
  EXPECT_EQ(vllm_profile_requests(s), 100);  // at most one request per token
}

TEST(VllmEngine, KvHeadsPerRankShardOrReplicate) {
  EXPECT_EQ(vllm_kv_heads_per_rank(8, 1, "m"), 8);
  EXPECT_EQ(vllm_kv_heads_per_rank(8, 2, "m"), 4);
  EXPECT_EQ(vllm_kv_heads_per_rank(8, 16, "m"), 1);  // replicated on 2 ranks each
  try {
    vllm_kv_heads_per_rank(8, 3, "m.onnx");
    ADD_FAILURE() << "tp 3 over 8 KV heads";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--tp 3 does not divide the 8 KV heads of m.onnx (vLLM shards KV heads evenly over the "
                           "tensor-parallel ranks)");
  }
  try {
    vllm_kv_heads_per_rank(2, 3, "m.onnx");
    ADD_FAILURE() << "tp 3 over 2 KV heads";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--tp 3 is not a multiple of the 2 KV heads of m.onnx (vLLM replicates each KV head over "
                           "tp / heads ranks)");
  }
}

TEST(VllmEngine, DtypeAutoDowncastsFloat32ToThePlatformsFirstType) {
  // sm80 and up: bfloat16 first; below: float16 first (CudaPlatformBase.supported_dtypes).
  EXPECT_EQ(vllm_auto_dtype(DType::Float32, 9, "llama"), DType::BFloat16);
  EXPECT_EQ(vllm_auto_dtype(DType::Float32, 7, "llama"), DType::Float16);
  // A stored type the GPU supports is kept; bfloat16 on a Turing card falls back to float16.
  EXPECT_EQ(vllm_auto_dtype(DType::Float16, 9, "llama"), DType::Float16);
  EXPECT_EQ(vllm_auto_dtype(DType::BFloat16, 7, "llama"), DType::Float16);
  // Gemma is never served in float16: on a Turing card, float32.
  EXPECT_EQ(vllm_auto_dtype(DType::BFloat16, 7, "gemma2"), DType::Float32);
  EXPECT_EQ(vllm_auto_dtype(DType::Float32, 9, "gemma3_text"), DType::BFloat16);
}

TEST(VllmEngine, EngineVersionsModelledAndRefused) {
  EXPECT_EQ(vllm_version("0.11", false), VllmVersion::V0_11);
  EXPECT_EQ(vllm_version("0.11.2", false), VllmVersion::V0_11);
  EXPECT_EQ(vllm_version("0.20.1", false), VllmVersion::V0_11);
  EXPECT_EQ(vllm_version("0.8", false), VllmVersion::V0_8);
  EXPECT_EQ(vllm_version("0.8.5", false), VllmVersion::V0_8);
  EXPECT_EQ(vllm_version("0.21", true), VllmVersion::V0_21);
  for (const char* refused : {"0.21", "0.27.1"}) {  // without --enforce-eager: the CUDA-graph estimate
    try {
      vllm_version(refused, false);
      ADD_FAILURE() << refused;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("add --enforce-eager"), std::string::npos) << e.what();
    }
  }
  for (const char* refused : {"0.6", "0.6.6", "0.9", "0.10", "1.0", "x", "0.", "0.8x"}) {
    try {
      vllm_version(refused, true);
      ADD_FAILURE() << refused;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("memplan models 0.8"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace memplan
