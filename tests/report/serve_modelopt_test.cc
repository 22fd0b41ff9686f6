// A ModelOpt FP8 checkpoint (onnx_import/hf_modelopt.h) under serve: what is read from hf_quant_config.json, the
// excluded modules found in the graph, vLLM's refusals (report/serve_vllm.h, serve_vllm_modelopt.cc) and each engine's weights and KV
// bytes by hand (report/serve_engines.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "onnx_import/errors.h"
#include "report/serve_engines.h"
#include "report/serve_vllm.h"

namespace memplan {
namespace {

// The dense llama of tests/cli/test_serve_modelopt.py: hidden 512, 4 heads of 128, 2 KV heads, intermediate 768,
// 2 layers, vocab 512, bf16.
constexpr const char* kTinyLlama = R"({"model_type": "llama", "hidden_size": 512, "intermediate_size": 768,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": false,
 "torch_dtype": "bfloat16", "hidden_act": "silu"})";

std::string checkpoint(const std::string& name, const std::string& quant) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("memplan_modelopt_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << kTinyLlama;
  if (!quant.empty()) std::ofstream(dir / "hf_quant_config.json") << quant;
  return (dir / "config.json").string();
}

constexpr const char* kFile = R"({"producer": {"name": "modelopt", "version": "0.19.0"}, "quantization":
 {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head", "model.layers.1.mlp.down_proj"]}})";

ServeSettings settings(const std::string& engine) {
  ServeSettings s;
  s.engine = engine;
  s.context = 64;
  s.max_batched_tokens = 64;
  s.max_num_seqs = 64;
  s.max_num_tokens = 64;
  s.mem_fraction_static = 0.5;
  return s;
}

EstimateOptions bf16() {
  EstimateOptions o;
  o.inference.float_dtype = DType::BFloat16;
  o.execution.cuda_arch_major = 9;
  return o;
}

EngineAnswer answer(const std::string& path, ServeEngine engine, const std::string& name) {
  ServeSettings s = settings(name);
  if (engine == ServeEngine::Sglang) s.kv_cache_dtype = "fp8";  // its auto on kv_cache_quant_algo FP8 is refused
  Bindings b;
  b.graph = "decode";
  ServeProbe probe(path, b, s, bf16());
  return serve_engine(probe, s, engine, 1, uint64_t{80} << 30, "H100-80GB", "test", 0, 90, true);
}

TEST(ServeModelOpt, ReadsTheFileBesideTheConfigAndFindsTheExcludedModule) {
  const std::string path = checkpoint("read", kFile);
  Bindings b;
  b.graph = "decode";
  ServeProbe probe(path, b, settings("vllm"), bf16());
  const StoredQuantization& q = probe.stored_quantization();
  EXPECT_EQ(q.method, "fp8");
  EXPECT_TRUE(q.static_activations && q.modelopt && q.modelopt_file && q.modelopt_kv_fp8);
  ASSERT_EQ(q.excluded_modules, std::vector<std::string>{"model.layers.1.mlp.down_proj"});  // lm_head dropped
  const std::set<std::string> nodes = modelopt_excluded_nodes(*probe.shape_step(1, 0, 64), q, path);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_NE(nodes.begin()->find("down_proj"), std::string::npos);
}

TEST(ServeModelOpt, EachEngineByHand) {
  const std::string plain = checkpoint("plain", ""), modelopt = checkpoint("engines", kFile);
  // Linear modules a layer: qkv 1,024 x 512, o 512 x 512, gate_up 1,536 x 512, down 512 x 768; layer 1's down_proj
  // excluded (bf16). bf16: 7,864,320 B of linear weights for the two layers.
  //  vLLM: 7 modules of fp8 + 8 B: 3,932,160 - 393,216 + 56 = 3,539,000, + 786,432 bf16 = 4,325,432: 3,538,888 less.
  //  SGLang: + 4 x out_p + 4 a module (out_p 1,024, 512, 1,536, 512 and 1,024, 512, 1,536): 3,538,944 + 4 x 6,656
  //    + 28 = 3,565,596, + 786,432 = 4,352,028, + 16 B of k_scale / v_scale (kv_cache_quant_algo FP8): 3,512,276 less.
  //  TensorRT-LLM: + 36 B a module: 3,538,944 + 252 + 786,432 = 4,325,628: 3,538,692 less; its KV cache fp8, 1,024 B
  //    a token (2 x 2 layers x 2 heads x 128), where vLLM 0.11's auto stays bf16 (2,048); SGLang run with
  //    --kv-cache-dtype fp8 (1,024).
  const struct {
    ServeEngine engine;
    const char* name;
    uint64_t less, kv;
  } cases[] = {{ServeEngine::Vllm, "vllm", 3538888, 2048},
               {ServeEngine::Sglang, "sglang", 3512276, 1024},
               {ServeEngine::Trtllm, "trtllm", 3538692, 1024}};
  for (const auto& c : cases) {
    if (c.engine == ServeEngine::Vllm) {
      const ServeSettings s = settings("vllm");
      Bindings b;
      b.graph = "decode";
      ServeProbe p1(plain, b, s, bf16()), p2(modelopt, b, s, bf16());
      const VllmAnswer a = serve_vllm(p1, s, 1, uint64_t{80} << 30, "H100-80GB", "test", 0, 90);
      const VllmAnswer q = serve_vllm(p2, s, 1, uint64_t{80} << 30, "H100-80GB", "test", 0, 90);
      EXPECT_EQ(a.memory.weights - q.memory.weights, c.less);
      EXPECT_EQ(q.kv_bytes_per_token, c.kv);
      EXPECT_EQ(q.quantized.modules, 7);
      continue;
    }
    const EngineAnswer a = answer(plain, c.engine, c.name), q = answer(modelopt, c.engine, c.name);
    EXPECT_EQ(a.weights_bytes - q.weights_bytes, c.less) << c.name;
    EXPECT_EQ(q.kv_bytes_per_token, c.kv) << c.name;
  }
}

TEST(ServeModelOpt, SglangRefusesAutoOnAnFp8KvCheckpoint) {
  const std::string path = checkpoint("sglang_auto", kFile);
  const ServeSettings s = settings("sglang");  // kv_cache_dtype auto
  Bindings b;
  b.graph = "decode";
  ServeProbe probe(path, b, s, bf16());
  try {
    serve_engine(probe, s, ServeEngine::Sglang, 1, uint64_t{80} << 30, "H100-80GB", "test", 0, 90, true);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("states kv_cache_quant_algo FP8, which SGLang's auto follows"),
              std::string::npos)
        << e.what();
  }
}

TEST(ServeModelOpt, VllmRefusals) {
  StoredQuantization q;
  q.method = "fp8";
  q.modelopt = q.modelopt_file = q.modelopt_kv_fp8 = true;
  q.modelopt_path = "d/hf_quant_config.json";
  std::string source;
  ServeSettings s = settings("vllm");
  // The settings as serve_vllm resolves them: the release's rule (--flashinfer left auto).
  auto quantization = [&](const ServeSettings& t, int capability, DType served) {
    VllmResolved r;
    r.rule = vllm_rule(t.engine_version);
    return vllm_modelopt_quantization(q, t, r, capability, 132, served, "m", source);
  };
  EXPECT_NO_THROW(quantization(s, 90, DType::BFloat16));
  EXPECT_EQ(source, "ModelOpt's hf_quant_config.json (quant_algo FP8)");
  auto refused = [&](const ServeSettings& t, int capability, DType served, const std::string& says) {
    try {
      quantization(t, capability, served);
      ADD_FAILURE() << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  ServeSettings flag = s;
  flag.quantization = "fp8";
  refused(flag, 90, DType::BFloat16, "give no --quantization");
  refused(s, 90, DType::Float32, "serves in bfloat16 or float16");
  refused(s, 89 - 9, DType::BFloat16, "ModelOptFp8Config needs 8.9");
  ServeSettings later = s;
  later.engine_version = "0.13";  // v0.13.0: auto is the model's type (PR #30785 came after its branch)
  EXPECT_NO_THROW(quantization(later, 90, DType::BFloat16));
  later.engine_version = "0.14";
  refused(later, 90, DType::BFloat16, "--engine-version 0.14 with --kv-cache-dtype auto");
  later.kv_cache_dtype = "fp8";  // stated: no question of what auto becomes
  EXPECT_NO_THROW(quantization(later, 90, DType::BFloat16));
}

}  // namespace
}  // namespace memplan
