// ModelOpt FP8 checkpoints: reading hf_quant_config.json and config.json's "modelopt" form (onnx_import/
// hf_modelopt.h), each refusal, and the engines' per-module bytes by hand (cost_models/vllm_weights.h,
// sglang_weights.h, trtllm_engine.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cost_models/sglang_weights.h"
#include "cost_models/trtllm_engine.h"
#include "cost_models/vllm_weights.h"
#include "onnx_import/errors.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/model_reader.h"

namespace memplan {
namespace {

constexpr const char* kLlama = R"({"model_type": "llama", "hidden_size": 512, "intermediate_size": 768,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": false,
 "torch_dtype": "bfloat16", "hidden_act": "silu")";

// A config (kLlama with `extra` keys) and, unless empty, an hf_quant_config.json beside it; the config's path.
std::string write(const std::string& name, const std::string& extra, const std::string& file) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("memplan_modelopt_read_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << kLlama << extra << "}";
  if (!file.empty()) std::ofstream(dir / "hf_quant_config.json") << file;
  return (dir / "config.json").string();
}

std::string quant(const std::string& inner) {
  return R"({"producer": {"name": "modelopt", "version": "0.19.0"}, "quantization": {)" + inner + "}}";
}

StoredQuantization read(const std::string& path) { return read_config_model(path, "decode", {}, true).quantization; }

void refused(const std::string& path, const std::string& says) {
  try {
    read(path);
    ADD_FAILURE() << "accepted: " << says;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(ModelOpt, ReadsBothForms) {
  StoredQuantization q = read(write("file", "", quant(R"("quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
      "exclude_modules": ["lm_head", "model.layers.0.self_attn.o_proj"])")));
  EXPECT_EQ(q.method, "fp8");
  EXPECT_TRUE(q.static_activations && q.modelopt && q.modelopt_file && q.modelopt_kv_fp8);
  EXPECT_EQ(q.excluded_modules, std::vector<std::string>{"model.layers.0.self_attn.o_proj"});
  q = read(write("flat", R"(, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8",
      "ignore": ["lm_head"], "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"}})", ""));
  EXPECT_TRUE(q.modelopt && q.modelopt_kv_fp8 && !q.modelopt_file && q.excluded_modules.empty());
  q = read(write("nokv", "", quant(R"("quant_algo": "FP8", "kv_cache_quant_algo": null, "exclude_modules": ["lm_head"])")));
  EXPECT_TRUE(q.modelopt && !q.modelopt_kv_fp8);
  // Both forms agreeing: the file's settings.
  q = read(write("both", R"(, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"]})",
                 quant(R"("quant_algo": "FP8", "exclude_modules": ["lm_head"])")));
  EXPECT_TRUE(q.modelopt && q.modelopt_file && !q.modelopt_kv_fp8);
}

TEST(ModelOpt, Refusals) {
  refused(write("nvfp4g32", "", quant(R"("quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 32)")),
          "quantization key \"group_size\" is 32: NVFP4 scales blocks of 16 values");
  refused(write("fp8group", "", quant(R"("quant_algo": "FP8", "group_size": 16)")),
          "quantization key \"group_size\" is 16 with quant_algo FP8");
  refused(write("w4a16nvfp4", "", quant(R"("quant_algo": "W4A16_NVFP4")")),
          "quantization key \"quant_algo\" is \"W4A16_NVFP4\": memplan sizes ModelOpt's FP8 (per-tensor) and NVFP4");
  refused(write("w4a8", "", quant(R"("quant_algo": "W4A8_AWQ")")), "\"W4A8_AWQ\"");
  refused(write("kvint8", "", quant(R"("quant_algo": "FP8", "kv_cache_quant_algo": "INT8")")),
          "quantization key \"kv_cache_quant_algo\" is \"INT8\"");
  refused(write("qproj", "", quant(R"("quant_algo": "FP8", "exclude_modules": ["model.layers.0.self_attn.q_proj"])")),
          "quantization key \"exclude_modules\" entry \"model.layers.0.self_attn.q_proj\": which of the graph's");
  refused(write("star", "", quant(R"("quant_algo": "FP8", "exclude_modules": ["*down_proj"])")), "entry \"*down_proj\"");
  refused(write("layer9", "", quant(R"("quant_algo": "FP8", "exclude_modules": ["model.layers.9.mlp.down_proj"])")),
          "excludes model.layers.9.mlp.down_proj, a layer the model (num_hidden_layers 2) does not have");
  refused(write("unknown", "", quant(R"("quant_algo": "FP8", "awq_block_size": 128)")),
          "quantization key \"awq_block_size\" is not read");
  refused(write("producer", "", R"({"producer": {"name": "other"}, "quantization": {"quant_algo": "FP8"}})"),
          "producer is {\"name\":\"other\"}");
  refused(write("contra", R"(, "quantization_config": {"quant_method": "fp8", "activation_scheme": "static"})",
                quant(R"("quant_algo": "FP8")")),
          "states ModelOpt FP8 while");
  refused(write("contrakv", R"(, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"})",
                quant(R"("quant_algo": "FP8", "kv_cache_quant_algo": "FP8")")),
          "quantization key \"kv_cache_quant_algo\" contradicts");
  refused(write("flatmxfp8", R"(, "quantization_config": {"quant_method": "modelopt", "quant_algo": "MXFP8"})", ""),
          "quantization_config (quant_method modelopt) key \"quant_algo\" is \"MXFP8\"");
  refused(write("contraalgo", R"(, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"})",
                quant(R"("quant_algo": "NVFP4", "group_size": 16)")),
          "states ModelOpt NVFP4 while");
  refused(write("mixtral", R"(, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2)",
                quant(R"("quant_algo": "FP8")")),
          "(ModelOpt FP8) on model_type \"mixtral\": the engines' ModelOpt FP8 MoE path (ModelOptFp8MoEMethod) is not "
          "sized");
  refused(write("densegate", "", quant(R"("quant_algo": "NVFP4", "group_size": 16,
      "exclude_modules": ["lm_head", "model.layers.0.mlp.gate"])")),
          "excludes 1 routers (mlp.gate), and");
}

// gpt-oss under ModelOpt (its own MXFP4 quantization_config taken out): refused whatever the algorithm, its experts
// and sinks being no ModelOpt path memplan sizes.
TEST(ModelOpt, RefusesGptOss) {
  nlohmann::json config;
  std::ifstream(std::string(MEMPLAN_SOURCE_DIR) + "/tests/models/hf_configs/gpt-oss-20b.json") >> config;
  config.erase("quantization_config");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "memplan_modelopt_read_gptoss";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump();
  std::ofstream(dir / "hf_quant_config.json") << quant(R"("quant_algo": "NVFP4", "group_size": 16)");
  refused((dir / "config.json").string(),
          "(ModelOpt NVFP4) on model_type \"gpt_oss\": the engines' ModelOpt latent-attention and gpt-oss paths are "
          "not sized");
}

// NVFP4 experts are read (vLLM's ModelOptNvFp4FusedMoE, cost_models/vllm_nvfp4.h), each router entry counted.
TEST(ModelOpt, ReadsNvfp4ExpertsAndTheirRouters) {
  const StoredQuantization q =
      read(write("mixtralfp4", R"(, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2)",
                 quant(R"("quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head",
                     "model.layers.0.block_sparse_moe.gate", "model.layers.1.block_sparse_moe.gate"])")));
  EXPECT_EQ(q.method, "nvfp4");
  EXPECT_EQ(q.ignored_routers, 2);
  EXPECT_TRUE(q.excluded_modules.empty() && !q.all_routers_ignored);
  // config.json's form with vLLM's fnmatch wildcard over every layer's router.
  const StoredQuantization w = read(write("mixtralwild", R"(, "model_type": "mixtral", "num_local_experts": 4,
      "num_experts_per_tok": 2, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
      "group_size": 16, "ignore": ["lm_head", "model.layers.*.block_sparse_moe.gate"]})", ""));
  EXPECT_TRUE(w.all_routers_ignored);
  EXPECT_EQ(w.ignored_routers, 0);
  refused(write("densewild", "", quant(R"("quant_algo": "NVFP4", "group_size": 16,
      "exclude_modules": ["model.layers.*.mlp.gate"])")),
          "excludes every router (model.layers.*.mlp.gate), and");
}

TEST(ModelOpt, PerModuleBytesByHand) {
  // vLLM's ModelOptFp8LinearMethod: weight_scale and input_scale, one float32 each once loaded.
  EXPECT_EQ(vllm_fp8_tensor_scale_bytes(true), 8u);
  EXPECT_EQ(vllm_fp8_tensor_scale_bytes(false), 4u);
  // TensorRT-LLM's FP8QDQLinearMethod: 3 float32 scalars + 2 x float32 [3] = 36 B a module.
  EXPECT_EQ(trtllm_fp8_qdq_scalar_bytes(8), 288u);
  // SGLang: one layer's four modules of the tiny llama: 1,966,080 fp8 B + 4 x (1,024 + 512 + 1,536 + 512) + 4 x 4.
  VllmQuantization q;
  q.method = "fp8";
  q.static_activations = q.modelopt = true;
  std::vector<VllmLinearModule> modules(4);
  const int64_t shapes[4][2] = {{1024, 512}, {512, 512}, {1536, 512}, {512, 768}};
  for (int i = 0; i < 4; ++i) {
    modules[i].nodes = {"m" + std::to_string(i)};
    modules[i].out_p = modules[i].output_size = shapes[i][0];
    modules[i].in_p = modules[i].input_size = shapes[i][1];
  }
  const SglangQuantizedLinears s = sglang_quantized_linears(modules, q, {}, 2);
  EXPECT_EQ(s.bytes, 1966080u + 14336u + 16u);
  EXPECT_EQ(s.modules, 4);
  EXPECT_NE(s.layout.find("ModelOptFp8LinearMethod"), std::string::npos);
}

TEST(ModelOpt, EngineChecks) {
  EXPECT_NO_THROW(trtllm_quantization_check("fp8", 0, 0, 90, 8, 1, "m", true, true));
  EXPECT_NO_THROW(trtllm_quantization_check("fp8", 0, 0, 89, 8, 16, "m", true, true));  // scalar scales: any tp
  EXPECT_THROW(trtllm_quantization_check("fp8", 0, 0, 90, 8, 1, "m", true, false), InputError);  // config.json only
  EXPECT_THROW(trtllm_quantization_check("fp8", 0, 0, 80, 8, 1, "m", true, true), InputError);
  EXPECT_NO_THROW(sglang_quantization_check("fp8", false, true, false, true, 90, "m", true));
  EXPECT_NO_THROW(sglang_quantization_check("fp8", false, true, false, true, 120, "m", true));
  EXPECT_THROW(sglang_quantization_check("fp8", true, true, false, true, 90, "m", true), InputError);
  EXPECT_THROW(sglang_quantization_check("fp8", false, true, false, true, 86, "m", true), InputError);
}

}  // namespace
}  // namespace memplan
