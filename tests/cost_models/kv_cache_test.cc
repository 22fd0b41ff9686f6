// The KV-cache analysis on shaped graphs (cost_models/kv_cache.h), on tests/models/serve/make_kv_tiny.py's models:
// 2 layers, 2 KV heads, head_dim 4, float32; kv_tiny names its dimensions as optimum does (batch,
// past_sequence_length, sequence_length), kv_tiny_renamed (b, cached, new) and its tensors otherwise.
#include "cost_models/kv_cache.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "onnx_import/errors.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/model_reader.h"
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

void expect_same(const KvCache& a, const KvCache& b, const std::string& what) {
  EXPECT_EQ(a.cached_dim, b.cached_dim) << what;
  EXPECT_EQ(a.new_dim, b.new_dim) << what;
  EXPECT_EQ(a.pairs, b.pairs) << what;
  EXPECT_EQ(a.bytes_per_token, b.bytes_per_token) << what;
  EXPECT_EQ(a.kv_heads, b.kv_heads) << what;
  EXPECT_EQ(a.head_dim, b.head_dim) << what;
  EXPECT_EQ(a.derived, b.derived) << what;
  EXPECT_EQ(a.batch_dims, b.batch_dims) << what;
}

// A config.json's decode graph states its cache (ModelSession::stated_kv_cache), which find_kv_cache reads without
// shaping the graph. The same graph written out as an ONNX file states nothing and is probed: both must agree, on
// every architecture's layout (dense, windowed, fused projections, experts, MLA's decompressed keys), in both
// storage types, and the stated one must shape nothing.
TEST(KvCacheAnalysis, AConfigsStatedCacheIsWhatTheProbesFind) {
  const std::string configs = std::string(MEMPLAN_ZOO_DIR) + "/hf_configs/";
  const std::string tiny_mla = ::testing::TempDir() + "/tiny_deepseek_v3.json";
  std::ofstream(tiny_mla) << R"({"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 96,
    "moe_intermediate_size": 32, "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
    "n_group": 2, "topk_group": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": true, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16, "v_head_dim": 16, "vocab_size": 128, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
  for (const std::string& path :
       {configs + "Llama-3.2-1B.json", configs + "Qwen2.5-0.5B.json", configs + "gemma-3-270m.json",
        configs + "Phi-3-mini-4k-instruct.json", configs + "gpt-oss-20b.json", tiny_mla}) {
    ModelSession stated(path, "decode", "", /*vllm_serve=*/true);
    ASSERT_FALSE(stated.stated_kv_cache().pairs.empty()) << path;
    const std::string onnx_path = ::testing::TempDir() + "/stated_kv.onnx";
    {
      const ReadModel read = read_config_model(path, "decode", "", /*vllm_serve=*/true);
      std::ofstream out(onnx_path, std::ios::binary);
      ASSERT_TRUE(read.proto.SerializeToOstream(&out)) << path;
    }
    ModelSession probed(onnx_path);
    ASSERT_TRUE(probed.stated_kv_cache().pairs.empty()) << path;
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      expect_same(find_kv_cache(stated, {}, "", dtype), find_kv_cache(probed, {}, "", dtype), path);
      EXPECT_EQ(find_kv_cache(stated, {}, "past_sequence_length", dtype).bytes_per_token,
                find_kv_cache(probed, {}, "", dtype).bytes_per_token) << path;
    }
    EXPECT_EQ(stated.graphs_shaped(), 0) << path;
    EXPECT_GT(probed.graphs_shaped(), 0) << path;
    // --kv-dim naming another dimension is probed, and refused as a file's would be.
    EXPECT_THROW(find_kv_cache(stated, {}, "sequence_length", DType::Float32), InputError) << path;
  }
}

}  // namespace
}  // namespace memplan
