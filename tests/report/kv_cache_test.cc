// The KV-cache phases of `estimate` come from the session that shaped the estimate's graph: the file is read once.
// tests/models/serve/make_kv_tiny.py's kv_tiny: 2 layers, 2 KV heads, head_dim 4, float32.
#include "report/kv_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "onnx_import/model_session.h"
#include "report/estimate.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

TEST(EstimateKvPhases, ReadsTheModelOnceWithTheEstimate) {
  // Before, estimate_kv_phases read the file a second time and, when that read failed, the section was silently
  // left out. Here the file is gone after the estimate's graph is shaped: the phases still come.
  const std::filesystem::path dir = testing::process_temp_dir("memplan_kv_cache_test");
  const std::filesystem::path path = dir / "kv_tiny.onnx";
  std::filesystem::copy_file(std::string(MEMPLAN_ZOO_DIR) + "/serve/kv_tiny.onnx", path,
                             std::filesystem::copy_options::overwrite_existing);
  ModelSession session(path.string());
  Bindings user;
  user.batch = 3;
  user.dims = {{"past_sequence_length", 99}, {"sequence_length", 16}};
  const auto graph = session.shape(user);
  std::filesystem::remove_all(dir);

  EstimateOptions options;
  const Estimate e = estimate_graph(*graph, options);
  const std::optional<KvPhases> kv = estimate_kv_phases(session, user, *graph, options, e.breakdown.weights);
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(session.files_read(), 1);
  EXPECT_EQ(kv->cached_dim, "past_sequence_length");
  EXPECT_EQ(kv->new_dim, "sequence_length");
  // 2 (K, V) x 2 layers x 2 KV heads x 4 head_dim x 4 bytes = 128 B a token of one sequence.
  EXPECT_EQ(kv->bytes_per_token, 128u);
  // Decode: 3 sequences x (99 cached + 1 new) x 128 B = 38,400 B; prefill: 3 x 16 x 128 B = 6,144 B.
  EXPECT_EQ(kv->decode.batch, 3);
  EXPECT_EQ(kv->decode.kv_cache_bytes, 38400u);
  EXPECT_EQ(kv->prefill.kv_cache_bytes, 6144u);
}

}  // namespace
}  // namespace memplan
