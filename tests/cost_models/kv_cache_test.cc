// The KV-cache analysis on shaped graphs (cost_models/kv_cache.h), on tests/models/serve/make_kv_tiny.py's models:
// 2 layers, 2 KV heads, head_dim 4, float32; kv_tiny names its dimensions as optimum does (batch,
// past_sequence_length, sequence_length), kv_tiny_renamed (b, cached, new) and its tensors otherwise.
#include "cost_models/kv_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "onnx_import/errors.h"
#include "onnx_import/model_session.h"

namespace memplan {
namespace {

std::string model(const char* name) { return std::string(MEMPLAN_ZOO_DIR) + "/serve/" + name; }

TEST(KvCacheAnalysis, FindsTheCacheFromTheDeclaredInputsAndTwoProbes) {
  for (const auto& [name, batch, cached, fresh, past0] :
       std::vector<std::tuple<const char*, const char*, const char*, const char*, const char*>>{
           {"kv_tiny.onnx", "batch", "past_sequence_length", "sequence_length", "past_key_values.0.key"},
           {"kv_tiny_renamed.onnx", "b", "cached", "new", "cache_in_0_k"}}) {
    ModelSession session(model(name));
    // The file declares input_ids [batch, sequence_length] and four past inputs [batch, 2, past, 4].
    const std::vector<DeclaredInput>& inputs = session.declared_inputs();
    ASSERT_EQ(inputs.size(), 5u) << name;
    EXPECT_EQ(inputs[1].name, past0);
    EXPECT_EQ(inputs[1].dims, (std::vector<std::string>{batch, "", cached, ""}));
    const KvCache kv = find_kv_cache(session, {}, "", DType::Float32);
    EXPECT_EQ(session.files_read(), 1);
    EXPECT_EQ(kv.cached_dim, cached);
    EXPECT_EQ(kv.new_dim, fresh);
    EXPECT_EQ(kv.batch_dims, std::vector<std::string>{batch});
    ASSERT_EQ(kv.pairs.size(), 4u);  // K and V of 2 layers
    EXPECT_EQ(kv.pairs[0].first, past0);
    // 2 (K, V) x 2 layers x 2 KV heads x 4 head_dim x 4 bytes = 128 B a token of one sequence; 64 B in fp16.
    EXPECT_EQ(kv.bytes_per_token, 128u);
    EXPECT_EQ(find_kv_cache(session, {}, "", DType::Float16).bytes_per_token, 64u);
  }
}

TEST(KvCacheAnalysis, ProbesOneSequenceWhateverTheUserBound) {
  ModelSession session(model("kv_tiny.onnx"));
  Bindings user;
  user.dims = {{"batch", 4}, {"past_sequence_length", 99}, {"sequence_length", 16}};
  EXPECT_TRUE(kv_probe_bindings(session, user).dims.empty());
  // Bound by the user, the batch would count in the bytes per token: 4 x 128 B.
  EXPECT_EQ(find_kv_cache(session, kv_probe_bindings(session, user), "", DType::Float32).bytes_per_token, 128u);
}

TEST(KvCacheAnalysis, NoCacheIsAnInputError) {
  ModelSession session(model("no_kv_tiny.onnx"));
  EXPECT_THROW(find_kv_cache(session, {}, "", DType::Float32), InputError);
}

}  // namespace
}  // namespace memplan
