// The model zoo (tests/models/, made by tests/models/export_zoo.py from Debian's torch 1.13): `memplan inspect`
// must shape every graph output as the PyTorch module produces it, and count the trainable parameters that
// torchvision publishes and that PyTorch reports.
//
// Independent sources of the expected numbers:
//  - output shapes: tests/models/expected_shapes.json, written by the export script from running each PyTorch
//    module at batch 1 and 8 (and seq 128 and 512 for the text models), not from memplan;
//  - torchvision models: the published `num_params` of the weight enums (torchvision/models/*.py);
//  - GPT/BERT: hand-computed below, and cross-checked with PyTorch's sum of p.numel() in the JSON;
//  - the Llama family: hand-computed from each model's published config.json, cross-checked with PyTorch
//    and with the published (rounded) parameter counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/import/import_test_util.h"

namespace memplan {
namespace {

using Json = nlohmann::json;
using testing::run_memplan;

// Every committed export (docs/zoo.md). The test asserts the JSON lists exactly these, so an export added
// to the script without a test, or a test without its export, fails.
const std::vector<std::string> kExports = {
    "bert",         "bert_op13",          "bert_train", "efficientnet_b0", "efficientnet_b0_train",
    "gpt",          "gpt_tiny",           "gpt_tiny_op13", "gpt_tiny_train", "gpt_train",
    "llama3_1_70b", "llama3_1_70b_train", "llama3_1_8b", "llama3_1_8b_train", "llama3_2_1b",
    "llama3_2_1b_train", "llama3_2_3b",   "llama3_2_3b_train", "llama_tiny", "llama_tiny_lora_all_train", "llama_tiny_lora_train",
    "llama_tiny_train",
    "mistral_7b",   "mistral_7b_train",   "mobilenet_v2", "mobilenet_v2_train", "qwen2_7b",
    "qwen2_7b_train", "qwen2_tiny",       "qwen2_tiny_train", "resnet18", "resnet18_train",
    "resnet50",     "resnet50_train",     "vit_b_16",   "vit_b_16_train",
};

std::string models_dir() { return std::string(MEMPLAN_SOURCE_DIR) + "/tests/models"; }

const Json& expected() {
  static const Json j = [] {
    const std::string path = models_dir() + "/expected_shapes.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    return Json::parse(in);
  }();
  return j;
}

// "batch=8,seq=512" -> {"--batch", "8", "--dim", "seq=512"}
std::vector<std::string> binding_args(const std::string& config) {
  std::vector<std::string> args;
  std::stringstream parts(config);
  std::string part;
  while (std::getline(parts, part, ',')) {
    const size_t eq = part.find('=');
    const std::string name = part.substr(0, eq);
    if (name == "batch") {
      args.insert(args.end(), {"--batch", part.substr(eq + 1)});
    } else {
      args.insert(args.end(), {"--dim", part});
    }
  }
  return args;
}

Json inspect(const std::string& stem, const std::vector<std::string>& bindings) {
  std::vector<std::string> args = {"inspect", models_dir() + "/" + stem + ".onnx", "--json"};
  args.insert(args.end(), bindings.begin(), bindings.end());
  const testing::RunResult r = run_memplan(args);
  if (r.exit_code != 0) throw std::runtime_error("memplan inspect " + stem + " exited " + std::to_string(r.exit_code) + ": " + r.err);
  return Json::parse(r.out);
}

// The parameter count does not depend on the bindings; any configuration PyTorch was run at will do.
int64_t parameter_count(const std::string& stem) {
  const std::string config = expected()["models"][stem]["outputs"].begin().key();
  return inspect(stem, binding_args(config))["parameters"]["count"].get<int64_t>();
}

TEST(Zoo, ExpectedShapesListsEveryExport) {
  std::vector<std::string> listed;
  for (const auto& [stem, entry] : expected()["models"].items()) listed.push_back(stem);
  EXPECT_EQ(listed, kExports);
}

class ZooExport : public ::testing::TestWithParam<std::string> {};

// Every graph output, at every configuration PyTorch was run at, has the shape PyTorch produced, and is
// listed among the tensors with kind "output".
TEST_P(ZooExport, OutputShapesMatchPyTorch) {
  const std::string stem = GetParam();
  ASSERT_TRUE(expected()["models"].contains(stem)) << stem << " missing from expected_shapes.json";
  const Json& entry = expected()["models"][stem];
  for (const auto& [config, outputs] : entry["outputs"].items()) {
    SCOPED_TRACE(stem + " at " + config);
    const Json j = inspect(stem, binding_args(config));
    std::map<std::string, Json> output_shapes, output_tensor_shapes;
    for (const Json& o : j["outputs"]) output_shapes[o["name"]] = o["shape"];
    for (const Json& t : j["tensors"])
      if (t["kind"] == "output") output_tensor_shapes[t["name"]] = t["shape"];
    EXPECT_EQ(output_shapes.size(), outputs.size());
    for (const auto& [name, shape] : outputs.items()) {
      ASSERT_TRUE(output_shapes.count(name)) << "no graph output " << name;
      EXPECT_EQ(output_shapes[name], shape) << name;
      EXPECT_EQ(output_tensor_shapes[name], shape) << name << " in \"tensors\"";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ZooExport, ::testing::ValuesIn(kExports),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Exports with TrainingMode.PRESERVE and no constant folding keep BatchNorm's scale and shift as parameters
// and its running statistics as buffers, so the trainable count is torchvision's published one.
TEST(Zoo, TorchvisionTrainingExportsHavePublishedParameterCounts) {
  const std::map<std::string, int64_t> published = {
      {"resnet18", 11'689'512},      {"resnet50", 25'557'032}, {"mobilenet_v2", 3'504'872},
      {"efficientnet_b0", 5'288'548}, {"vit_b_16", 86'567'656},
  };
  for (const auto& [model, count] : published) {
    EXPECT_EQ(parameter_count(model + "_train"), count) << model;
    // The PyTorch module the export came from agrees with torchvision's published figure.
    EXPECT_EQ(expected()["models"][model + "_train"]["pytorch_trainable_parameters"].get<int64_t>(), count) << model;
  }
}

// The training exports keep BatchNorm's running mean and variance as initializers (buffers: not trainable)
// and drop num_batches_tracked (the exporter removes its in-place increment). So the buffers are PyTorch's
// buffer elements less one per BatchNorm layer: resnet18 has 20 (stem, 2 per basic block x 8, 3
// downsample), resnet50 53 (stem, 3 per bottleneck x 16, 4 downsample).
TEST(Zoo, ResNetTrainingExportsKeepRunningStatisticsAsBuffers) {
  const std::map<std::string, int64_t> batch_norm_layers = {{"resnet18", 20}, {"resnet50", 53}};
  for (const auto& [model, layers] : batch_norm_layers) {
    const std::string stem = model + "_train";
    const Json j = inspect(stem, {"--batch", "1"});
    EXPECT_EQ(j["buffers"]["count"].get<int64_t>(),
              expected()["models"][stem]["pytorch_buffer_elements"].get<int64_t>() - layers)
        << model;
  }
}

// Hand count of the GPT/BERT parameters (tests/models/zoo.py). Per layer: two LayerNorms (2·2d), QKV
// (3d² + 3d), attention output (d² + d), MLP (4d² + 4d and 4d² + d): 12d² + 13d.
constexpr int64_t layer_params(int64_t d) { return 12 * d * d + 13 * d; }
// GPT: token (V·d) and position (P·d) embeddings, L layers, final LayerNorm (2d); the output
// projection is the token embedding (tied), so it adds nothing.
constexpr int64_t gpt_params(int64_t layers, int64_t d, int64_t vocab, int64_t positions) {
  return vocab * d + positions * d + layers * layer_params(d) + 2 * d;
}
// BERT: word and position embeddings, embedding LayerNorm, L layers, MLM transform (d² + d, LayerNorm
// 2d), and the tied decoder's own bias (V).
constexpr int64_t bert_params(int64_t layers, int64_t d, int64_t vocab, int64_t positions) {
  return vocab * d + positions * d + 2 * d + layers * layer_params(d) + d * d + d + 2 * d + vocab;
}
static_assert(gpt_params(12, 768, 50257, 1024) == 124'439'808, "GPT-2 small's well-known size");

struct TextModel {
  std::string name;
  int64_t params;
  int64_t vocab_times_d;  // the tied embedding matrix
};

const std::vector<TextModel> kTextModels = {
    {"gpt", gpt_params(12, 768, 50257, 1024), 50257 * 768},
    {"gpt_tiny", gpt_params(2, 128, 1000, 512), 1000 * 128},
    {"bert", bert_params(12, 768, 30522, 512), 30522 * 768},
};

TEST(Zoo, TextTrainingExportsCountTiedEmbeddingOnce) {
  for (const TextModel& m : kTextModels) {
    EXPECT_EQ(expected()["models"][m.name + "_train"]["pytorch_trainable_parameters"].get<int64_t>(), m.params)
        << m.name << ": hand count disagrees with PyTorch";
    EXPECT_EQ(parameter_count(m.name + "_train"), m.params) << m.name;
  }
}

// With constant folding (the inference exports), torch.onnx folds the Transpose of the tied embedding
// that feeds the output MatMul into a new initializer: the file really stores the embedding twice (once
// for Gather, once transposed for MatMul), and a runtime loading it holds both. memplan must count what
// the file holds.
TEST(Zoo, TextInferenceExportsStoreTheFoldedTransposedEmbedding) {
  for (const TextModel& m : kTextModels) {
    EXPECT_EQ(parameter_count(m.name), m.params + m.vocab_times_d) << m.name;
  }
}

// ---- Llama-family decoders (tests/models/llama.py, made by tests/models/export_llama.py) ----
//
// Hand count from the hyper-parameters of each model's config.json on the Hugging Face Hub (meta-llama,
// mistralai, Qwen; the URLs are in llama.py's CONFIGS): embedding V·h; per layer q_proj h·h and o_proj h·h,
// k_proj and v_proj h·(kv·hd) each (hd = h / heads), plus q/k/v biases h + 2·kv·hd where the model has
// them (Qwen2), gate/up/down_proj 3·h·ffn, two RMSNorm weights 2h; the final RMSNorm h; lm_head V·h unless
// tied to the embedding.
constexpr int64_t llama_params(int64_t h, int64_t ffn, int64_t layers, int64_t heads, int64_t kv_heads,
                               int64_t vocab, bool tied, bool qkv_bias) {
  const int64_t kv = kv_heads * (h / heads);
  const int64_t layer = 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h + (qkv_bias ? h + 2 * kv : 0);
  return vocab * h + layers * layer + h + (tied ? 0 : vocab * h);
}
// Llama-3.2-1B ties its head to the embedding (config.json: tie_word_embeddings true), and so does the
// export; untied it would have V·h = 262,668,288 more, and the Llama 3.2 model card's "1.23B" rules that out.
static_assert(llama_params(2048, 8192, 16, 32, 8, 128256, true, false) == 1'235'814'400, "Llama-3.2-1B");
static_assert(llama_params(2048, 8192, 16, 32, 8, 128256, false, false) == 1'498'482'688, "Llama-3.2-1B untied");

struct LlamaModel {
  std::string stem;
  int64_t params;
  int64_t vocab_times_h;
  bool tied;
  double published_billions;  // the count as its authors publish it
  double digit;               // the value of its last published digit
};

// Published: the Llama 3.2 model card ("1B (1.23B)", "3B (3.21B)"); the Hub's parameter count of the
// safetensors checkpoints for the others (8.03B, 7.24B, 70.6B, 7.62B). The tiny ones are made up
// (llama.py) and checked against PyTorch's count only.
const std::vector<LlamaModel> kLlamaModels = {
    {"llama3_2_1b", llama_params(2048, 8192, 16, 32, 8, 128256, true, false), 128256LL * 2048, true, 1.23, 0.01},
    {"llama3_2_3b", llama_params(3072, 8192, 28, 24, 8, 128256, true, false), 128256LL * 3072, true, 3.21, 0.01},
    {"llama3_1_8b", llama_params(4096, 14336, 32, 32, 8, 128256, false, false), 128256LL * 4096, false, 8.03, 0.01},
    {"mistral_7b", llama_params(4096, 14336, 32, 32, 8, 32000, false, false), 32000LL * 4096, false, 7.24, 0.01},
    {"llama3_1_70b", llama_params(8192, 28672, 80, 64, 8, 128256, false, false), 128256LL * 8192, false, 70.6, 0.1},
    {"qwen2_7b", llama_params(3584, 18944, 28, 28, 4, 152064, false, true), 152064LL * 3584, false, 7.62, 0.01},
    {"llama_tiny", llama_params(128, 352, 4, 4, 2, 1000, false, false), 1000 * 128, false, 0, 0},
    {"qwen2_tiny", llama_params(128, 352, 4, 4, 2, 1000, false, true), 1000 * 128, false, 0, 0},
};

// The training exports hold every parameter once: memplan's count is the hand count, PyTorch's
// sum(p.numel()) of the full-size module agrees, and both round to the published figure.
TEST(Zoo, LlamaTrainingExportsHaveTheConfigsParameterCounts) {
  for (const LlamaModel& m : kLlamaModels) {
    SCOPED_TRACE(m.stem);
    EXPECT_EQ(expected()["models"][m.stem + "_train"]["pytorch_trainable_parameters"].get<int64_t>(), m.params);
    EXPECT_EQ(parameter_count(m.stem + "_train"), m.params);
    if (m.published_billions > 0) {  // rounded or truncated to the published digit (Meta's 1.2358 is "1.23B")
      EXPECT_GE(static_cast<double>(m.params) / 1e9, m.published_billions - m.digit / 2);
      EXPECT_LT(static_cast<double>(m.params) / 1e9, m.published_billions + m.digit);
    }
  }
}

// Inference exports: constant folding pre-transposes every Linear weight in place of the original, so
// the count is the same, except that a tied embedding is then stored twice (Gather's and the head's
// transposed copy), as in the GPT's inference export.
TEST(Zoo, LlamaInferenceExportsStoreATiedEmbeddingTwice) {
  for (const LlamaModel& m : kLlamaModels) {
    EXPECT_EQ(parameter_count(m.stem), m.params + (m.tied ? m.vocab_times_h : 0)) << m.stem;
  }
}

Json estimate(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"estimate"};
  all.insert(all.end(), args.begin(), args.end());
  all.push_back("--json");
  const testing::RunResult r = run_memplan(all);
  if (r.exit_code != 0) throw std::runtime_error("memplan estimate exited " + std::to_string(r.exit_code) + ": " + r.err);
  return Json::parse(r.out);
}

// A training step on the weight-less graphs at real sizes. What a step holds for its parameters follows
// from the count and PyTorch alone: float32 weights and grads take 4 bytes each; model.bfloat16() makes
// weights and grads 2 bytes, and AdamW's exp_avg and exp_avg_sq are zeros_like(param) (torch/optim/adamw.py),
// 2 x 2 bytes more.
TEST(Zoo, LlamaTrainingEstimatesRunAtRealSizes) {
  const int64_t tiny = kLlamaModels[6].params;
  const Json t = estimate({models_dir() + "/llama_tiny_train.onnx", "--mode", "train", "--dim", "seq=128", "--batch", "2"});
  EXPECT_EQ(t["training"]["param_bytes"].get<int64_t>(), 4 * tiny);
  EXPECT_EQ(t["training"]["grad_bytes"].get<int64_t>(), 4 * tiny);
  for (const char* stem : {"llama3_2_3b", "llama3_1_8b"}) {
    SCOPED_TRACE(stem);
    const int64_t n = std::find_if(kLlamaModels.begin(), kLlamaModels.end(), [&](const LlamaModel& m) { return m.stem == stem; })->params;
    const Json j = estimate({models_dir() + "/" + stem + "_train.onnx", "--mode", "train", "--precision", "bf16",
                             "--optimizer", "adamw", "--batch", "4", "--dim", "seq=768"});
    EXPECT_EQ(j["training"]["param_bytes"].get<int64_t>(), 2 * n);
    EXPECT_EQ(j["training"]["grad_bytes"].get<int64_t>(), 2 * n);
    EXPECT_EQ(j["training"]["optimizer_state_bytes"].get<int64_t>(), 4 * n);
    // A lower bound of the peak: the weights and AdamW states stay allocated through a steady-state step,
    // and the bf16 logits (batch 4 x seq 768 x vocab 128256) are live when the loss is computed.
    EXPECT_GT(j["total_bytes"].get<int64_t>(), 6 * n + 4LL * 768 * 128256 * 2);
  }
}

// llama_tiny_lora_train: PEFT's LoRA with its defaults (r 8, alpha 8, no dropout) on q_proj and v_proj of
// each of the 4 layers: A is in x r and B r x out, so 8·(128 + 128) + 8·(128 + 64) = 3,584 per layer.
// The graph holds base and adapters; PyTorch trains the adapters only, and with --trainable lora_ so does
// memplan: a grad for each adapter weight and Adam's two states, in float32.
TEST(Zoo, LlamaLoraExportHoldsPeftAdapters) {
  const int64_t adapters = 4 * (8 * (128 + 128) + 8 * (128 + 64));
  static_assert(4 * (8 * (128 + 128) + 8 * (128 + 64)) == 14'336, "");
  EXPECT_EQ(parameter_count("llama_tiny_lora_train"), kLlamaModels[6].params + adapters);
  EXPECT_EQ(expected()["models"]["llama_tiny_lora_train"]["pytorch_trainable_parameters"].get<int64_t>(), adapters);
  const Json j = estimate({models_dir() + "/llama_tiny_lora_train.onnx", "--mode", "train", "--dim", "seq=128",
                           "--batch", "2", "--trainable", "lora_"});
  EXPECT_EQ(j["training"]["grad_bytes"].get<int64_t>(), 4 * adapters);
  EXPECT_EQ(j["training"]["optimizer_state_bytes"].get<int64_t>(), 2 * 4 * adapters);
}

// llama_tiny_lora_all_train: the same adapters on all seven projections (PEFT's "all-linear"): per layer
// q 8·(128 + 128), k and v 8·(128 + 64) each, o 8·(128 + 128), gate and up 8·(128 + 352) each, down
// 8·(352 + 128): 18,688, so 74,752 in 4 layers.
TEST(Zoo, LlamaLoraAllLinearExportHoldsAdaptersOnEveryProjection) {
  const int64_t adapters = 4 * (2 * 8 * (128 + 128) + 2 * 8 * (128 + 64) + 3 * 8 * (128 + 352));
  static_assert(4 * (2 * 8 * (128 + 128) + 2 * 8 * (128 + 64) + 3 * 8 * (128 + 352)) == 74'752, "");
  EXPECT_EQ(parameter_count("llama_tiny_lora_all_train"), kLlamaModels[6].params + adapters);
  EXPECT_EQ(expected()["models"]["llama_tiny_lora_all_train"]["pytorch_trainable_parameters"].get<int64_t>(), adapters);
  const Json j = estimate({models_dir() + "/llama_tiny_lora_all_train.onnx", "--mode", "train", "--dim", "seq=128",
                           "--batch", "2", "--trainable", "lora_"});
  EXPECT_EQ(j["training"]["grad_bytes"].get<int64_t>(), 4 * adapters);
  EXPECT_EQ(j["training"]["optimizer_state_bytes"].get<int64_t>(), 2 * 4 * adapters);
}

}  // namespace
}  // namespace memplan
