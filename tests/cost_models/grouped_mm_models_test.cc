// --experts-implementation grouped_mm on deepseek_v3 and gpt_oss (onnx_import/hf_moe_grouped.h): one sparse block of
// a tiny config.json of each, every tensor by hand from transformers 5's source (grouped_mm_experts_forward,
// src/transformers/integrations/moe.py at 0261a46; DeepseekV3NaiveMoe / DeepseekV3MoE, models/deepseek_v3/
// modeling_deepseek_v3.py; GptOssExperts, models/gpt_oss/modular_gpt_oss.py at 0261a46).
#include <gtest/gtest.h>


#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cost_models/cost_model.h"
#include "onnx_import/hf_config.h"
#include "onnx_import/model_session.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;

// A config.json written to a fresh folder, and its graphs at batch 1 x seq 128 (N = 128 tokens, S = N·k = 256).
class TinyConfig : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& json) {
    dir_ = testing::process_temp_dir("memplan_" + name);
    path_ = (dir_ / "config.json").string();
    std::ofstream(path_) << json;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::shared_ptr<const Graph> graph(const std::string& experts) {
    session_ = std::make_unique<ModelSession>(path_, "train", "", false, experts);
    Bindings b;
    b.dims = {{"batch", 1}, {"seq", 128}};
    b.graph = "train", b.experts = experts;
    return session_->shape(b);
  }
  // The forward bytes of the non-resident buffers whose names start with `scope`, and those of them a backward
  // step reads (what autograd keeps), in one training step.
  std::pair<uint64_t, uint64_t> sums(const Graph& g, const std::string& scope) {
    return testing::forward_and_kept_bytes(build_training_program(g, sgd_ideal()).program, scope);
  }
  // The output shapes of the ATen nodes in `scope`, in order.
  static std::vector<std::vector<int64_t>> aten_shapes(const Graph& g, const std::string& scope) {
    std::vector<std::vector<int64_t>> shapes;
    for (const Node& n : g.nodes)
      if (n.op_type == "ATen" && n.name.rfind(scope, 0) == 0) shapes.push_back(g.tensors[n.outputs[0]].shape);
    return shapes;
  }
  static uint64_t parameter_bytes(const Graph& g) {
    uint64_t bytes = 0;
    for (int32_t t : g.initializers) bytes += g.tensors[t].bytes();
    return bytes;
  }
  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<ModelSession> session_;
};

// A tiny deepseek_v3: 2 layers, first_k_dense_replace 1 (layer 0 dense, layer 1 sparse), H = 16, 4 heads, latent
// attention of ranks 8/8 and head dims 4/4/4, E = 4 routed experts of I = 8 in n_group 2 (topk_group 1), top k = 2,
// one shared expert; float32. DeepseekV3NaiveMoe (decorated with use_experts_implementation): gate_up_proj [4, 16,
// 16], down_proj [4, 16, 8]; DeepseekV3MoE.forward hands it the router's top-k indices and float32 weights [128, 2].
// grouped_mm_experts_forward on layer 1's 128 tokens, forward (same sizes as tests/cost_models/grouped_mm_test.cc's
// qwen3_moe: H 16, E 4, I 8, k 2, N 128):
//   zeros_like [128, 16] f32 8,192; arange(N) [128] i64 1,024; token_idx [256] i64 2,048; the two argsorts' values
//   and indices 4 x [256] i64 8,192; hidden[token_idx] [256, 16] 16,384; expert_ids[perm] 2,048;
//   sample_weights[perm] [256] f32 1,024; current[perm] 16,384; .float() [256] 1,024; histc [4] 16; cumsum's int32
//   cast and sum 2 x 16; _grouped_mm gate_up [256, 16] 16,384; silu [256, 8] 8,192; silu * up 8,192; _grouped_mm
//   down [256, 16] 16,384; x sample_weights 16,384; [inv_perm] 16,384: 138,288.
// Kept: token_idx, perm, inv_perm 3 x 2,048; current[perm] 16,384; offsets 16; gate_up 16,384; silu 8,192; silu * up
// 8,192; down 16,384; sample_weights[perm] 1,024; the un-sorted rows 16,384: 89,104.
class GroupedDeepseekV3 : public TinyConfig {
 protected:
  void SetUp() override {
    write("grouped_deepseek", R"({"model_type": "deepseek_v3", "num_hidden_layers": 2, "first_k_dense_replace": 1,
      "hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 8, "kv_lora_rank": 8,
      "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4, "intermediate_size": 32,
      "moe_intermediate_size": 8, "vocab_size": 64, "n_routed_experts": 4, "n_group": 2, "topk_group": 1,
      "num_experts_per_tok": 2, "n_shared_experts": 1, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
      "rope_theta": 10000, "tie_word_embeddings": false, "torch_dtype": "float32", "hidden_act": "silu",
      "norm_topk_prob": true, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
      "moe_layer_freq": 1, "ep_size": 1})");
  }
};

TEST_F(GroupedDeepseekV3, TheExpertsTensorsByHand) {
  const auto g = graph("grouped_mm");
  // Layer 0 is dense (first_k_dense_replace): no grouped block there.
  EXPECT_TRUE(aten_shapes(*g, "/layers.0/").empty());
  EXPECT_EQ(aten_shapes(*g, "/layers.1/mlp/experts/"), (std::vector<std::vector<int64_t>>{{4}, {256, 16}, {256, 16}}));
  EXPECT_EQ(sums(*g, "/layers.1/mlp/experts/"), std::make_pair(uint64_t{138288}, uint64_t{89104}));
  // The grouped GEMMs' grads: current[perm] [256, 16] 16,384 and gate_up_proj^T [4, 16, 16] 4,096; silu * up [256, 8]
  // 8,192 and down_proj^T [4, 8, 16] 2,048.
  const Program p = build_training_program(*g, sgd_ideal()).program;
  std::vector<uint64_t> grads;
  for (const Node& n : g->nodes)
    if (n.op_type == "ATen" && n.inputs.size() == 3 && n.name.rfind("/layers.1/mlp/experts/", 0) == 0)
      for (int k : {0, 1}) grads.push_back(p.buffers[buffer_named(p, "grad:" + g->tensors[n.inputs[k]].name)].bytes);
  EXPECT_EQ(grads, (std::vector<uint64_t>{16384, 4096, 8192, 2048}));
}

// The whole sparse block ("/layers.1/mlp/": the router, the experts, the shared expert, the add) under both forms.
// The router (DeepseekV3TopkRouter's sigmoid and group-limited top-k) and shared_experts are the same ops in both, so
// the difference is the experts' alone. The eager loop (balanced: each expert 64 of the 256 pairs): arange(S) [256]
// i64 2,048; the pair's token, Div and two int64 casts, 3 x 2,048; the zeros 8,192; per expert hidden[None, top_x]
// [1, 64, 16] 4,096, gate and up [64, 8] 2,048 each, silu 2,048, silu * up 2,048, down [64, 16] 4,096, x weights
// 4,096: 20,480, x 4 = 81,920: 98,304. Grouped 138,288: +39,984 forward bytes.
// Kept: eager the pair tokens 2,048, the router's weights [128, 2] 1,024 (each expert's slice a view), per expert
// 20,480 (as tests/cost_models/grouped_mm_test.cc counts) x 4: 84,992; grouped 89,104 (the weights kept as their
// sorted copy instead): +4,112.
// DeepSeek-V3's float32 router and accumulator (transformers models/deepseek_v3/modeling_deepseek_v3.py at f5a9ec5:
// DeepseekV3TopkRouter.forward F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)), the
// sigmoid and top-k weights in float32; DeepseekV3MoE.moe's zeros_like(hidden_states, dtype=topk_weights.dtype), each
// expert_output * expert_weights.unsqueeze(-1) promoted to float32 and index_add_-ed, .type(hidden_states.dtype) at
// the end), the eager loop on the same config's layer 1 (N = 128 tokens, H 16, E 4, k 2; each expert 64 pairs).
// Under --precision bf16 (the model stored in bfloat16):
//   the tokens' float32 copy [128, 16] x 4 = 8,192 and the gate weight's [4, 16] x 4 = 256; the logits and the
//   sigmoid scores [128, 4] x 4 = 2,048 each; the routed weights [128, 2] x 4 = 1,024; an expert's down_proj [64, 16]
//   in bfloat16, 2,048, times its float32 weights: [64, 16] x 4 = 4,096 (index_add_'s source, kept for backward:
//   derivatives.yaml index_add saves source); the accumulator [128, 16] x 4 = 8,192 (index_add_ in place); the cast
//   back [128, 16] x 2 = 4,096.
// Per token, against the same block all in bfloat16 (where the casts are no-ops): the float32 copy 4H = 64 B, k
// weighted rows at 2 more bytes each, k·2H = 64 B (also kept for backward), the accumulator 2H = 32 B and the cast
// back 2H = 32 B: 192 B of forward tensors a token a sparse layer (DeepSeek-V3's H 7,168, k 8: 172,032 B, of which
// the weighted rows, 114,688 B, are kept until backward), plus 2 B a logit and a routing weight.
// Under fp32 the casts are no-ops that return their input (no buffer of their own); under amp-bf16 over bfloat16
// parameters only the float32 copies are float32 (the weight's [4, 16] x 4 = 256): F.linear is on autocast's
// lower-precision list, so the logits are bfloat16 ([128, 4] x 2 = 1,024) and so is everything after them.
TEST_F(GroupedDeepseekV3, TheFloat32RouterAndAccumulatorByHand) {
  const auto g = graph("eager");
  const std::string gate = "/layers.1/mlp/gate/", block = "/layers.1/mlp/";
  TrainingRun o = sgd_ideal();
  o.precision = Precision::Bf16;
  const TrainingResult bf16 = build_training_program(*g, o);
  const Program& p = bf16.program;
  auto bytes = [](const Program& q, const std::string& name) {
    const int32_t b = buffer_named(q, name);
    return b < 0 ? uint64_t{0} : q.buffers[b].bytes;
  };
  EXPECT_EQ(bytes(p, gate + "Cast_output_0"), 8192u);
  EXPECT_EQ(bytes(p, gate + "Cast_1_output_0"), 256u);
  EXPECT_EQ(bytes(p, gate + "MatMul_output_0"), 2048u);
  EXPECT_EQ(bytes(p, gate + "Sigmoid_output_0"), 2048u);
  EXPECT_EQ(bytes(p, gate + "Mul_1_output_0"), 1024u);
  EXPECT_EQ(bytes(p, block + "experts.0/down_proj/MatMul_output_0"), 2048u);
  EXPECT_EQ(bytes(p, block + "Mul_output_0"), 4096u);
  EXPECT_EQ(bytes(p, block + "ConstantOfShape_output_0"), 8192u);
  EXPECT_EQ(bytes(p, block + "Cast_3_output_0"), 4096u);
  bool source_kept = false;
  for (const Step& s : p.steps)
    if (s.name.rfind("backward:", 0) == 0)
      for (int32_t b : s.reads) source_kept |= b == buffer_named(p, block + "Mul_output_0");
  EXPECT_TRUE(source_kept);
  EXPECT_NE(std::find_if(bf16.notes.begin(), bf16.notes.end(),
                         [](const std::string& n) { return n.rfind("1 routers run in float32", 0) == 0; }),
            bf16.notes.end());
  // fp32: the casts return their input.
  const Program fp32 = build_training_program(*g, sgd_ideal()).program;
  EXPECT_EQ(buffer_named(fp32, gate + "Cast_output_0"), -1);
  EXPECT_EQ(buffer_named(fp32, block + "Cast_3_output_0"), -1);
  EXPECT_EQ(bytes(fp32, block + "Mul_output_0"), 4096u);
  // amp-bf16 over bfloat16 parameters: the weight's float32 copy, then autocast's bfloat16 product. (The tokens'
  // copy is one only where the block's input is half: this graph's RMSNorm, without --upcast rmsnorm's cast back,
  // hands autocast's float32 on, and .type(torch.float32) returns it.)
  o.precision = Precision::AmpBf16;
  o.amp_param_dtype = DType::BFloat16;
  const Program amp = build_training_program(*g, o).program;
  EXPECT_EQ(bytes(amp, gate + "Cast_1_output_0"), 256u);
  EXPECT_EQ(bytes(amp, gate + "MatMul_output_0"), 1024u);
}

TEST_F(GroupedDeepseekV3, AgainstTheEagerLoopByHand) {
  const auto eager = graph("eager");
  const auto [eager_forward, eager_saved] = sums(*eager, "/layers.1/mlp/");
  const uint64_t eager_parameters = parameter_bytes(*eager);
  const auto grouped = graph("grouped_mm");
  const auto [forward, saved] = sums(*grouped, "/layers.1/mlp/");
  EXPECT_EQ(forward - eager_forward, 39984u);
  EXPECT_EQ(saved - eager_saved, 4112u);
  // The same parameters: 4 experts x (gate 8 x 16 + up 8 x 16 + down 16 x 8) floats either way.
  EXPECT_EQ(parameter_bytes(*grouped), eager_parameters);
}

// A tiny gpt_oss: 2 layers, H = 16, I = 8, E = 4, top k = 2; float32. GptOssExperts (experts_are_transposed, with
// biases): gate_up_proj [4, 16, 16] and down_proj [4, 8, 16] used as stored, gate_up_proj_bias [4, 16] and
// down_proj_bias [4, 16] added per row as bias[expert_ids_g]; _apply_gate on the [256, 16] rows.
// Layer 0's experts, forward: as above up to the offsets (zeros 8,192, arange 1,024, token_idx 2,048, argsorts
// 8,192, hidden[token_idx] 16,384, expert_ids[perm] 2,048, sample_weights[perm] 1,024, current[perm] 16,384, .float()
// 1,024, histc 16, cumsum 32: 55,360); _grouped_mm gate_up [256, 16] 16,384, gate_up_proj_bias[expert_ids_g]
// [256, 16] 16,384, their sum 16,384; gate[..., ::2] and up[..., 1::2] views; gate.clamp(max) [256, 8] 8,192,
// up.clamp [256, 8] 8,192, gate * alpha 8,192, sigmoid 8,192, glu 8,192, up + 1 8,192, (up + 1) * glu 8,192;
// _grouped_mm down [256, 16] 16,384, down_proj_bias[expert_ids_g] 16,384, their sum 16,384, x sample_weights
// 16,384, [inv_perm] 16,384: 55,360 + 3 x 16,384 + 7 x 8,192 + 5 x 16,384 = 244,784. The graph also holds the
// clamp bounds as torch.onnx writes Python floats: a float64 Constant per bound (7.0, -7.0; constants, resident as
// the parameters are) and each use's cast to float, scalars (3 x 4; clamp_max casts its bound twice, the second to
// its own type, no copy): 244,796.
// Kept: token_idx, perm, inv_perm 3 x 2,048; current[perm] 16,384; the offsets 16; expert_ids_g 2,048 (the bias
// gathers' index); gate_up + bias 16,384 (both clamps' input, through their views); the clamped gate 8,192 and its
// sigmoid 8,192 (glu's operands); glu 8,192 and up + 1 8,192 (the product's); (up + 1) * glu 8,192 (down's
// operand); down + bias 16,384 and sample_weights[perm] 1,024 (the weighting's); the un-sorted rows 16,384:
// 115,728.
class GroupedGptOss : public TinyConfig {
 protected:
  void SetUp() override {
    write("grouped_gpt_oss", R"({"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 16,
      "intermediate_size": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "vocab_size": 64,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 150000.0, "tie_word_embeddings": false,
      "torch_dtype": "float32", "hidden_act": "silu", "attention_bias": true, "num_local_experts": 4,
      "num_experts_per_tok": 2, "experts_per_token": 2, "sliding_window": 8,
      "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0})");
  }
};

TEST_F(GroupedGptOss, TheExpertsTensorsByHand) {
  const auto g = graph("grouped_mm");
  EXPECT_EQ(aten_shapes(*g, "/layers.0/mlp/experts/"), (std::vector<std::vector<int64_t>>{{4}, {256, 16}, {256, 16}}));
  EXPECT_EQ(sums(*g, "/layers.0/mlp/experts/"), std::make_pair(uint64_t{244796}, uint64_t{115728}));
  // The grouped GEMMs' grads, on the parameters as stored: current[perm] 16,384 and gate_up_proj [4, 16, 16] 4,096;
  // (up + 1) * glu [256, 8] 8,192 and down_proj [4, 8, 16] 2,048.
  const Program p = build_training_program(*g, sgd_ideal()).program;
  std::vector<uint64_t> grads;
  for (const Node& n : g->nodes)
    if (n.op_type == "ATen" && n.inputs.size() == 3 && n.name.rfind("/layers.0/mlp/experts/", 0) == 0)
      for (int k : {0, 1}) grads.push_back(p.buffers[buffer_named(p, "grad:" + g->tensors[n.inputs[k]].name)].bytes);
  EXPECT_EQ(grads, (std::vector<uint64_t>{16384, 4096, 8192, 2048}));
  // GptOssExperts' four parameters, the eager loop's too: E x (H·2I + 2I + I·H + H) floats either way.
  const uint64_t grouped_parameters = parameter_bytes(*g);
  EXPECT_EQ(parameter_bytes(*graph("eager")), grouped_parameters);
}

}  // namespace
}  // namespace memplan
