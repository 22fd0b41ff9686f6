// The model zoo (tests/models/, made by tests/models/export_zoo.py from Debian's torch 1.13): `memplan inspect`
// must shape every graph output as the PyTorch module produces it, and count the trainable parameters that
// torchvision publishes and that PyTorch reports.
//
// Independent sources of the expected numbers:
//  - output shapes: tests/models/expected_shapes.json, written by the export script from running each PyTorch
//    module at batch 1 and 8 (and seq 128 and 512 for the text models), not from memplan;
//  - torchvision models: the published `num_params` of the weight enums (torchvision/models/*.py);
//  - GPT/BERT: hand-computed below, and cross-checked with PyTorch's sum of p.numel() in the JSON.
#include <gtest/gtest.h>

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
    "mobilenet_v2", "mobilenet_v2_train", "resnet18",   "resnet18_train",  "resnet50",
    "resnet50_train", "vit_b_16",         "vit_b_16_train",
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

}  // namespace
}  // namespace memplan
