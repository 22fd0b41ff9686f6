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
  // float32 (d = 4): Sampler.forward's logits.to(torch.float32) is the head's tensor itself, so no copy:
  // (4 + 22) x 4 x 10 + 2 x 4 x 4 x 3 = 1040 + 96.
  EXPECT_EQ(vllm_sampler_peak_bytes(4, 10, 10, 3, DType::Float32), 1136u);
  // The head's logits 64 wide (vocab 10 padded), the sampler's copies 10: 2 x 4 x 64 + 26 x 4 x 10 + 48.
  EXPECT_EQ(vllm_sampler_peak_bytes(4, 10, 64, 3, DType::BFloat16), 512u + 1040u + 48u);
}

TEST(VllmEngine, FlashInferSamplerWarmUpByHand) {
  // 0.9.0 to 0.11.0 with FlashInfer importable: the float32 logits, masked_logits and probs over [rows, vocab].
  // bf16, 4 rows, vocab 10, hidden 3: 2 x 4 x 10 + 12 x 4 x 10 + 2 x 2 x 4 x 3 = 80 + 480 + 48.
  EXPECT_EQ(vllm_flashinfer_sampler_peak_bytes(4, 10, 10, 3, DType::BFloat16), 608u);
  // float32: no copy, 4 x 4 x 10 + 8 x 4 x 10 + 2 x 4 x 4 x 3 = 160 + 320 + 96.
  EXPECT_EQ(vllm_flashinfer_sampler_peak_bytes(4, 10, 10, 3, DType::Float32), 576u);
  // Llama-3.1-8B's default step on an H100 (1,024 rows, vocab 128,256, hidden 4,096, bf16): 14 B an element less
  // than the sort, 14 x 1,024 x 128,256 = 1,838,678,016 B (1.71 GiB).
  EXPECT_EQ(vllm_sampler_peak_bytes(1024, 128256, 128256, 4096, DType::BFloat16) -
                vllm_flashinfer_sampler_peak_bytes(1024, 128256, 128256, 4096, DType::BFloat16),
            1'838'678'016u);
  EXPECT_TRUE(vllm_rule("0.9.0").flashinfer_sampler);
  EXPECT_TRUE(vllm_rule("0.11.0").flashinfer_sampler);
  EXPECT_FALSE(vllm_rule("0.11.1").flashinfer_sampler);  // PR #26859: opt-in
  EXPECT_FALSE(vllm_rule("0.8.5").flashinfer_sampler);
  EXPECT_FALSE(vllm_rule("0.7.3").flashinfer_sampler);   // V0's sampler
}

TEST(VllmEngine, TritonSamplerBufferRows) {
  // min(next_power_of_2(min(multiprocessors, rows)), multiprocessors): 256 rows on an RTX 3090 (82) and an H100
  // (132) take every multiprocessor; 100 rows on an H100 round 100 programs up to 128; 3 rows to 4; 256 rows on an
  // MI300X (304 compute units) 256.
  EXPECT_EQ(vllm_triton_sampler_buffer_rows(256, 82), 82);
  EXPECT_EQ(vllm_triton_sampler_buffer_rows(256, 132), 132);
  EXPECT_EQ(vllm_triton_sampler_buffer_rows(100, 132), 128);
  EXPECT_EQ(vllm_triton_sampler_buffer_rows(3, 82), 4);
  EXPECT_EQ(vllm_triton_sampler_buffer_rows(256, 304), 256);
  // Not known: the largest any GPU could give, next_power_of_2(rows).
  EXPECT_EQ(vllm_triton_sampler_buffer_rows(256, 0), 256);
  EXPECT_EQ(vllm_triton_sampler_buffer_rows(100, 0), 128);
}

TEST(VllmEngine, TritonSamplerWarmUpByHand) {
  // Qwen2.5-7B's warm-up on an RTX 3090: 256 rows, vocabulary 152,064 (already a multiple of 64), hidden 3,584,
  // bfloat16. In d: 2 x 256 x (152,064 + 2 x 3,584) = 81,526,784; over [256, 152,064] the float32 logits, softmax
  // and noise, 12 x 38,928,384 = 467,140,608; the buffer 82 x 152,064 x 4 = 49,876,992.
  EXPECT_EQ(vllm_triton_sampler_peak_bytes(256, 152064, 152064, 3584, DType::BFloat16, 82),
            81526784u + 467140608u + 49876992u);
  // Against the sort's 26 bytes a logit: 1,093,664,768 bytes, where the profile run's 0.17 logs on that card leave
  // room for 0.65 to 0.76 GiB (bench/serving.md, finding 8).
  EXPECT_EQ(vllm_sampler_peak_bytes(256, 152064, 152064, 3584, DType::BFloat16), 81526784u + 26u * 38928384u);
  // float32, 8 rows of vocabulary 1,000 padded to 1,024, hidden 8, 0 multiprocessors (8 rows of buffer): the head's
  // 8 x (1,024 + 16) x 4 = 33,280; no float32 copy, softmax and noise 8 x 8,000 = 64,000; buffer 8 x 1,000 x 4.
  EXPECT_EQ(vllm_triton_sampler_peak_bytes(8, 1000, 1024, 8, DType::Float32, 0), 33280u + 64000u + 32000u);
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

TEST(VllmEngine, StepDefaultsByUsageContextAndTier) {
  // arg_utils.py's tables (read at v0.11.0 and v0.18.0; the 160 GiB tier in main after PR #51726): tokens, requests.
  using C = VllmUsageContext;
  const uint64_t h100 = 85045477376u, b200 = uint64_t{182625} << 20, a100 = uint64_t{81034} << 20;
  auto step = [](uint64_t m, const char* name, C c, bool tier) {
    const VllmStepDefaults d = vllm_step_defaults(m, name, c, tier);
    return std::make_pair(d.max_num_batched_tokens, d.max_num_seqs);
  };
  EXPECT_EQ(step(h100, "H100-80GB", C::LlmClass, false), std::make_pair(int64_t{16384}, int64_t{1024}));
  EXPECT_EQ(step(a100, "A100-80GB", C::LlmClass, false), std::make_pair(int64_t{8192}, int64_t{256}));
  EXPECT_EQ(step(h100, "H100-80GB", C::Engine, false), std::make_pair(int64_t{2048}, int64_t{128}));
  EXPECT_EQ(step(b200, "B200", C::Engine, true), std::make_pair(int64_t{2048}, int64_t{128}));
  // B200 (178.3 GiB): `vllm serve` 8192 to 0.27, 16384 from 0.28; LLM(...) 16384 either way.
  EXPECT_EQ(step(b200, "B200", C::Serve, false), std::make_pair(int64_t{8192}, int64_t{1024}));
  EXPECT_EQ(step(b200, "B200", C::Serve, true), std::make_pair(int64_t{16384}, int64_t{1024}));
  EXPECT_EQ(step(b200, "B200", C::LlmClass, true), std::make_pair(int64_t{16384}, int64_t{1024}));
  // The H200 (140.4 GiB) stays under the new tier.
  EXPECT_EQ(step(uint64_t{143771} << 20, "H200", C::Serve, true), std::make_pair(int64_t{8192}, int64_t{1024}));
  EXPECT_FALSE(vllm_rule("0.11").clamps_default_step);
  EXPECT_TRUE(vllm_rule("0.11.1").clamps_default_step);
  EXPECT_FALSE(vllm_rule("0.27.1").largest_step_tier);
  EXPECT_TRUE(vllm_rule("0.28").largest_step_tier);
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

// PR #38284 (merged 2026-04-21, an ancestor of the 0.20 branch's 132765e35) turned the CUDA-graph estimate on and
// raised CacheConfig.gpu_memory_utilization from 0.9 to 0.92 (vllm/config/cache.py at 132765e35 and at v0.19.1's
// branch; docs/research/vllm-020-defaults.md section 2).
TEST(VllmEngine, UtilizationDefaultAndGraphEstimateFrom020) {
  for (const char* v : {"0.11.2", "0.17.1", "0.18.0", "0.19.1"}) {
    EXPECT_EQ(vllm_rule(v).default_gpu_memory_utilization, 0.9) << v;
    EXPECT_FALSE(vllm_rule(v).cudagraph_estimate) << v;
  }
  for (const char* v : {"0.20.0", "0.20.1", "0.21", "0.27.1", "0.29.0"}) {
    EXPECT_EQ(vllm_rule(v).default_gpu_memory_utilization, 0.92) << v;
    EXPECT_TRUE(vllm_rule(v).cudagraph_estimate) << v;
  }
}

TEST(VllmEngine, EngineVersionsModelledAndRefused) {
  EXPECT_EQ(vllm_version("0.11"), VllmVersion::V0_11);
  EXPECT_EQ(vllm_version("0.11.2"), VllmVersion::V0_11);
  EXPECT_EQ(vllm_version("0.16.1"), VllmVersion::V0_11);
  // 0.17 (PR #33538 in its release notes) to 0.19: the same budget, the Triton top-k/top-p sampler.
  EXPECT_EQ(vllm_version("0.17"), VllmVersion::V0_17);
  EXPECT_EQ(vllm_version("0.17.1"), VllmVersion::V0_17);
  EXPECT_EQ(vllm_version("0.19.1"), VllmVersion::V0_17);
  EXPECT_EQ(vllm_version("0.8"), VllmVersion::V0_8);
  EXPECT_EQ(vllm_version("0.8.5"), VllmVersion::V0_8);
  // From 0.20 (PR #38284 in the 0.20 branch, docs/research/vllm-020-defaults.md) the CUDA-graph estimate.
  EXPECT_EQ(vllm_version("0.20.1"), VllmVersion::V0_20);
  EXPECT_EQ(vllm_version("0.21"), VllmVersion::V0_20);
  EXPECT_EQ(vllm_version("0.24.0"), VllmVersion::V0_20);
  EXPECT_EQ(vllm_version("0.25"), VllmVersion::V0_25);
  EXPECT_EQ(vllm_version("0.27.1"), VllmVersion::V0_25);
  EXPECT_EQ(vllm_version("0.28.2"), VllmVersion::V0_25);
  EXPECT_EQ(vllm_version("0.29"), VllmVersion::V0_29);
  EXPECT_EQ(vllm_version("0.31.0"), VllmVersion::V0_29);
  // V0 from 0.6.0 to 0.6.4 (before PR #10511); a post suffix is the patch's.
  EXPECT_EQ(vllm_version("0.6.0"), VllmVersion::V0_6);
  EXPECT_EQ(vllm_version("0.6.4.post1"), VllmVersion::V0_6);
  // 0.9.1 to 0.10.x: PR #19312's baseline rule with the distributed set-up after the snapshot (before PR #25359);
  // the v0.9.1 tag carries #19312 (init_snapshot at gpu_worker.py:135, init_worker_distributed_environment at :153)
  // with 0.8's profile run (_dummy_run returns hidden_states[logit_indices]): the forward's states not held.
  for (const char* v : {"0.9.1", "0.9.2", "0.10", "0.10.0", "0.10.1.1", "0.10.2"})
    EXPECT_EQ(vllm_version(v), VllmVersion::V0_9) << v;
  EXPECT_FALSE(vllm_rule("0.9.1").hidden_held_at_sampler);
  EXPECT_TRUE(vllm_rule("0.9.2").hidden_held_at_sampler);
  EXPECT_TRUE(vllm_rule("0.9.1").all_reduce_after_snapshot);
  // V0 from 0.6.5 (PR #10511's baseline) to 0.6.x, and 0.7.x (PR #12126's baseline snapshot, after 0.6.6).
  for (const char* v : {"0.6.5", "0.6.6", "0.6.6.post1"}) EXPECT_EQ(vllm_version(v), VllmVersion::V0_6_5) << v;
  for (const char* v : {"0.7", "0.7.0", "0.7.3"}) EXPECT_EQ(vllm_version(v), VllmVersion::V0_7) << v;
  // 0.9.0 and its 0.9.0.1 hot fix ran 0.8's worker and runner (before PR #18974 and PR #19312).
  for (const char* v : {"0.9.0", "0.9.0.1"}) EXPECT_EQ(vllm_version(v), VllmVersion::V0_8) << v;
  for (const char* refused : {"0.6", "0.5.4", "0.9", "1.0", "x", "0.", "0.8x", "0.6.x", "0.10x"}) {
    try {
      vllm_version(refused);
      ADD_FAILURE() << refused;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("memplan models 0.6.0 to 0.6.4 (the V0 engine's absolute rule), 0.6.5 to "
                                           "0.6.x and 0.7.x (V0 over PR #10511's baseline and PR #12126's snapshot), "
                                           "0.8 and 0.9.0"),
                std::string::npos) << e.what();
    }
  }
}

// The runner that profiles: vLLM's default from 0.25 is V2 for a model without experts (v0.25.0's release notes,
// PR #44443; VllmConfig._is_default_v2_model_runner_model's `not model_config.is_moe`), V1 for one with experts (but
// the listed ones: ModelRunnerV2DefaultBefore029) and before 0.25 (but the listed models). V1 from 0.20 subtracts its CUDA graphs' estimate (not sized): --enforce-eager required; V2 subtracts
// none. V2 before 0.25 and V2 with LoRA are not read.
TEST(VllmEngine, ModelRunnerByVersionAndModel) {
  const auto runner = [](const char* version, std::optional<VllmModelRunner> forced, bool experts, bool eager,
                         bool lora = false) {
    return vllm_model_runner(vllm_version(version), version, forced, experts, eager, lora, "m.json");
  };
  EXPECT_EQ(runner("0.27.1", std::nullopt, false, false), VllmModelRunner::V2);  // dense: V2, graphs or not
  EXPECT_EQ(runner("0.25", std::nullopt, false, true), VllmModelRunner::V2);
  EXPECT_EQ(runner("0.25", std::nullopt, true, true), VllmModelRunner::V1);      // experts: V1 (eager)
  EXPECT_EQ(runner("0.24.0", std::nullopt, false, true), VllmModelRunner::V1);   // before 0.25: V1
  EXPECT_EQ(runner("0.11", std::nullopt, false, false), VllmModelRunner::V1);    // V1 before 0.20: no estimate
  EXPECT_EQ(runner("0.25", VllmModelRunner::V2, true, false), VllmModelRunner::V2);
  EXPECT_EQ(runner("0.25", VllmModelRunner::V1, false, true), VllmModelRunner::V1);
  const auto refused = [&](const char* version, std::optional<VllmModelRunner> forced, bool experts, bool eager,
                           bool lora, const std::string& says) {
    try {
      runner(version, forced, experts, eager, lora);
      ADD_FAILURE() << version;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("0.21", std::nullopt, false, false, false, "--engine-version 0.21: from 0.20 vLLM's V1 runner subtracts");
  refused("0.20.0", std::nullopt, false, false, false, "--engine-version 0.20.0: from 0.20 vLLM's V1 runner subtracts");
  EXPECT_EQ(runner("0.19.1", std::nullopt, false, false), VllmModelRunner::V1);  // 0.19: no estimate, graphs allowed
  refused("0.27.1", std::nullopt, true, false, false,
          "--engine-version 0.27.1 with Model Runner V1 (m.json has experts, and 0.25 to 0.28 run only Qwen2-MoE and "
          "DeepSeek-V2 of those on V2): from 0.20");
  refused("0.25", VllmModelRunner::V1, false, false, false, "(--model-runner v1): from 0.20");
  refused("0.25", VllmModelRunner::V1, false, false, false, "add --enforce-eager");
  refused("0.21", VllmModelRunner::V2, false, true, false, "--model-runner v2 with --engine-version 0.21: Model Runner "
                                                           "V2's profile run is read from 0.22 only");
  refused("0.25", std::nullopt, false, false, true, "--enable-lora with Model Runner V2 (--engine-version 0.25, m.json)");
  // 0.22 to 0.28: V2 by default for the listed architectures (vllm_v2_default_before_0_29), V1 otherwise.
  const auto by_type = [](const char* version, const char* model_type, bool experts = false, bool quantized = false) {
    return vllm_model_runner(vllm_version(version), version, std::nullopt, experts, false, false, "m.json", model_type,
                             quantized);
  };
  EXPECT_EQ(by_type("0.22.0", "qwen3"), VllmModelRunner::V2);
  EXPECT_EQ(by_type("0.24.1", "llama"), VllmModelRunner::V2);
  EXPECT_EQ(by_type("0.24.1", "mistral", false, true), VllmModelRunner::V2);
  refused("0.22.0", std::nullopt, false, false, false, "with Model Runner V1 (m.json is not one that 0.22 to 0.24 run");
  EXPECT_EQ(runner("0.22.0", VllmModelRunner::V2, false, false), VllmModelRunner::V2);
  // 0.29 (the v0.29.0 release notes, #53183 and #53306): V2 for every model, a mixture of experts too, and V2 now
  // subtracts its CUDA graphs' estimate: --enforce-eager, as V1's from 0.20.
  EXPECT_EQ(runner("0.28.1", std::nullopt, true, true), VllmModelRunner::V1);
  EXPECT_EQ(runner("0.28.1", std::nullopt, false, false), VllmModelRunner::V2);
  EXPECT_EQ(runner("0.29.0", std::nullopt, true, true), VllmModelRunner::V2);
  EXPECT_EQ(runner("0.29.0", std::nullopt, false, true), VllmModelRunner::V2);
  EXPECT_EQ(runner("0.30", VllmModelRunner::V1, true, true), VllmModelRunner::V1);
  refused("0.29.0", std::nullopt, false, false, false,
          "--engine-version 0.29.0 with Model Runner V2: from 0.29 that runner subtracts its CUDA graphs' memory");
  refused("0.29.0", VllmModelRunner::V2, true, false, false, "(--model-runner v2): from 0.29");
  refused("0.29.0", VllmModelRunner::V1, false, false, false, "(--model-runner v1): from 0.20");
}

// Model Runner V2's sampler warm-up by hand, Qwen2.5-0.5B's head (vocabulary 151,936, a multiple of 64: no padding;
// hidden 896) on 256 dummy requests in bfloat16: the sampled hidden rows 256 x 896 x 2 = 458,752; the logits
// 256 x 151,936 x 2 = 77,791,232; their float32 copy 155,582,464; gumbel_sample's per-block argmax and maximum,
// cdiv(151,936, 1024) = 149 blocks, 256 x 149 x (8 + 4) = 457,728; the block argmax and the tokens 256 x 16 = 4,096.
// v0.22.0 (#39337): Qwen3; v0.23.0 (#43458): Llama and Mistral too, not quantized; v0.24.0 (#44446): quantized too,
// and (#42667) Qwen2-MoE and DeepSeek-V2; 0.25 to 0.28 every dense model and those two.
TEST(VllmEngine, ModelRunnerV2DefaultBefore029) {
  EXPECT_TRUE(vllm_v2_default_before_0_29(22, false, "qwen3", false));
  EXPECT_FALSE(vllm_v2_default_before_0_29(22, false, "llama", false));
  EXPECT_FALSE(vllm_v2_default_before_0_29(22, false, "qwen3", true));
  EXPECT_TRUE(vllm_v2_default_before_0_29(23, false, "llama", false));
  EXPECT_TRUE(vllm_v2_default_before_0_29(23, false, "mistral", false));
  EXPECT_FALSE(vllm_v2_default_before_0_29(23, false, "mistral", true));
  EXPECT_TRUE(vllm_v2_default_before_0_29(24, false, "llama", true));
  EXPECT_FALSE(vllm_v2_default_before_0_29(24, true, "qwen3_moe", false));
  EXPECT_FALSE(vllm_v2_default_before_0_29(24, false, "qwen2", false));
  EXPECT_FALSE(vllm_v2_default_before_0_29(24, false, "", false));
  EXPECT_FALSE(vllm_v2_default_before_0_29(21, false, "qwen3", false));
  // 0.24 (PR #42667): the listed mixtures of experts, Qwen2-MoE and DeepSeek-V2, quantized or not; not before.
  EXPECT_FALSE(vllm_v2_default_before_0_29(23, true, "qwen2_moe", false));
  EXPECT_TRUE(vllm_v2_default_before_0_29(24, true, "qwen2_moe", false));
  EXPECT_TRUE(vllm_v2_default_before_0_29(24, true, "deepseek_v2", true));
  EXPECT_FALSE(vllm_v2_default_before_0_29(24, true, "mixtral", false));
  // 0.25 to 0.28: every dense model, quantized or not, and the listed mixtures of experts.
  EXPECT_TRUE(vllm_v2_default_before_0_29(25, false, "qwen2", true));
  EXPECT_TRUE(vllm_v2_default_before_0_29(28, true, "deepseek_v2", false));
  EXPECT_FALSE(vllm_v2_default_before_0_29(28, true, "qwen3_moe", false));
  EXPECT_FALSE(vllm_v2_default_before_0_29(29, false, "qwen3", false));  // 0.29: vllm_model_runner's every model
}

TEST(VllmEngine, ModelRunnerV2SamplerByHand) {
  EXPECT_EQ(vllm_v2_sampler_peak_bytes(256, 151936, 151936, 896, DType::BFloat16),
            458752u + 77791232u + 155582464u + 457728u + 4096u);
  // A padded head (vocabulary 1,000 in a width of 1,024), float32, 3 rows of hidden 8: the head's logits are the
  // padded width's, 3 x 1,024 x 4 = 12,288; the float32 copy the vocabulary's, 3 x 1,000 x 4 = 12,000; one block
  // each, 3 x 12 = 36; 3 x 16 = 48; the rows 3 x 8 x 4 = 96.
  EXPECT_EQ(vllm_v2_sampler_peak_bytes(3, 1000, 1024, 8, DType::Float32), 12288u + 12000u + 36u + 48u + 96u);
}

TEST(VllmEngine, EachVersionIsARule) {
  const VllmRule v0 = vllm_rule("0.6.3"), v08 = vllm_rule("0.8.5"),
                 v11 = vllm_rule("0.11");
  EXPECT_TRUE(v0.v0_engine && v0.absolute_budget && v0.hidden_held_at_sampler);
  EXPECT_FALSE(v0.sizes_sliding_window || v0.sizes_mla || v0.sizes_data_parallel);
  EXPECT_TRUE(v08.absolute_budget && !v08.hidden_held_at_sampler && !v08.v0_engine);
  EXPECT_TRUE(!v11.absolute_budget && v11.hidden_held_at_sampler && v11.sizes_sliding_window);
  // 0.9.2 to 0.10 differ from 0.11 where PR #25359 moved init_worker_distributed_environment before the snapshot:
  // the custom all-reduce's buffers were in non_torch_increase; from 0.8 by PR #19312's baseline (not absolute)
  // budget and the hidden states held through the sampler's warm-up.
  const VllmRule v09 = vllm_rule("0.10.2");
  EXPECT_TRUE(v09.all_reduce_after_snapshot && !v11.all_reduce_after_snapshot && !v08.all_reduce_after_snapshot);
  EXPECT_TRUE(!v09.absolute_budget && v09.hidden_held_at_sampler && !v09.v0_engine);
  EXPECT_TRUE(v09.needs_step_flags && v08.needs_step_flags && !v11.needs_step_flags);
  EXPECT_FALSE(v09.sizes_sliding_window || v09.sizes_mla || v09.sizes_data_parallel);
  // 0.6.5 to 0.7: V0's profile run over a baseline instead of 0.6.4's absolute peak; the custom all-reduce's IPC
  // buffers, set up after the baseline, in the increase; 0.6.x's allocated-bytes form also counts its rank_data.
  const VllmRule v065 = vllm_rule("0.6.6.post1"), v07 = vllm_rule("0.7.3");
  for (const VllmRule& r : {v065, v07}) {
    EXPECT_TRUE(r.v0_engine && r.hidden_held_at_sampler && !r.absolute_budget && r.all_reduce_after_snapshot);
    EXPECT_FALSE(r.needs_step_flags || r.sizes_sliding_window || r.sizes_mla || r.sizes_data_parallel);
  }
  EXPECT_TRUE(v065.rank_data_after_baseline && !v07.rank_data_after_baseline && !v09.rank_data_after_baseline);
  EXPECT_TRUE(!v0.all_reduce_after_snapshot && v0.absolute_budget);
  // 0.17 on: 0.11's worker, the Triton sampler; nothing before it has that sampler.
  const VllmRule v17 = vllm_rule("0.17.1");
  EXPECT_TRUE(v17.triton_top_k_top_p && vllm_rule("0.22").triton_top_k_top_p &&
              vllm_rule("0.27.1").triton_top_k_top_p && vllm_rule("0.29").triton_top_k_top_p);
  EXPECT_TRUE(v17.hidden_held_at_sampler && v17.sizes_sliding_window && v17.sizes_mla && v17.sizes_data_parallel &&
              !v17.absolute_budget && !v17.all_reduce_after_snapshot && !v17.needs_step_flags);
  for (const VllmRule& r : {v0, v08, v09, v11, v065, v07}) EXPECT_FALSE(r.triton_top_k_top_p);
}

// The paths that changed inside one budget rule's range, each at the release its pull request reached (the flags'
// comments in cost_models/vllm_engine.h): a release either side of each edge.
TEST(VllmEngine, SeriesPathsChangeAtTheirReleases) {
  // PR #21497, in 0.10.1: experts left over dealt one each.
  EXPECT_FALSE(vllm_rule("0.8.5").even_expert_map);
  EXPECT_FALSE(vllm_rule("0.9.2").even_expert_map);
  EXPECT_FALSE(vllm_rule("0.10").even_expert_map);
  EXPECT_FALSE(vllm_rule("0.10.0").even_expert_map);
  EXPECT_TRUE(vllm_rule("0.10.1.post1").even_expert_map);
  EXPECT_TRUE(vllm_rule("0.11").even_expert_map);
  // PR #30785, after 0.13's branch (v0.13.0 has #29980 reverted): auto follows ModelOpt's FP8 KV cache from 0.14.
  EXPECT_FALSE(vllm_rule("0.13.0").modelopt_kv_auto_fp8);
  EXPECT_TRUE(vllm_rule("0.14.0").modelopt_kv_auto_fp8);
  // NVFP4 experts on Marlin from 0.11; PR #31692 (them) and PR #31052 (the modular kernel), both in 0.14, move them
  // into the modular kernel; their global scales float32 from 0.20, their width padded from 0.24.
  EXPECT_FALSE(vllm_rule("0.10.2").nvfp4_marlin_moe);
  for (const char* v : {"0.11", "0.12.0", "0.13.0"}) {
    EXPECT_TRUE(vllm_rule(v).nvfp4_marlin_moe) << v;
    EXPECT_FALSE(vllm_rule(v).modular_moe) << v;
  }
  for (const char* v : {"0.14.0", "0.20", "0.29"}) EXPECT_TRUE(vllm_rule(v).nvfp4_marlin_moe && vllm_rule(v).modular_moe) << v;
  EXPECT_FALSE(vllm_rule("0.19.1").nvfp4_moe_global_scales_float32);
  EXPECT_TRUE(vllm_rule("0.20").nvfp4_moe_global_scales_float32);
  EXPECT_FALSE(vllm_rule("0.23.0").marlin_moe_pads_width);
  EXPECT_TRUE(vllm_rule("0.24.0").marlin_moe_pads_width);
  // Chunking to 0.17 (PR #34086 in 0.18); MXFP4's Marlin in the modular kernel from 0.17 (PR #34588).
  EXPECT_TRUE(vllm_rule("0.14.0").modular_moe && vllm_rule("0.14.0").modular_moe_chunked);
  EXPECT_TRUE(vllm_rule("0.17.1").modular_moe_chunked && vllm_rule("0.17.1").mxfp4_marlin_modular);
  EXPECT_FALSE(vllm_rule("0.16.0").mxfp4_marlin_modular);
  // PR #34846 (merged after the v0.16.0 branch): get_default_config's block by the batch from 0.17.
  EXPECT_FALSE(vllm_rule("0.16.0").triton_moe_block_by_batch);
  EXPECT_TRUE(vllm_rule("0.17.0").triton_moe_block_by_batch);
  // fp8 experts on 9.0: FlashInfer's CUTLASS MoE first from 0.16 (read there), Triton first for block scales from
  // 0.17 (_get_priority_backends at v0.17.1rc0).
  EXPECT_FALSE(vllm_rule("0.15.1").fp8_moe_flashinfer_cutlass);
  EXPECT_TRUE(vllm_rule("0.16.0").fp8_moe_flashinfer_cutlass && !vllm_rule("0.16.0").fp8_block_moe_triton_first);
  EXPECT_TRUE(vllm_rule("0.17.1").fp8_block_moe_triton_first);
  EXPECT_TRUE(vllm_rule("0.18").modular_moe && !vllm_rule("0.18").modular_moe_chunked);
  EXPECT_TRUE(vllm_rule("0.29").modular_moe && vllm_rule("0.29").mxfp4_marlin_modular);
  // VLLM_FUSED_MOE_CHUNK_SIZE: 32768 at v0.11.2, 16 x 1024 at v0.12.0.
  EXPECT_FALSE(vllm_rule("0.11.2").fused_moe_chunk_16k);
  EXPECT_TRUE(vllm_rule("0.12.0").fused_moe_chunk_16k);
  // PR #24722, in 0.12.0: fused_marlin_moe's use_atomic_add=False from then on.
  EXPECT_TRUE(vllm_rule("0.11.2").marlin_moe_atomic_add);
  EXPECT_FALSE(vllm_rule("0.12.0").marlin_moe_atomic_add);
  EXPECT_FALSE(vllm_rule("0.13.0").marlin_moe_atomic_add);
  // V0 runs none of these paths (its experts and quantized layers are refused).
  const VllmRule v0 = vllm_rule("0.7.3");
  EXPECT_FALSE(v0.even_expert_map || v0.modelopt_kv_auto_fp8 || v0.nvfp4_marlin_moe || v0.modular_moe);
}

TEST(VllmEngine, CustomAllReduceBuffersByHand) {
  // custom_all_reduce.py CustomAllreduce.__init__: create_shared_buffer(meta_size() + max_size) and
  // create_shared_buffer(max_size), max_size = 8192 x 1024 = 8,388,608; meta_size() = sizeof(vllm::Signal) =
  // 36 x 8 x 4 (self_counter) + 2 x 36 x 8 x 4 (peer_counter) = 1,152 + 2,304 = 3,456.
  // 3,456 + 8,388,608 + 8,388,608 = 16,780,672 bytes on each rank, at world sizes 2, 4, 6 and 8 only.
  for (int tp : {2, 4, 6, 8}) EXPECT_EQ(vllm_custom_all_reduce_bytes(tp), 16780672u) << tp;
  for (int tp : {1, 3, 5, 16}) EXPECT_EQ(vllm_custom_all_reduce_bytes(tp), 0u) << tp;  // disabled there
  // With rank_data (V0_6_5): torch.empty(8 x 1024 x 1024) beside them, 16,780,672 + 8,388,608 = 25,169,280.
  for (int tp : {2, 4, 6, 8}) EXPECT_EQ(vllm_custom_all_reduce_bytes(tp, true), 25169280u) << tp;
  for (int tp : {1, 3}) EXPECT_EQ(vllm_custom_all_reduce_bytes(tp, true), 0u) << tp;
}

TEST(VllmEngine, V0StepFromMaxModelLen) {
  // SchedulerConfig (config.py at c0c2335): max(max_model_len, 2048) tokens, 256 sequences by default.
  EXPECT_EQ(vllm_v0_step(64, 0, 0, "0.6.3").max_num_batched_tokens, 2048);
  EXPECT_EQ(vllm_v0_step(4096, 0, 0, "0.6.3").max_num_batched_tokens, 4096);
  EXPECT_EQ(vllm_v0_step(4096, 0, 0, "0.6.3").max_num_seqs, 256);
  EXPECT_EQ(vllm_v0_step(32768, 0, 0, "0.6.3").max_num_batched_tokens, 32768);
  EXPECT_EQ(vllm_v0_step(64, 64, 8, "0.6.3").max_num_batched_tokens, 64);
  EXPECT_EQ(vllm_v0_step(40000, 40000, 8, "0.6.3").max_num_batched_tokens, 40000);  // given: no default refused
  struct Case { int64_t len, tokens, seqs; const char* phrase; };
  for (const Case& c : {Case{32769, 0, 0, "chunked prefill on by default"}, Case{128, 64, 8, "under max_model_len 128"},
                        Case{64, 64, 128, "under max_num_seqs 128"}, Case{64, 0, 4096, "2048 is under max_num_seqs"}}) {
    try {
      vllm_v0_step(c.len, c.tokens, c.seqs, "0.6.3");
      ADD_FAILURE() << c.phrase;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.phrase), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("--engine-version 0.6.3: ", 0), 0u) << e.what();
    }
  }
}

TEST(VllmEngine, V0SamplerTensorByTensor) {
  // 64 rows, vocab 16, head width 64, bfloat16 (d = 2): the head's logits 2 x 64 x 64 = 8,192; over 64 x 16 =
  // 1,024 logits: float32 copy 4, sort values 4 and indices 8, top-k mask 1, softmax 4, cumsum 4, top-p mask 1,
  // scatter output 4 = 30 B each, 30,720: 38,912.
  EXPECT_EQ(vllm_v0_sampler_peak_bytes(64, 16, 64, DType::BFloat16), 38912u);
  // float32 logits: .to(torch.float) is the same tensor, 26 B a logit: 4 x 64 x 64 + 26 x 1,024 = 16,384 + 26,624 = 43,008.
  EXPECT_EQ(vllm_v0_sampler_peak_bytes(64, 16, 64, DType::Float32), 43008u);
  // Llama-3-8B's vocabulary (128,256, a multiple of 64: no padding) on 256 rows in bfloat16:
  // 2 x 256 x 128,256 + 30 x 256 x 128,256 = 32 x 32,833,536 = 1,050,673,152.
  EXPECT_EQ(vllm_v0_sampler_peak_bytes(256, 128256, 128256, DType::BFloat16), 1050673152u);
}

}  // namespace
}  // namespace memplan
