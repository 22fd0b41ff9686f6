// --quantize-experts (cost_models/frozen_storage.h parametrized_experts): bitsandbytes' replace_parameter_4bit over a
// mixture of experts' stacked parameters, as axolotl's quantize_moe_experts applies it, on the tiny qwen3_moe of
// grouped_mm_test.cc (2 layers, both sparse, H = 16, E = 4 experts of I = 8, top-2) at batch 1 x seq 128, LoRA r 2
// on q_proj, the base NF4. Every figure by hand from bitsandbytes' layout (functional.py quantize_4bit, blocks of 64
// over the flattened parameter):
//   gate_up_proj [4, 16, 16] = 1,024 values: packed 512 B; absmax float32, 16 blocks: 64 B; 576 B.
//   down_proj    [4, 16, 8]  =   512 values: packed 256 B; absmax 8 blocks: 32 B; 288 B.
// With double quantization (compress_statistics: absmax quantized to uint8 in blocks of 256, one float32 absmax a
// block of 256 and the float32 offset): gate_up 512 + 16 + 4 + 4 = 536 B, down 256 + 8 + 4 + 4 = 272 B.
// Each experts forward dequantizes each whole into the parameter's own type (quant_state.dtype): float32 here,
// 4,096 and 2,048 B; bfloat16 under --precision bf16, 2,048 and 1,024 B; _grouped_mm keeps the copy (through the
// transpose it reads) for its backward, which dequantizes nothing.
#include <algorithm>
#include <gtest/gtest.h>

#include <memory>
#include <tuple>
#include <vector>

#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "onnx_import/model_session.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"
#include "tests/cost_models/tiny_qwen3_moe_test_base.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::count_named;

class QuantizedExperts : public testing::TinyQwen3MoeTest {
 protected:
  QuantizedExperts() : TinyQwen3MoeTest("memplan_quantized_experts") {}
  std::shared_ptr<const Graph> graph(const std::string& experts = "grouped_mm") { return moe_graph(experts); }
  static TrainingRun run(const std::string& targets = "q_proj") {
    TrainingRun o = sgd_ideal();
    o.lora_rank = 2;
    o.lora_targets = targets;
    o.frozen_storage = FrozenStorage::Nf4;
    o.quantize_experts = true;
    return o;
  }
};

TEST_F(QuantizedExperts, StoredAsNf4ByHand) {
  const auto g = graph();
  TrainingRun o = run();
  Program p = build_training_program(*g, o).program;
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.1.mlp.experts.gate_up_proj")].bytes, 576u);
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.1.mlp.experts.down_proj")].bytes, 288u);
  o.double_quant = true;
  p = build_training_program(*g, o).program;
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.1.mlp.experts.gate_up_proj")].bytes, 536u);
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.1.mlp.experts.down_proj")].bytes, 272u);
  // Without the option they stay float32 (1,024 and 512 values), as transformers' own loading leaves them.
  o.quantize_experts = false;
  p = build_training_program(*g, o).program;
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.1.mlp.experts.gate_up_proj")].bytes, 4096u);
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.1.mlp.experts.down_proj")].bytes, 2048u);
}

// One dequantized copy a parameter a forward, written in the forward and last read by a backward step (the
// _grouped_mm's, which keeps it); the backward makes none of its own.
TEST_F(QuantizedExperts, EachForwardDequantizesOnceAndTheGroupedMmKeepsIt) {
  const auto g = graph();
  for (const auto& [precision, gate_up, down] :
       {std::tuple{Precision::Fp32, 4096u, 2048u}, std::tuple{Precision::Bf16, 2048u, 1024u}}) {
    TrainingRun o = run();
    o.precision = precision;
    const Program p = build_training_program(*g, o).program;
    for (const auto& [name, bytes] : {std::pair{std::string("layers.1.mlp.experts.gate_up_proj:dequantized"), gate_up},
                                      std::pair{std::string("layers.1.mlp.experts.down_proj:dequantized"), down}}) {
      ASSERT_EQ(count_named(p, name), 1) << name;
      const int32_t b = buffer_named(p, name);
      EXPECT_EQ(p.buffers[b].bytes, bytes) << name;
      const int32_t last = testing::last_reader(p, b);
      ASSERT_GE(last, 0) << name;
      EXPECT_EQ(p.steps[size_t(last)].phase, Phase::Backward) << name;
    }
  }
}

// --checkpoint layers (reentrant): the first pass runs each layer without saving, so its copy dies in the forward;
// the recomputation dequantizes again, and that copy is the one the backward reads.
TEST_F(QuantizedExperts, ACheckpointedLayerDequantizesAgainWhenRecomputed) {
  TrainingRun o = run();
  o.checkpoint.mode = CheckpointMode::Layers;
  const Program p = build_training_program(*graph(), o).program;
  const std::string name = "layers.1.mlp.experts.gate_up_proj:dequantized";
  ASSERT_EQ(count_named(p, name), 2);
  std::vector<Phase> last_phase;
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].name == name) last_phase.push_back(p.steps[size_t(testing::last_reader(p, int32_t(b)))].phase);
  EXPECT_EQ(last_phase, (std::vector<Phase>{Phase::Forward, Phase::Backward}));
}

// bitsandbytes 0.49's cache leak (issue #2005) needs a non-reentrant checkpoint that stops its recomputation early:
// the note warns then, and only then.
TEST_F(QuantizedExperts, WarnsOfTheOlderCacheLeakUnderANonReentrantCheckpoint) {
  const auto warns = [&](bool reentrant, bool early_stop, CheckpointMode mode) {
    TrainingRun o = run();
    o.checkpoint.mode = mode;
    o.checkpoint.reentrant = reentrant;
    o.checkpoint.early_stop = early_stop;
    const TrainingResult r = build_training_program(*graph(), o);
    return std::any_of(r.notes.begin(), r.notes.end(),
                       [](const std::string& s) { return s.find("bitsandbytes issue #2005") != std::string::npos; });
  };
  EXPECT_TRUE(warns(false, true, CheckpointMode::Layers));
  EXPECT_FALSE(warns(true, true, CheckpointMode::Layers));
  EXPECT_FALSE(warns(false, false, CheckpointMode::Layers));  // torch 1.13 recomputes the whole segment
  EXPECT_FALSE(warns(false, true, CheckpointMode::None));
}

// Under fully_shard (axolotl's FSDP-QLoRA over parametrized experts, docs/research/axolotl-fsdp2-moe-quant.md), 2
// ranks: each stacked parameter is its packed uint8 [(n + 1) // 2, 1], chunked on dim 0 in a decoder layer's group.
//   gate_up_proj: 512 bytes, ceil(512 / 2) = 256 a rank, 512 gathered; down_proj: 256, 128 a rank, 256 gathered.
// Unquantized (float32 [4, 16, 16] and [4, 16, 8], chunked on the experts' dim 0, 2 of 4 a rank): 2 x 256 x 4 =
// 2,048 and 2 x 128 x 4 = 1,024 a rank, 4,096 and 2,048 gathered. So a layer's shard is 3,072 - 384 = 2,688 B
// smaller and its gathered group 6,144 - 768 = 5,376 B. The QuantState (absmax, 16 and 8 float32 blocks: 64 and
// 32 B) stays whole on every rank; each forward dequantizes the gathered tensor (4,096 B, float32) once, and
// _grouped_mm keeps that copy to its backward, as on one GPU.
TEST_F(QuantizedExperts, UnderFullyShardTheExpertsShardPackedByHand) {
  const auto g = graph();
  TrainingRun o = run();
  o.gpus = 2;
  o.shard = Sharding::Fsdp2;
  o.nf4_torchao = false;
  const Program q = build_training_program(*g, o).program;
  o.quantize_experts = false;
  const Program plain = build_training_program(*g, o).program;
  EXPECT_EQ(testing::bytes_of(plain, "fsdp2_sharded_params:layers.1") - testing::bytes_of(q, "fsdp2_sharded_params:layers.1"),
            2688u);
  EXPECT_EQ(testing::bytes_of(plain, "fsdp2_all_gather_output:layers.1") -
                testing::bytes_of(q, "fsdp2_all_gather_output:layers.1"),
            5376u);
  for (const auto& [name, bytes] : {std::pair{std::string("layers.1.mlp.experts.gate_up_proj:quant_state"), 64u},
                                    std::pair{std::string("layers.1.mlp.experts.down_proj:quant_state"), 32u}}) {
    const int32_t b = buffer_named(q, name);
    ASSERT_GE(b, 0) << name;
    EXPECT_EQ(q.buffers[b].bytes, bytes) << name;
    EXPECT_TRUE(q.buffers[b].resident) << name;
  }
  const std::string copy = "layers.1.mlp.experts.gate_up_proj:dequantized";
  ASSERT_EQ(count_named(q, copy), 1);
  const int32_t b = buffer_named(q, copy);
  EXPECT_EQ(q.buffers[b].bytes, 4096u);
  EXPECT_EQ(q.steps[size_t(testing::last_reader(q, b))].phase, Phase::Backward);
}

// Under CPUOffloadPolicy each group's shards are copied to the GPU for the all-gather, cast only where a parameter's
// type differs from the gathered one: the packed uint8 experts are copied as they are (256 + 128 B a rank), so the
// layer's host-to-device input is 2,688 B below the unquantized float32 experts' (2,048 + 1,024 B), as its shard is,
// and nothing of the layer is held in a stored type beside a cast copy.
TEST_F(QuantizedExperts, UnderCpuOffloadThePackedExpertsAreCopiedUncast) {
  const auto g = graph();
  TrainingRun o = run();
  o.gpus = 2;
  o.shard = Sharding::Fsdp2;
  o.nf4_torchao = false;
  o.fsdp_cpu_offload = true;
  const Program q = build_training_program(*g, o).program;
  o.quantize_experts = false;
  const Program plain = build_training_program(*g, o).program;
  EXPECT_EQ(testing::bytes_of(plain, "fsdp2_all_gather_input:layers.1") -
                testing::bytes_of(q, "fsdp2_all_gather_input:layers.1"),
            2688u);
  EXPECT_EQ(buffer_named(q, "fsdp2_offload_h2d_stored:layers.1"), -1);
}

TEST_F(QuantizedExperts, RefusesWhatItDoesNotModel) {
  // PEFT's ParamWrapper over the parametrization.
  try {
    build_training_program(*graph(), run("experts\\.gate_up_proj"));
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ParamWrapper"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layers.0.mlp.experts.gate_up_proj"), std::string::npos) << e.what();
  }
  // Experts that train (--trainable): replace_parameter_4bit leaves a parameter that cannot.
  try {
    TrainingRun o = run();
    o.lora_rank = 0;
    o.lora_targets.clear();
    o.trainable = "experts";
    build_training_program(*graph(), o);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--quantize-experts: the stacked experts' parameter "
                                         "'layers.0.mlp.experts.gate_up_proj' trains (--trainable)"),
              std::string::npos)
        << e.what();
  }
  // The eager loop: no stacked parameters to quantize.
  try {
    build_training_program(*graph("eager"), run());
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no stacked experts' parameters"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memplan
