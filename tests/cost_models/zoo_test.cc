// Cost models on the real exports in tests/models, against independent figures: torchvision's published
// parameter counts, Korthikanti et al.'s per-layer activation formula, the planner's liveness checker,
// and the agreement of two exports (opset 13 and 17) of the same module.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "planner/liveness.h"

namespace memplan {
namespace {

using testing::zoo_graph;

bool has_note(const std::vector<std::string>& notes, const std::string& text) {
  for (const std::string& n : notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

TEST(ZooTraining, ParameterBytesMatchTorchvisionPublishedCounts) {
  // torchvision's model docs: resnet18 11,689,512 and resnet50 25,557,032 parameters, float32.
  TrainingRun o;
  o.loss = LossKind::CrossEntropy;
  EXPECT_EQ(build_training_program(zoo_graph("resnet18_train", 2), o).param_bytes, 11689512u * 4u);
  EXPECT_EQ(build_training_program(zoo_graph("resnet50_train", 2), o).param_bytes, 25557032u * 4u);
  // Adam keeps two states per parameter.
  o.optimizer = Optimizer::Adam;
  EXPECT_EQ(build_training_program(zoo_graph("resnet18_train", 2), o).optimizer_state_bytes, 2u * 11689512u * 4u);
}

// PyTorch's own trainable-parameter counts (tests/models/expected_shapes.json, from module.parameters(),
// tied weights once): the transformers tie their output embedding (tests/models/zoo.py), which the
// constant-folded export stores twice without proving the tie, so the test claims it: --tied-embeddings shape.
TEST(ZooTraining, ParameterBytesMatchPyTorchCountsWithTiedEmbeddings) {
  std::ifstream in(std::string(MEMPLAN_ZOO_DIR) + "/expected_shapes.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json models = nlohmann::json::parse(in).at("models");
  TrainingRun o;
  o.loss = LossKind::CrossEntropy;
  o.tied_embeddings_by_shape = true;
  for (const char* name : {"gpt_tiny", "gpt_tiny_op13", "gpt", "bert", "bert_op13", "vit_b_16", "resnet50_train"}) {
    const bool text = std::string(name).find("gpt") == 0 || std::string(name).find("bert") == 0;
    const uint64_t count = models.at(name).at("pytorch_trainable_parameters").get<uint64_t>();
    const Graph g = text ? zoo_graph(name, 1, 16) : zoo_graph(name, 1);
    EXPECT_EQ(build_training_program(g, o).param_bytes, count * 4u) << name;
  }
}

TEST(ZooTraining, EvalExportIsFlaggedAndTrainingExportIsNot) {
  TrainingRun o;
  o.loss = LossKind::CrossEntropy;
  EXPECT_TRUE(has_note(build_training_program(zoo_graph("resnet18", 2), o).notes, "folded"));
  EXPECT_FALSE(has_note(build_training_program(zoo_graph("resnet18_train", 2), o).notes, "folded"));
}

// Every program the cost models build is consistent for the planner (each buffer written once, never
// read before written), over runtimes, precisions, attention, checkpointing and sharding.
TEST(ZooPrograms, PlannerAcceptsEveryConfiguration) {
  for (const char* name : {"resnet18_train", "mobilenet_v2_train", "gpt_tiny", "gpt_tiny_op13", "bert_op13"}) {
    const bool transformer = std::string(name).find("resnet") == std::string::npos &&
                             std::string(name).find("mobilenet") == std::string::npos;
    const Graph g = transformer ? zoo_graph(name, 2, 64) : zoo_graph(name, 2);
    for (Runtime rt : {Runtime::Ideal, Runtime::PyTorch, Runtime::OnnxRuntime}) {
      InferenceRun io;
      io.runtime = rt;
      io.attention = AttentionImpl::Sdpa;
      EXPECT_NO_THROW(compute_liveness(build_inference_program(g, io).program)) << name;
    }
    for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::AmpFp16})
      for (CheckpointMode ck : {CheckpointMode::None, CheckpointMode::Sqrt})
        for (Sharding sh : {Sharding::None, Sharding::Zero3}) {
          TrainingRun o;
          o.precision = p;
          o.loss = LossKind::CrossEntropy;
          o.attention = transformer ? AttentionImpl::Sdpa : AttentionImpl::Eager;
          o.checkpoint.mode = ck;
          o.shard = sh;
          o.gpus = sh == Sharding::None ? 1 : 4;
          o.steady_state = p != Precision::Bf16;
          EXPECT_NO_THROW(compute_liveness(build_training_program(g, o).program)) << name;
        }
  }
}

// The opset-13 export spells LayerNorm out in nine ops; PyTorch ran one layer_norm either way, so the
// two exports of the same module must cost the same.
TEST(ZooTraining, Opset13AndOpset17ExportsAgree) {
  const Graph a = zoo_graph("gpt_tiny", 2, 64);
  const Graph b = zoo_graph("gpt_tiny_op13", 2, 64);
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.loss = LossKind::CrossEntropy;
  const uint64_t peak_a = lower_bound(build_training_program(a, o).program);
  const uint64_t peak_b = lower_bound(build_training_program(b, o).program);
  EXPECT_EQ(peak_a, peak_b);
  InferenceRun io;
  io.runtime = Runtime::PyTorch;
  EXPECT_EQ(lower_bound(build_inference_program(a, io).program), lower_bound(build_inference_program(b, io).program));
}

// BERT's attention mask is preprocessed once and read by every block; it is a side value, so each block's
// output (the post-norm ln_2) still separates the graph and is a checkpoint boundary.
// torchvision's ViT-B/16 is built with dropout = 0.0 and attention_dropout = 0.0
// (torchvision/models/vision_transformer.py, vit_b_16 -> _vision_transformer -> VisionTransformer defaults), so
// its 37 Dropout nodes (the encoder's input, then per block after attention and twice in the MLP: 1 + 12 * 3)
// return their input in PyTorch (ATen Dropout.cpp): no fresh output and no mask in the training step.
TEST(ZooTraining, VitDropoutsWithPZeroAllocateNothing) {
  const Graph g = zoo_graph("vit_b_16_train", 2);
  int dropouts = 0;
  for (const Node& n : g.nodes) dropouts += n.op_type == "Dropout";
  EXPECT_EQ(dropouts, 37);
  TrainingRun o;
  o.loss = LossKind::CrossEntropy;
  const TrainingResult r = build_training_program(g, o);
  // The gradient arriving at a Dropout's output is a real buffer (the next op's backward writes it) and
  // passes through as its input's gradient; the forward output and the mask must not exist.
  for (const Buffer& b : r.program.buffers) {
    if (b.name.rfind("grad:", 0) != 0) {
      EXPECT_EQ(b.name.find("Dropout"), std::string::npos) << b.name;
    }
  }
  EXPECT_TRUE(has_note(r.notes, "37 Dropout nodes have p = 0")) << "the report says what was assumed";
}

TEST(ZooTraining, BertBlockOutputsAreBoundariesDespiteTheSharedMask) {
  TrainingRun o;
  o.loss = LossKind::CrossEntropy;
  const TrainingResult r = build_training_program(zoo_graph("bert", 2, 32), o);
  for (int k = 0; k < 12; ++k) {
    const std::string name = "/blocks." + std::to_string(k) + "/ln_2/LayerNormalization_output_0";
    EXPECT_NE(std::find(r.candidate_boundaries.begin(), r.candidate_boundaries.end(), name), r.candidate_boundaries.end())
        << name;
  }
}

// Korthikanti et al. 2022 (Reducing Activation Recomputation in Large Transformer Models), section 4.1:
// one layer of 16-bit activations saves s*b*h*(34 + 5*a*s/h) bytes with dropout. The zoo GPT has no
// dropout, which removes the attention-dropout mask (a*s*s*b) and output (2*a*s*s*b) and the two
// s*b*h masks: s*b*h*32 + 2*a*s*s*b. memplan also counts the float mean/rstd of the two LayerNorms
// (2 * 2 * 4 * b*s bytes), which the paper leaves out.
TEST(ZooTraining, GptLayerActivationsMatchKorthikanti) {
  const int64_t b = 2, s = 64, h = 128, a = 4;  // gpt_tiny: d_model 128, 4 heads
  const Graph g = zoo_graph("gpt_tiny", b, s);
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.precision = Precision::Fp16;
  o.loss = LossKind::CrossEntropy;
  const Program p = build_training_program(g, o).program;
  // Bytes written by block 0's forward ops and read by some backward step: block 0's saved activations.
  std::vector<bool> read_in_backward(p.buffers.size(), false);
  for (const Step& st : p.steps)
    if (st.phase == Phase::Backward)
      for (int32_t id : st.reads) read_in_backward[id] = true;
  uint64_t saved = 0;
  for (const Step& st : p.steps)
    if (st.phase == Phase::Forward && st.name.rfind("/blocks.0/", 0) == 0)
      for (int32_t id : st.writes)
        if (read_in_backward[id]) saved += p.buffers[id].bytes;
  const uint64_t korthikanti_no_dropout = s * b * h * 32 + 2 * a * s * s * b;
  const uint64_t layer_norm_stats = 2 * 2 * 4 * b * s;
  EXPECT_EQ(saved, korthikanti_no_dropout + layer_norm_stats);
}

// The Llama-family graphs: only the residual stream crosses from one decoder layer to the next (the rotary
// tables and the mask are side values computed before the first), so each layer's output, the second
// residual Add, is a checkpoint boundary: in the tiny export torch.onnx wrote whole, and in the 8B graph
// whose layers 2..31 export_llama.py stitched from the second traced one.
TEST(ZooTraining, LlamaLayerOutputsAreBoundaries) {
  TrainingRun o;
  o.loss = LossKind::CrossEntropy;
  for (const auto& [name, layers] : {std::pair<const char*, int>{"llama_tiny_train", 4}, {"llama3_1_8b_train", 32}}) {
    const TrainingResult r = build_training_program(zoo_graph(name, 1, 16), o);
    for (int k = 0; k + 1 < layers; ++k) {
      const std::string boundary = "/layers." + std::to_string(k) + "/Add_1_output_0";
      EXPECT_NE(std::find(r.candidate_boundaries.begin(), r.candidate_boundaries.end(), boundary),
                r.candidate_boundaries.end())
          << name << ": " << boundary;
    }
  }
}

}  // namespace
}  // namespace memplan
