// vLLM's hybrid KV cache groups (cost_models/vllm_kv_groups.h), every figure by hand from the published layer
// patterns (transformers' Gemma2DecoderLayer: even layers slide; Gemma3TextConfig: layer l is full when
// (l + 1) % 6 == 0). The releases' grouping and start check as read at vLLM's tags (VllmKvStartCheck).
#include "cost_models/vllm_kv_groups.h"

#include <gtest/gtest.h>

namespace memplan {
namespace {

constexpr int kPad150 = 6;  // 0.17.2 on: n_max < 1.5 n_min
constexpr VllmKvStartCheck kEveryGroup = VllmKvStartCheck::EveryGroup;

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
  const VllmKvGrouping g = vllm_kv_groups(gemma2_9b(), kPad150);
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
  const VllmKvCapacity c = vllm_grouped_kv_capacity(int64_t{3075} * 2752512 + 2752511, g, 16, 8192, 8192, 8192, kEveryGroup);
  EXPECT_EQ(c.num_blocks, 3075);                // one more block would need one more byte
  EXPECT_EQ(c.tokens, 3075 / 2 * 16);           // 24,592: num_blocks // groups x block_size
  EXPECT_DOUBLE_EQ(c.max_concurrency, 3.0);     // 3,075 / 1,025
  EXPECT_TRUE(c.starts);
  // 1,000 blocks: a request of 8192 takes 1,025, so vLLM refuses; the longest that fits holds
  // 2 cdiv(m, 16) + 1 <= 1,000 blocks: cdiv(m, 16) <= 499, m = 7,984.
  const VllmKvCapacity no = vllm_grouped_kv_capacity(int64_t{1000} * 2752512, g, 16, 8192, 8192, 8192, kEveryGroup);
  EXPECT_FALSE(no.starts);
  EXPECT_EQ(no.estimated_max_model_len, 7984);
}

TEST(VllmKvGroups, Gemma3FiveToOneIsSevenGroupsOfFourWithTwoPaddingLayers) {
  const VllmKvGrouping g = vllm_kv_groups(gemma3_1b(), kPad150);
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
  const VllmKvCapacity c = vllm_grouped_kv_capacity(int64_t{10636} * 65536, g, 16, 1024, 32768, 8192, kEveryGroup);
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
  const VllmKvGrouping g = vllm_kv_groups(w, kPad150);
  EXPECT_EQ(g.group_size, 13);
  ASSERT_EQ(g.groups.size(), 2u);
  EXPECT_EQ(g.groups[0].layers, 12);
  EXPECT_EQ(g.padding_layers, 1);
}

TEST(VllmKvGroups, OneKindIsOneGroupAsTheUniformRule) {
  // Every layer full: one group of all; its blocks and concurrency are vllm_kv_capacity's.
  const VllmKvGrouping g = vllm_kv_groups(std::vector<int64_t>(32, 0), kPad150);
  EXPECT_EQ(g.group_size, 32);
  ASSERT_EQ(g.groups.size(), 1u);
  const VllmKvCapacity grouped = vllm_grouped_kv_capacity(int64_t{1000} * 2048 * 32, g, 16, 128, 32768, 8192, kEveryGroup);
  const VllmKvCapacity uniform = vllm_kv_capacity(int64_t{1000} * 2048 * 32, PagedKvCache{16, 128 * 32}, 32768);
  EXPECT_EQ(grouped.num_blocks, uniform.num_blocks);
  EXPECT_EQ(grouped.tokens, uniform.tokens);
  EXPECT_EQ(grouped.blocks_per_request, uniform.blocks_per_request);
}

TEST(VllmKvGroups, ThePaddingHeuristicByRelease) {
  // kv_cache_utils.py _get_kv_cache_groups_uniform_page_size: v0.11.0/v0.11.2 group_size = min_num_layers; v0.12.0
  // to v0.17.1rc0 `max_num_layers < min_num_layers * 1.25`; v0.17.2rc0 and v0.18.0 `* 1.5`.
  EXPECT_EQ(vllm_rule("0.11.2").kv_group_pad_quarters, 0);
  EXPECT_EQ(vllm_rule("0.12.0").kv_group_pad_quarters, 5);
  EXPECT_EQ(vllm_rule("0.17.1").kv_group_pad_quarters, 5);
  EXPECT_EQ(vllm_rule("0.17.2").kv_group_pad_quarters, 6);
  EXPECT_EQ(vllm_rule("0.20").kv_group_pad_quarters, 6);
  // 12 sliding + 13 full: 13 < 1.25 x 12 = 15, so 0.12 on pads the sliding kind to 13; 0.11 groups by 12, the
  // full kind in cdiv(13, 12) = 2 groups of 7 and 6 with 11 padding slots.
  std::vector<int64_t> w(12, 128);
  w.insert(w.end(), 13, 0);
  const VllmKvGrouping v11 = vllm_kv_groups(w, 0), v12 = vllm_kv_groups(w, 5);
  EXPECT_EQ(v11.group_size, 12);
  ASSERT_EQ(v11.groups.size(), 3u);
  EXPECT_EQ(v11.groups[1].layers, 7);
  EXPECT_EQ(v11.groups[2].layers, 6);
  EXPECT_EQ(v11.padding_layers, 11);
  EXPECT_EQ(v12.group_size, 13);
  EXPECT_EQ(v12.padding_layers, 1);
  // 4 sliding + 3 full: 4 is not below 1.25 x 3 = 3.75 but is below 1.5 x 3 = 4.5.
  std::vector<int64_t> x = {64, 0, 64, 0, 64, 0, 64};
  EXPECT_EQ(vllm_kv_groups(x, 5).group_size, 3);
  EXPECT_EQ(vllm_kv_groups(x, 5).padding_layers, 2);  // the sliding kind's 4 in 2 groups of 3 slots
  EXPECT_EQ(vllm_kv_groups(x, 6).group_size, 4);
  EXPECT_EQ(vllm_kv_groups(x, 6).padding_layers, 1);
}

TEST(VllmKvGroups, TheStartCheckByRelease) {
  EXPECT_EQ(vllm_rule("0.13.0").kv_start_check, VllmKvStartCheck::EveryLayer);
  EXPECT_EQ(vllm_rule("0.14.0").kv_start_check, VllmKvStartCheck::FirstGroup);
  EXPECT_EQ(vllm_rule("0.18.0").kv_start_check, VllmKvStartCheck::FirstGroup);
  EXPECT_EQ(vllm_rule("0.18.1").kv_start_check, VllmKvStartCheck::EveryGroup);
  // Gemma 3 1B at max_model_len 32768, steps of 8192: group_size 4, six sliding groups of 545 blocks a request
  // (22 layers, 2 padding slots) and one full group of 2,048; a page 16,384 B. One request asks, in pages:
  //   every layer (0.11 to 0.13): 22 x 545 + 4 x 2,048 = 20,182
  //   every group (0.18.1 on):    4 x (6 x 545 + 2,048) = 21,272
  //   the first group (0.14 to 0.18.0): layer 0 slides, so 4 x 545 = 2,180
  const VllmKvGrouping g = vllm_kv_groups(gemma3_1b(), 5);
  ASSERT_EQ(g.group_size, 4);
  const int64_t page = 16 * 1024;
  auto capacity = [&](int64_t available, VllmKvStartCheck check) {
    return vllm_grouped_kv_capacity(available, g, 16, 1024, 32768, 8192, check);
  };
  EXPECT_EQ(capacity(page, VllmKvStartCheck::EveryLayer).start_check_bytes, uint64_t(20182 * page));
  EXPECT_EQ(capacity(page, kEveryGroup).start_check_bytes, uint64_t(21272 * page));
  EXPECT_EQ(capacity(page, VllmKvStartCheck::FirstGroup).start_check_bytes, uint64_t(2180 * page));
  // Exactly 20,182 pages: 0.13 starts, a byte less it does not; 0.18.1 does not.
  EXPECT_TRUE(capacity(20182 * page, VllmKvStartCheck::EveryLayer).starts);
  EXPECT_FALSE(capacity(20182 * page - 1, VllmKvStartCheck::EveryLayer).starts);
  EXPECT_FALSE(capacity(20182 * page, kEveryGroup).starts);
  // 20,000 pages. 0.13: the longest m with 22 x 545 + 4 cdiv(m, 16) <= 20,000 is cdiv(m, 16) = 2,002, m = 32,032.
  // 0.18.1: 6 x 545 + cdiv(m, 16) <= 5,000, m = 1,730 x 16 = 27,680. 0.14 to 0.18.0 start with 5,000 blocks of
  // the 4 pools, a request of 32768 needing 5,318: a maximum concurrency below 1.
  const VllmKvCapacity v13 = capacity(20000 * page, VllmKvStartCheck::EveryLayer);
  EXPECT_FALSE(v13.starts);
  EXPECT_EQ(v13.estimated_max_model_len, 32032);
  const VllmKvCapacity v181 = capacity(20000 * page, kEveryGroup);
  EXPECT_FALSE(v181.starts);
  EXPECT_EQ(v181.estimated_max_model_len, 27680);
  const VllmKvCapacity v16 = capacity(20000 * page, VllmKvStartCheck::FirstGroup);
  EXPECT_TRUE(v16.starts);
  EXPECT_EQ(v16.num_blocks, 5000);
  EXPECT_DOUBLE_EQ(v16.max_concurrency, 5000.0 / 5318.0);
}

}  // namespace
}  // namespace memplan
