// SGLang's and TensorRT-LLM's start-up rules (cost_models/sglang_engine.h, cost_models/trtllm_engine.h), each number
// by hand in its comment.
#include <gtest/gtest.h>

#include "cost_models/sglang_engine.h"
#include "cost_models/sglang_mla.h"
#include "cost_models/sglang_swa.h"
#include "cost_models/sglang_weights.h"
#include "cost_models/trtllm_engine.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

TEST(SglangEngine, GpuDefaultsByMemory) {
  // _handle_gpu_memory_settings' buckets (MiB): T4 15,360, A10 24,576 at tp 1 and 4, A100-40GB 40,960, H100 81,559,
  // B200 183,359.
  EXPECT_EQ(sglang_gpu_defaults(15360, 1).chunked_prefill_size, 2048);
  EXPECT_EQ(sglang_gpu_defaults(15360, 1).cuda_graph_max_bs, 8);
  EXPECT_EQ(sglang_gpu_defaults(24576, 1).cuda_graph_max_bs, 24);
  EXPECT_EQ(sglang_gpu_defaults(24576, 4).cuda_graph_max_bs, 80);
  EXPECT_EQ(sglang_gpu_defaults(40960, 1).chunked_prefill_size, 4096);
  EXPECT_EQ(sglang_gpu_defaults(40960, 1).cuda_graph_max_bs, 32);
  EXPECT_EQ(sglang_gpu_defaults(81559, 1).chunked_prefill_size, 8192);
  EXPECT_EQ(sglang_gpu_defaults(81559, 8).cuda_graph_max_bs, 512);
  EXPECT_EQ(sglang_gpu_defaults(183359, 1).chunked_prefill_size, 16384);
}

TEST(SglangMla, AbsorbedWeightsAndBackend) {
  // DeepSeek-V2-Lite, bf16: w_kc 16 heads x 128 x 512 and w_vc 16 x 128 x 512 a layer, x 27 layers x 2 B
  // = 27 x 4,194,304 = 113,246,208 B (a second kv_b_proj); tp 2: 8 heads, 56,623,104 B; tp 16, one head a rank:
  // w_kc only (w_vc is a contiguous slice, a view): 27 x 128 x 512 x 2 = 3,538,944 B.
  EXPECT_EQ(sglang_mla_absorbed_bytes(27, 16, 128, 128, 512, 2), 113246208u);
  EXPECT_EQ(sglang_mla_absorbed_bytes(27, 8, 128, 128, 512, 2), 56623104u);
  EXPECT_EQ(sglang_mla_absorbed_bytes(27, 1, 128, 128, 512, 2), 3538944u);
  // DeepSeek-V3's block-fp8 kv_b_proj dequantized to a new bf16 w (post_load_weights' block_quant_dequant): tp 8,
  // 16 heads a rank, copies of both halves, w freed: 61 x 16 x (128 + 128) x 512 x 2 B = 255,852,544; one head a
  // rank, w_kc a copy and w_vc a view that keeps all of w: 61 x (128 + 128 + 128) x 512 x 2 = 23,986,176 (bf16's
  // one head: 61 x 128 x 512 x 2 = 7,995,392).
  EXPECT_EQ(sglang_mla_absorbed_bytes(61, 16, 128, 128, 512, 2, true), 255852544u);
  EXPECT_EQ(sglang_mla_absorbed_bytes(61, 1, 128, 128, 512, 2, true), 23986176u);
  EXPECT_EQ(sglang_mla_absorbed_bytes(61, 1, 128, 128, 512, 2), 7995392u);
  // FA3 on Hopper, FlashInfer on 10.x for DeepseekV2ForCausalLM, Triton on Ampere; DeepseekV3ForCausalLM on 10.x:
  // trtllm_mla with SGLang's own fp8 quantization, refused.
  EXPECT_EQ(sglang_mla_backend(90, true).name, "fa3");
  EXPECT_EQ(sglang_mla_backend(100, false).name, "flashinfer");
  EXPECT_EQ(sglang_mla_backend(80, false).name, "triton");
  EXPECT_TRUE(sglang_mla_backend(90, false).refusal.empty());
  EXPECT_FALSE(sglang_mla_backend(100, true).refusal.empty());
}

TEST(SglangWeights, Fp8KvScales) {
  // Fp8KVCacheMethod: k_scale and v_scale, float32 scalars, on each RadixAttention: DeepSeek-V3's 61 layers of two
  // (attn_mqa, attn_mha): 122 x 8 = 976 B.
  EXPECT_EQ(sglang_fp8_kv_scale_bytes(122), 976u);
  EXPECT_EQ(sglang_fp8_kv_scale_bytes(0), 0u);
}

TEST(SglangEngine, DefaultMemFraction) {
  // H100 as nvidia-smi reports it, 81,559 MiB, tp 1: 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 = 13,440 MiB;
  // round((81,559 - 13,440) / 81,559, 3) = round(0.83521, 3) = 0.835.
  SglangMemFraction f = sglang_default_mem_fraction(81559, 8192, 256, 1);
  EXPECT_DOUBLE_EQ(f.reserved_mib, 13440);
  EXPECT_DOUBLE_EQ(f.mem_fraction_static, 0.835);
  // An RTX 4090 (24,564 MiB), tp 1: 512 + 2048 x 1.5 + 24 x 2 + 128 = 3,760 MiB; round(20,804 / 24,564, 3) = 0.847.
  f = sglang_default_mem_fraction(24564, 2048, 24, 1);
  EXPECT_DOUBLE_EQ(f.reserved_mib, 3760);
  EXPECT_DOUBLE_EQ(f.mem_fraction_static, 0.847);
  // A100-80GB at tp 8 (81,920 MiB): 512 + 12,288 + 512 x 2 + 1,024 = 14,848; round(67,072 / 81,920, 3) = 0.819.
  f = sglang_default_mem_fraction(81920, 8192, 512, 8);
  EXPECT_DOUBLE_EQ(f.reserved_mib, 14848);
  EXPECT_DOUBLE_EQ(f.mem_fraction_static, 0.819);
  // A GPU above 60 GiB whose sum is under 10 GiB takes the floor: 65,536 MiB, chunks of 2048, 8 graphs:
  // 512 + 3,072 + 16 + 128 = 3,728 -> 10,240; round(55,296 / 65,536, 3) = round(0.84375, 3) = 0.844.
  f = sglang_default_mem_fraction(65536, 2048, 8, 1);
  EXPECT_DOUBLE_EQ(f.reserved_mib, 10240);
  EXPECT_DOUBLE_EQ(f.mem_fraction_static, 0.844);
}

TEST(SglangEngine, TokenPool) {
  // 1 GiB free, 256 MiB of weights, fraction 0.5, 1,024 B a token:
  // rest = 0.75 - 1 x 0.5 = 0.25 GiB = 268,435,456 B; // 1,024 = 262,144 tokens; pages of 100: 262,100.
  SglangTokenPool p = sglang_token_pool(1u << 30, 256u << 20, 0.5, 1024, 0, 1, 4096);
  EXPECT_EQ(p.profiled_tokens, 262144);
  EXPECT_EQ(p.max_total_num_tokens, 262144);
  // The request pool: min(max(int(262,144 / 4,096 x 512), 2048), 4096) = min(max(32,768, 2048), 4096) = 4096;
  // max_running_requests = min(262,144 // 2, 4096) = 4096.
  EXPECT_EQ(p.req_to_token_pool_size, 4096);
  EXPECT_EQ(p.max_running_requests, 4096);
  EXPECT_TRUE(p.starts);
  p = sglang_token_pool(1u << 30, 256u << 20, 0.5, 1024, 0, 100, 4096);
  EXPECT_EQ(p.max_total_num_tokens, 262100);
  p = sglang_token_pool(1u << 30, 256u << 20, 0.5, 1024, 5000, 1, 4096);
  EXPECT_EQ(p.max_total_num_tokens, 5000);
  // At a context of 1M tokens: int(262,144 / 1,048,576 x 512) = 128 -> 2048 requests.
  EXPECT_EQ(sglang_token_pool(1u << 30, 256u << 20, 0.5, 1024, 0, 1, 1 << 20).max_running_requests, 2048);
  // --max-total-tokens 3000: max_running_requests = min(3000 // 2, 4096) = 1500.
  EXPECT_EQ(sglang_token_pool(1u << 30, 256u << 20, 0.5, 1024, 3000, 1, 4096).max_running_requests, 1500);
  // The weights over the fraction: rest = 0.25 - 0.5 < 0, SGLang raises.
  p = sglang_token_pool(1u << 30, 768u << 20, 0.5, 1024, 0, 1, 4096);
  EXPECT_LT(p.profiled_tokens, 0);
  EXPECT_FALSE(p.starts);
}

TEST(TrtllmEngine, KvCache) {
  // 80 GiB, 16 GiB of weights, 2 GiB of activations, 1 GiB outside PyTorch, fraction 0.9, 131,072 B a token
  // (Llama-3.1-8B in bf16: 2 x 32 layers x 8 heads x 128 x 2): peak 19 GiB; (80 - 19) x 0.9 = 54.9 GiB =
  // 58,948,426,137.6 B; // 131,072 = 449,740 tokens (54.9 x 8,192 = 449,740.8); ceil(/ 32) = 14,055 blocks (14,054.375: a part block is
  // a whole one, calculate_max_num_blocks' math.ceil) = 449,760 tokens.
  const uint64_t gib = uint64_t{1} << 30;
  TrtllmKvCache c = trtllm_kv_cache(80 * gib, 16 * gib, 2 * gib, gib, 0.9, false, 131072, 131072, 32);
  EXPECT_EQ(c.peak_memory, 19 * gib);
  EXPECT_DOUBLE_EQ(c.available_bytes, 61.0 * gib * 0.9);
  EXPECT_EQ(c.max_tokens, 449740);
  EXPECT_EQ(c.blocks, 14055);
  EXPECT_EQ(c.tokens, 14055 * 32);
  EXPECT_TRUE(c.starts);
  // Nothing left: the weights alone over the total.
  c = trtllm_kv_cache(gib, 2 * gib, 0, 0, 0.9, false, 131072, 131072, 32);
  EXPECT_EQ(c.max_tokens, 0);
  EXPECT_FALSE(c.starts);
  // The fraction given (0.9): the cap 0.9 x (80 - 16 - 1) GiB / 131,072 = 464,486.4 tokens is above the estimate,
  // which stays.
  c = trtllm_kv_cache(80 * gib, 16 * gib, 2 * gib, gib, 0.9, true, 131072, 131072, 32);
  EXPECT_EQ(c.free_after, 63 * gib);
  EXPECT_DOUBLE_EQ(c.cap_tokens, 0.9 * 63.0 * gib / 131072);
  EXPECT_EQ(c.blocks, 14055);
}

TEST(TrtllmEngine, KvHeadsPerRank) {
  // (kv + tp - 1) // tp where duplicate_kv_weight loads the checkpoint: 8 heads over 2 ranks 4; 1 head over 2 ranks
  // 1 (replicated); 8 over 16: 1.
  EXPECT_EQ(trtllm_kv_heads_per_rank(8, 2, "m"), 4);
  EXPECT_EQ(trtllm_kv_heads_per_rank(1, 2, "m"), 1);
  EXPECT_EQ(trtllm_kv_heads_per_rank(8, 16, "m"), 1);
  EXPECT_EQ(trtllm_kv_heads_per_rank(3, 1, "m"), 3);
  // 6 heads over 4 ranks: 6 % 4 != 0; 3 heads over 4 ranks: 4 % 3 != 0; both asserted by duplicate_kv_weight.
  EXPECT_THROW(trtllm_kv_heads_per_rank(6, 4, "m"), InputError);
  EXPECT_THROW(trtllm_kv_heads_per_rank(3, 4, "m"), InputError);
}

TEST(TrtllmEngine, ReplicatedKvHeads) {
  // _get_cache_size_per_token: 2 B x 2 layers x (16 x 1 // 2 = 8) x 2 = 64 B (half of the one whole 16-wide head a
  // rank holds: 2 x 2 x 16 x 2 = 128 B); 1 x 2 x 8 x 2 = 32 B with an fp8 cache; Llama-3.1-8B (32 layers, 8 heads
  // of 128) at tp 2: 2 x 32 x (1024 // 2) x 2 = 65,536 B, the real bytes.
  EXPECT_EQ(trtllm_estimate_kv_per_token(2, 16, 1, 2, false), 64u);
  EXPECT_EQ(trtllm_estimate_kv_per_token(2, 16, 1, 2, true), 32u);
  EXPECT_EQ(trtllm_estimate_kv_per_token(32, 128, 8, 2, false), 65536u);
  // 1 GiB, 64 MiB of weights, 128 MiB of activations, 0 outside: available (1024 - 192) MiB x 0.9 = 785,173,708.8
  // B; // 64 = 12,268,339 tokens (12,268,339.2); fraction None: taken as it is, ceil(/ 32) = 383,386 blocks (383,385.59)
  // = 12,268,352 tokens x 128 B = 1,570,349,056 B, over the 960 MiB = 1,006,632,960 B free after profiling: the pool does not fit.
  const uint64_t mib = uint64_t{1} << 20;
  TrtllmKvCache c = trtllm_kv_cache(1024 * mib, 64 * mib, 128 * mib, 0, 0.9, false, 64, 128, 32);
  EXPECT_EQ(c.estimate_kv_per_token, 64u);
  EXPECT_EQ(c.max_tokens, 12268339);
  EXPECT_EQ(c.free_after, 960 * mib);
  EXPECT_EQ(c.blocks, 383386);
  EXPECT_EQ(c.pool_bytes, 1570349056u);
  EXPECT_FALSE(c.pool_fits);
  EXPECT_FALSE(c.starts);
  // Fraction set (0.9): the cap 0.9 x 1,006,632,960 / 128 = 7,077,888 tokens (exactly) is the smaller:
  // / 32 = 221,184 blocks exactly = 7,077,888 tokens, 905,969,664 B, which fits.
  c = trtllm_kv_cache(1024 * mib, 64 * mib, 128 * mib, 0, 0.9, true, 64, 128, 32);
  EXPECT_EQ(c.max_tokens, 12268339);
  EXPECT_DOUBLE_EQ(c.cap_tokens, 7077888.0);
  EXPECT_EQ(c.blocks, 221184);
  EXPECT_EQ(c.tokens, 7077888);
  EXPECT_EQ(c.pool_bytes, 905969664u);
  EXPECT_TRUE(c.starts);
}

TEST(TrtllmEngine, QuantizedCheckpoints) {
  // FP8BlockScalesLinearMethod: input_scale and inv_input_scale, float32 scalars: 8 B a module; 8 modules 64 B.
  EXPECT_EQ(trtllm_fp8_block_scalar_bytes(8), 64u);
  EXPECT_EQ(trtllm_fp8_block_scalar_bytes(0), 0u);
  // Block fp8 128 x 128 on 9.0 at tp 2 over 2 KV heads: loaded. Unquantized: nothing to check.
  EXPECT_NO_THROW(trtllm_quantization_check("fp8", 128, 128, 90, 2, 2, "m"));
  EXPECT_NO_THROW(trtllm_quantization_check("", 0, 0, 80, 1, 8, "m"));
  // _update_from_hf_quant_config raises NotImplementedError for per-tensor fp8, gptq, awq; the block is 128 only;
  // tp 4 over 2 KV heads repeats the weights, not the scales; 8.9 runs another GEMM.
  EXPECT_THROW(trtllm_quantization_check("fp8", 0, 0, 90, 2, 1, "m"), InputError);
  EXPECT_THROW(trtllm_quantization_check("gptq", 0, 0, 90, 2, 1, "m"), InputError);
  EXPECT_THROW(trtllm_quantization_check("awq", 0, 0, 90, 2, 1, "m"), InputError);
  EXPECT_THROW(trtllm_quantization_check("fp8", 64, 64, 90, 2, 1, "m"), InputError);
  EXPECT_THROW(trtllm_quantization_check("fp8", 128, 128, 90, 2, 4, "m"), InputError);
  EXPECT_THROW(trtllm_quantization_check("fp8", 128, 128, 89, 2, 1, "m"), InputError);
}


// SGLang's hybrid sliding-window split (cost_models/sglang_swa.h: model_runner_kv_cache_mixin.py
// set_num_tokens_hybrid_swa), on gpt-oss-20b's shape: 24 layers, layer_types alternating sliding / full (12 each),
// 8 KV heads, head_dim 64, bf16: F = S = 8 x (64 + 64) x 2 B = 2,048 B a token and layer.
TEST(SglangSwa, GptOss20bSplitByHand) {
  // max_total_num_tokens 1,000,000: total_memory = 1,000,000 x (2,048 x 12 + 2,048 x 12) = 49,152,000,000;
  // denominator = 2,048 x 12 + 0.8 x 2,048 x 12 = 24,576 + 19,660.8 = 44,236.8;
  // full = int(49,152,000,000 / 44,236.8) = int(1,111,111.11) = 1,111,111; swa = int(1,111,111 x 0.8) =
  // int(888,888.8) = 888,888; page 1 keeps both. The index mapping: (1,111,111 + 1 + 1) x 8 B = 8,888,904 B.
  const SglangSwaSplit s = sglang_swa_split(1000000, 2048, 12, 2048, 12, 0.8, 1);
  EXPECT_EQ(s.total_memory, 49152000000u);
  EXPECT_DOUBLE_EQ(s.denominator, 44236.8);
  EXPECT_EQ(s.full_layer_tokens, 1111111);
  EXPECT_EQ(s.swa_layer_tokens, 888888);
  EXPECT_EQ(s.index_mapping_bytes, 8888904u);
  // Pages of 16: 1,111,111 // 16 x 16 = 69,444 x 16 = 1,111,104; 888,888 // 16 x 16 = 55,555 x 16 = 888,880.
  const SglangSwaSplit p = sglang_swa_split(1000000, 2048, 12, 2048, 12, 0.8, 16);
  EXPECT_EQ(p.full_layer_tokens, 1111104);
  EXPECT_EQ(p.swa_layer_tokens, 888880);
  // Ratio 1: denominator 2,048 x 24 = 49,152, full = 1,000,000 = swa: one pool's worth in each.
  const SglangSwaSplit one = sglang_swa_split(1000000, 2048, 12, 2048, 12, 1.0, 1);
  EXPECT_EQ(one.full_layer_tokens, 1000000);
  EXPECT_EQ(one.swa_layer_tokens, 1000000);
  // Ratio 0.5: denominator 24,576 + 12,288 = 36,864; full = int(49,152,000,000 / 36,864) = int(1,333,333.33) =
  // 1,333,333; swa = int(666,666.5) = 666,666.
  const SglangSwaSplit half = sglang_swa_split(1000000, 2048, 12, 2048, 12, 0.5, 1);
  EXPECT_EQ(half.full_layer_tokens, 1333333);
  EXPECT_EQ(half.swa_layer_tokens, 666666);
}

TEST(SglangSwa, AllWindowedAndUnequalLayers) {
  // No full layer ("all SWA"): swa = the page-rounded tokens, 1,001 // 16 x 16 = 992; full 0.
  const SglangSwaSplit all = sglang_swa_split(1001, 2048, 0, 2048, 24, 0.8, 16);
  EXPECT_EQ(all.full_layer_tokens, 0);
  EXPECT_EQ(all.swa_layer_tokens, 992);
  // F 4,096 over 1 full layer, S 1,024 over 3 windowed: cell = 4,096 + 3,072 = 7,168; 100 tokens: total 716,800;
  // denominator = 4,096 + 0.8 x 3,072 = 6,553.6; full = int(716,800 / 6,553.6) = int(109.375) = 109;
  // swa = int(87.2) = 87.
  const SglangSwaSplit mixed = sglang_swa_split(100, 4096, 1, 1024, 3, 0.8, 1);
  EXPECT_EQ(mixed.full_layer_tokens, 109);
  EXPECT_EQ(mixed.swa_layer_tokens, 87);
  EXPECT_THROW(sglang_swa_split(100, 2048, 12, 2048, 0, 0.8, 1), std::logic_error);
}

}  // namespace
}  // namespace memplan
