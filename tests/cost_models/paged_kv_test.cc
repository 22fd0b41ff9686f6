// vLLM's paged KV cache and budget rule (cost_models/paged_kv.h), by hand.
#include <gtest/gtest.h>

#include "cost_models/paged_kv.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

// kv_tiny's cache: 2 layers x 2 KV heads x head_dim 4 x 2 (keys and values) x 4 B = 128 B a token.
TEST(PagedKvCache, SequencesTakeWholeBlocks) {
  const PagedKvCache cache{16, 128};
  EXPECT_EQ(cache.block_bytes(), 2048u);     // 16 tokens x 128 B
  EXPECT_EQ(cache.blocks_for(16), 1);
  EXPECT_EQ(cache.blocks_for(17), 2);        // one token more takes a second block
  EXPECT_EQ(cache.bytes_for(3, 17), 12288u); // 3 sequences x 2 blocks x 2048 B
}

TEST(PagedKvCache, TheLargerStepIsAddedToTheBlocks) {
  const PagedKvCache cache{16, 128};
  EXPECT_EQ(serving_required_bytes(cache, 3, 17, 1000, 5000), 12288u + 5000u);  // decode larger
  EXPECT_EQ(serving_required_bytes(cache, 3, 17, 9000, 5000), 12288u + 9000u);  // the profiled prefill larger
}

TEST(PagedKvCache, OverflowIsAShapeOverflow) {
  const PagedKvCache cache{16, uint64_t{1} << 62};
  EXPECT_THROW(cache.block_bytes(), ShapeOverflow);
}

}  // namespace
}  // namespace memplan
