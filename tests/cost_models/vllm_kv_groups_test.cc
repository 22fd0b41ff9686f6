// vLLM's hybrid KV cache groups (cost_models/vllm_kv_groups.h), every figure by hand from the published layer
// patterns (transformers' Gemma2DecoderLayer: even layers slide; Gemma3TextConfig: layer l is full when
// (l + 1) % 6 == 0).
#include "cost_models/vllm_kv_groups.h"

#include <gtest/gtest.h>

namespace memplan {
namespace {

std::vector<int64_t> gemma2_9b() {  // 42 layers, window 4096 on the even ones
  std::vector<int64_t> w;
  for (int l = 0; l < 42; ++l) w.push_back(l % 2 == 0 ? 4096 : 0);
  return w;
}

std::vector<int64_t> gemma3_1b() {  // 26 layers, window 512, full at 5, 11, 17, 23
  std::vector<int64_t> w;
  for (int l = 0; l < 26; ++l) w.push_back((l + 1) % 6 == 0 ? 0 : 512);
  return w;
}

TEST(VllmKvGroups, Gemma2AlternatingIsTwoGroupsOfTwentyOne) {
  const VllmKvGrouping g = vllm_kv_groups(gemma2_9b());
  EXPECT_EQ(g.group_size, 21);
  ASSERT_EQ(g.groups.size(), 2u);
  EXPECT_EQ(g.groups[0].window, 4096);  // layer 0's kind first
  EXPECT_EQ(g.groups[1].window, 0);
  EXPECT_EQ(g.groups[0].layers, 21);
  EXPECT_EQ(g.padding_layers, 0);
  // One layer: 2 (K, V) x 8 KV heads x 256 x 2 B (bf16) = 8,192 B a token, a page of 16 tokens 131,072 B; a block
  // of the 21 pools 2,752,512 B. At max_model_len 8192 with steps of 8192 tokens a request holds the sliding
  // group's cdiv(min(4095 + 8192, 8192), 16) + 1 = 513 blocks and the full group's 512: 1,025.
  EXPECT_EQ(vllm_grouped_blocks_per_request(g, 16, 8192, 8192), 1025);
  const VllmKvCapacity c = vllm_grouped_kv_capacity(int64_t{3075} * 2752512 + 2752511, g, 16, 8192, 8192, 8192);
  EXPECT_EQ(c.num_blocks, 3075);                // one more block would need one more byte
  EXPECT_EQ(c.tokens, 3075 / 2 * 16);           // 24,592: num_blocks // groups x block_size
  EXPECT_DOUBLE_EQ(c.max_concurrency, 3.0);     // 3,075 / 1,025
  EXPECT_TRUE(c.starts);
  // 1,000 blocks: a request of 8192 takes 1,025, so vLLM refuses; the longest that fits holds
  // 2 cdiv(m, 16) + 1 <= 1,000 blocks: cdiv(m, 16) <= 499, m = 7,984.
  const VllmKvCapacity no = vllm_grouped_kv_capacity(int64_t{1000} * 2752512, g, 16, 8192, 8192, 8192);
  EXPECT_FALSE(no.starts);
  EXPECT_EQ(no.estimated_max_model_len, 7984);
}

TEST(VllmKvGroups, Gemma3FiveToOneIsSevenGroupsOfFourWithTwoPaddingLayers) {
  const VllmKvGrouping g = vllm_kv_groups(gemma3_1b());
  // 22 sliding and 4 full layers: group_size 4 (22 is not below 1.5 x 4); the sliding layers in cdiv(22, 4) = 6
  // groups, layers[i::6]: 4, 4, 4, 4, 3, 3 (2 padding slots), the full ones in one.
  EXPECT_EQ(g.group_size, 4);
  ASSERT_EQ(g.groups.size(), 7u);
  const int64_t sliding[] = {4, 4, 4, 4, 3, 3};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(g.groups[i].layers, sliding[i]) << i;
  EXPECT_EQ(g.groups[6].window, 0);
  EXPECT_EQ(g.groups[6].layers, 4);
  EXPECT_EQ(g.padding_layers, 2);
  // One layer: 2 x 1 KV head x 256 x 2 B = 1,024 B a token, a page 16,384 B, a block of the 4 pools 65,536 B.
  // At max_model_len 32768 with steps of 8192: six sliding groups of cdiv(min(511 + 8192, 32768), 16) + 1 =
  // cdiv(8703, 16) + 1 = 545 blocks and the full group's 2,048: 5,318 a request.
  EXPECT_EQ(vllm_grouped_blocks_per_request(g, 16, 32768, 8192), 5318);
  const VllmKvCapacity c = vllm_grouped_kv_capacity(int64_t{10636} * 65536, g, 16, 1024, 32768, 8192);
  EXPECT_EQ(c.num_blocks, 10636);
  EXPECT_EQ(c.tokens, 1519 * 16);  // 10,636 // 7 = 1,519
  EXPECT_DOUBLE_EQ(c.max_concurrency, 2.0);
  EXPECT_TRUE(c.starts);
}

TEST(VllmKvGroups, NearlyEqualKindsArePaddedToTheLarger) {
  // 12 sliding + 13 full (kv_cache_utils.py's gpt-oss-20b + eagle example): 13 < 1.5 x 12, so group_size 13 and
  // the sliding kind padded by one, not 12 with the full kind in two groups.
  std::vector<int64_t> w(12, 128);
  w.insert(w.end(), 13, 0);
  const VllmKvGrouping g = vllm_kv_groups(w);
  EXPECT_EQ(g.group_size, 13);
  ASSERT_EQ(g.groups.size(), 2u);
  EXPECT_EQ(g.groups[0].layers, 12);
  EXPECT_EQ(g.padding_layers, 1);
}

TEST(VllmKvGroups, OneKindIsOneGroupAsTheUniformRule) {
  // Every layer full: one group of all; its blocks and concurrency are vllm_kv_capacity's.
  const VllmKvGrouping g = vllm_kv_groups(std::vector<int64_t>(32, 0));
  EXPECT_EQ(g.group_size, 32);
  ASSERT_EQ(g.groups.size(), 1u);
  const VllmKvCapacity grouped = vllm_grouped_kv_capacity(int64_t{1000} * 2048 * 32, g, 16, 128, 32768, 8192);
  const VllmKvCapacity uniform = vllm_kv_capacity(int64_t{1000} * 2048 * 32, PagedKvCache{16, 128 * 32}, 32768);
  EXPECT_EQ(grouped.num_blocks, uniform.num_blocks);
  EXPECT_EQ(grouped.tokens, uniform.tokens);
  EXPECT_EQ(grouped.blocks_per_request, uniform.blocks_per_request);
}

}  // namespace
}  // namespace memplan
