// --lora-targets naming a mixture of experts' stacked parameters (cost_models/lora_parameters.h): PEFT's
// LoraConfig(target_parameters=[...]), its ParamWrapper (huggingface/peft 5d602fd, src/peft/tuners/lora/layer.py),
// on the tiny qwen3_moe of grouped_mm_test.cc (2 layers, both sparse, H = 16, E = 4 experts of I = 8, top-2, float32)
// at batch 1 x seq 128 (N = 128 tokens, S = 256 pairs), --lora-rank 2. Every figure by hand from PEFT's shapes.
//
// Qwen3MoeExperts stores gate_up_proj [E, 2I, H] = [4, 16, 16] and down_proj [E, H, I] = [4, 16, 8], not
// is_transposed, so ParamWrapper.update_layer swaps _get_in_out_features' (shape[1], shape[2]): in = shape[2],
// out = shape[1]; lora_A = nn.Linear(in, r·E) and lora_B = nn.Linear(r·E, out):
//   gate_up_proj: lora_A [8, 16] 128 values, lora_B [16, 8] 128: 256.
//   down_proj:    lora_A [8, 8]   64 values, lora_B [16, 8] 128: 192.
//   A layer 448, two layers 896 values, float32: 3,584 bytes (and as many of grads).
// get_delta_weight per parameter, layer 1: the adapters' reshapes and einsum's permute are views; bmm [E, out, in]
// (gate_up [4, 16, 16] 4,096 B, down [4, 16, 8] 2,048 B); * scaling the same; .to(float32) is the tensor itself;
// W + delta the same: 3 x (4,096 + 2,048) = 18,432 B of forward tensors. (einsum's bmm reads B's permuted view
// [E, out, r], strides (1, r·E, E), which CUDA's bmm copies contiguous inside the op, prepare_batch_matrix_for_cublas
// in aten/src/ATen/native/cuda/Blas.cpp: [4, 16, 2] 512 B each, a kernel's transient memplan does not count.)
// Kept for backward: each W + delta (the _grouped_mm's mat2, a view of it, kept because the rows need a grad in
// layer 1): E·in·out·4 bytes for each of the two accesses of a forward, 4,096 + 2,048 = 6,144 B; nothing else of
// the delta (bmm keeps its operands, views of the adapters; mul by a Python scalar keeps nothing).
// The experts' own tensors are those of full training (grouped_mm_test.cc: forward 138,288, kept 89,104): in layer 1
// the rows and the summed parameters both need grads, as every tensor does under full training.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "onnx_import/model_session.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"
#include "tests/cost_models/tiny_qwen3_moe_test_base.h"

namespace memplan {
namespace {

using testing::buffer_named;

class LoraTargetParameters : public testing::TinyQwen3MoeTest {
 protected:
  LoraTargetParameters() : TinyQwen3MoeTest("memplan_lora_parameters") {}
  std::shared_ptr<const Graph> graph(const std::string& experts) { return moe_graph(experts); }
  static TrainingRun lora(const std::string& targets) {
    TrainingRun o = sgd_ideal();
    o.lora_rank = 2;
    o.lora_targets = targets;
    return o;
  }
};

constexpr const char* kBoth = "experts\\.(gate_up|down)_proj";

TEST_F(LoraTargetParameters, AdapterShapesAndCountsByHand) {
  const auto g = graph("grouped_mm");
  const TrainingResult r = build_training_program(*g, lora(kBoth));
  EXPECT_EQ(r.lora_adapted_layers, 0);
  EXPECT_EQ(r.lora_adapted_parameters, 4);  // 2 layers x gate_up_proj, down_proj
  EXPECT_EQ(r.lora_parameters, 896u);
  EXPECT_EQ(r.param_bytes, 3584u);  // the trainable parameters: the adapters only
  EXPECT_EQ(r.grad_bytes, 3584u);
  const Program& p = r.program;
  auto bytes = [&](const std::string& name) {
    const int32_t b = buffer_named(p, name);
    return b < 0 ? int64_t{-1} : int64_t(p.buffers[b].bytes);
  };
  EXPECT_EQ(bytes("layers.1.mlp.experts.gate_up_proj.lora_A.weight"), 8 * 16 * 4);
  EXPECT_EQ(bytes("layers.1.mlp.experts.gate_up_proj.lora_B.weight"), 16 * 8 * 4);
  EXPECT_EQ(bytes("layers.1.mlp.experts.down_proj.lora_A.weight"), 8 * 8 * 4);
  EXPECT_EQ(bytes("layers.1.mlp.experts.down_proj.lora_B.weight"), 16 * 8 * 4);
  bool said = false;
  for (const std::string& n : r.notes) said = said || n.find("target_parameters") != std::string::npos;
  EXPECT_TRUE(said);
}

// QLoRA over transformers 5's grouped experts: --frozen-dtype nf4 re-stores the linear layers, and the note says the
// stacked experts' parameters stay whole: 2 layers x (gate_up_proj [4, 16, 16] = 1,024 + down_proj [4, 16, 8] = 512
// values) = 3,072 float32 values = 12,288 bytes in 4 parameters. The eager loop's per-expert Linear layers are
// re-stored, and no note is written.
TEST_F(LoraTargetParameters, AQuantizedBaseSaysItsStackedExpertsStayWhole) {
  TrainingRun o = lora("q_proj");
  o.frozen_storage = FrozenStorage::Nf4;
  auto note = [](const TrainingResult& r) {
    for (const std::string& n : r.notes)
      if (n.find("stacked experts' parameters") != std::string::npos) return n;
    return std::string();
  };
  const std::string said = note(build_training_program(*graph("grouped_mm"), o));
  EXPECT_EQ(said.rfind("4 stacked experts' parameters (12288 bytes) are not re-stored", 0), 0u) << said;
  EXPECT_NE(said.find("bitsandbytes issue #1849"), std::string::npos);
  EXPECT_EQ(note(build_training_program(*graph("eager"), o)), "");
}

TEST_F(LoraTargetParameters, TheSumIsKeptPerAccessByHand) {
  const auto g = graph("grouped_mm");
  const Program p = build_training_program(*g, lora(kBoth)).program;
  // Layer 1's delta and sum tensors, 3 x (4,096 + 2,048); the two sums kept.
  const auto [gate_up_forward, gate_up_kept] = testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.gate_up_proj/lora/");
  const auto [down_forward, down_kept] = testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.down_proj/lora/");
  EXPECT_EQ(gate_up_forward, 3u * 4096);
  EXPECT_EQ(down_forward, 3u * 2048);
  EXPECT_EQ(gate_up_kept, 4096u);  // W + delta, [4, 16, 16] float32
  EXPECT_EQ(down_kept, 2048u);     // [4, 16, 8]
  EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1/mlp/experts/"), std::make_pair(uint64_t{138288}, uint64_t{89104}));
}

// When each delta exists (ParamWrapper._activate_lora, _inject_parameters' nesting): the wrappers nest in
// named_parameters order, gate_up_proj's inside down_proj's, so the outer one's delta (down_proj's) is made first,
// both before the experts' forward, and each proxy holds its delta until that forward returns. Layer 1 (fp32: the
// Cast to the parameter's type is the delta itself): while gate_up's delta is made, down's [4, 16, 8] 2,048 B is
// live beside gate_up's bmm and * scaling, [4, 16, 16] 4,096 B each; both deltas are freed at the experts' last
// node, none kept for backward.
TEST_F(LoraTargetParameters, TheDeltasAreMadeBeforeTheExpertsAndHeldUntilTheyReturn) {
  const Program p = build_training_program(*graph("grouped_mm"), lora(kBoth)).program;
  const int32_t down_made = testing::step_named(p, "/layers.1.mlp.experts.down_proj/lora/Mul");
  const int32_t gate_up_made = testing::step_named(p, "/layers.1.mlp.experts.gate_up_proj/lora/Mul");
  int32_t experts_first = -1, experts_last = -1;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (p.steps[s].phase != Phase::Forward || p.steps[s].name.rfind("/layers.1/mlp/experts/", 0) != 0) continue;
    if (experts_first < 0) experts_first = static_cast<int32_t>(s);
    experts_last = static_cast<int32_t>(s);
  }
  ASSERT_GE(down_made, 0);
  ASSERT_GE(experts_first, 0);
  EXPECT_LT(down_made, gate_up_made);
  EXPECT_LT(gate_up_made, experts_first);
  const int32_t down = testing::buffer_named(p, "/layers.1.mlp.experts.down_proj/lora/Mul_output_0");
  const int32_t gate_up = testing::buffer_named(p, "/layers.1.mlp.experts.gate_up_proj/lora/Mul_output_0");
  ASSERT_GE(down, 0);
  ASSERT_GE(gate_up, 0);
  EXPECT_EQ(p.buffers[down].bytes, 2048u);
  EXPECT_EQ(testing::last_reader(p, down), experts_last);
  EXPECT_EQ(testing::last_reader(p, gate_up), experts_last);
  const Step& made = p.steps[size_t(gate_up_made)];
  EXPECT_TRUE(testing::step_reads(made, testing::buffer_named(p, "/layers.1.mlp.experts.gate_up_proj/lora/MatMul_output_0")));
  EXPECT_EQ(p.buffers[size_t(testing::buffer_named(p, "/layers.1.mlp.experts.gate_up_proj/lora/MatMul_output_0"))].bytes, 4096u);
}

// --precision bf16 (model.bfloat16()), PEFT's float32 adapters (cast_adapter_dtype): the bmm and * scaling run in
// float32 (gate_up 4,096 B each, down 2,048), .to(param.dtype) copies the delta into bfloat16 (2,048 and 1,024) and
// W + delta is bfloat16 (2,048 and 1,024, kept): layer 1 holds 12,288 + 6,144 B of these, 3,072 kept. --lora-dtype
// base (autocast_adapter_dtype=False): all bfloat16, the cast is the delta itself: 3 x (2,048 + 1,024) = 9,216.
TEST_F(LoraTargetParameters, HalfBaseCopiesTheDeltaIntoItsType) {
  const auto g = graph("grouped_mm");
  TrainingRun o = lora(kBoth);
  o.precision = Precision::Bf16;
  Program p = build_training_program(*g, o).program;
  const std::string gate_up = "/layers.1.mlp.experts.gate_up_proj/lora/", down = "/layers.1.mlp.experts.down_proj/lora/";
  EXPECT_EQ(testing::forward_and_kept_bytes(p, gate_up), std::make_pair(uint64_t{12288}, uint64_t{2048}));
  EXPECT_EQ(testing::forward_and_kept_bytes(p, down), std::make_pair(uint64_t{6144}, uint64_t{1024}));
  EXPECT_EQ(p.buffers[buffer_named(p, gate_up + "Cast_output_0")].bytes, 2048u);
  o.lora_float32 = false;
  p = build_training_program(*g, o).program;
  EXPECT_EQ(testing::forward_and_kept_bytes(p, gate_up).first + testing::forward_and_kept_bytes(p, down).first, 9216u);
}

// torch.autocast (--precision amp-bf16, amp-fp16) over the float32 parameters and adapters. get_delta_weight runs in
// the forward, inside autocast: torch.einsum is a lower_precision_fp op (AT_FORALL_LOWER_PRECISION_FP, aten/src/ATen/
// autocast_mode.h at d70fe7f: einsum and bmm), so its two operands, weight_B.reshape(out, -1, E) and
// weight_A.reshape(E, -1, in), are cast to the low type first (autocast_mode.cpp cached_cast: views, arg.is_view(), so
// not the weight cache; one cast a forward anyway, under parametrize.cached()), and einsum's permutes and bmm run on
// those copies. `* scaling` (a Python float, no autocast op) keeps the low type; .to(param.dtype) copies the delta back
// into float32; W + delta (add, no autocast op) is float32; aten::_grouped_mm is on no autocast list (the same
// autocast_mode.h; still so on main, pytorch/pytorch issue #174763), so it reads the float32 sum as is. Layer 1:
//   gate_up_proj: B's view [16, 2, 4] and A's [4, 2, 16], 128 values each, 2 bytes: 256 + 256; bmm [E, out, in]
//                 [4, 16, 16] 2 bytes 2,048; * scaling 2,048; .to(float32) 4,096; W + delta 4,096: 12,800 B.
//   down_proj:    B's view [16, 2, 4] 256, A's [4, 2, 8] 64 values 128; bmm [4, 16, 8] 1,024; * scaling 1,024;
//                 .to 2,048; sum 2,048: 6,528 B.
// Kept: BmmBackward0 saves both operands (both need a grad: the two low-type copies, 256 + 256 and 256 + 128),
// _grouped_mm the float32 sum (4,096 and 2,048: the rows need a grad in layer 1); ToCopyBackward0, the scalar
// MulBackward0 and AddBackward0 save nothing: 4,608 and 2,432 (fp32's 4,096 and 2,048 plus the two copies). The
// adapters themselves are never cast whole (no lora_A.weight:autocast). The experts' own tensors are fp32's
// (grouped_mm_test.cc: 138,288 B forward, 89,104 kept): their rows are the post-attention RMSNorm's output, float32
// (Qwen3MoeRMSNorm returns weight * x.to(input_dtype), the float32 residual's type), and none of their ops (the
// gathers, histc, _grouped_mm, silu, the products, index_add) is on an autocast list.
TEST_F(LoraTargetParameters, AutocastCastsTheDeltaOperandsNotTheSum) {
  const auto g = graph("grouped_mm");
  const std::string gate_up = "/layers.1.mlp.experts.gate_up_proj/lora/";
  const std::string down = "/layers.1.mlp.experts.down_proj/lora/";
  for (Precision amp : {Precision::AmpBf16, Precision::AmpFp16}) {
    TrainingRun o = lora(kBoth);
    o.precision = amp;
    const Program p = build_training_program(*g, o).program;
    EXPECT_EQ(testing::forward_and_kept_bytes(p, gate_up), std::make_pair(uint64_t{12800}, uint64_t{4608}));
    EXPECT_EQ(testing::forward_and_kept_bytes(p, down), std::make_pair(uint64_t{6528}, uint64_t{2432}));
    EXPECT_EQ(testing::bytes_of(p, gate_up + "MatMul_output_0"), 2048u);
    EXPECT_EQ(testing::bytes_of(p, gate_up + "Add_output_0"), 4096u);  // the sum _grouped_mm reads, float32
    EXPECT_EQ(testing::bytes_of(p, down + "Reshape_output_0:autocast"), 128u);  // A's view, [4, 2, 8] low type
    EXPECT_EQ(buffer_named(p, "layers.1.mlp.experts.gate_up_proj.lora_A.weight:autocast"), -1);
    EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1/mlp/experts/"),
              std::make_pair(uint64_t{138288}, uint64_t{89104}));  // fp32's (TheSumIsKeptPerAccessByHand)
  }
}

// --frozen-dtype nf4 / int8 (bitsandbytes): replace_with_bnb_linear re-stores nn.Linear layers only, and the stacked
// experts are none (bitsandbytes issue #1849), so an adapted stacked parameter keeps its float32 (gate_up 4,096 B,
// down 2,048 B in layer 1) and its delta and sum are fp32's (TheSumIsKeptPerAccessByHand: 12,288 / 4,096 and 6,144 /
// 2,048), while the attention's Linear layers are re-stored. The note counts the adapted parameters as well: 2 layers
// x (1,024 + 512) values x 4 B = 12,288 bytes in 4 parameters.
TEST_F(LoraTargetParameters, AQuantizedBaseLeavesAdaptedExpertsWhole) {
  const auto g = graph("grouped_mm");
  for (FrozenStorage s : {FrozenStorage::Nf4, FrozenStorage::Int8}) {
    TrainingRun o = lora(kBoth);
    o.frozen_storage = s;
    const TrainingResult r = build_training_program(*g, o);
    const Program& p = r.program;
    EXPECT_EQ(testing::bytes_of(p, "layers.1.mlp.experts.gate_up_proj"), 4096u);
    EXPECT_EQ(testing::bytes_of(p, "layers.1.mlp.experts.down_proj"), 2048u);
    EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.gate_up_proj/lora/"),
              std::make_pair(uint64_t{12288}, uint64_t{4096}));
    EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.down_proj/lora/"),
              std::make_pair(uint64_t{6144}, uint64_t{2048}));
    bool said = false;
    for (const std::string& n : r.notes)
      said = said || n.rfind("4 stacked experts' parameters (12288 bytes) are not re-stored", 0) == 0;
    EXPECT_TRUE(said);
  }
}

// Autocast over a bf16 base (--precision amp-bf16 --param-dtype bf16: the Trainer's bf16=True on a bf16 checkpoint, the
// hf-peft recipes on one): the stacked parameters are bf16 and PEFT's adapters float32 (ParamWrapper's
// _move_adapter_to_device_of_base_layer makes them in param.dtype, then cast_adapter_dtype upcasts them,
// autocast_adapter_dtype=True). einsum casts the two views as above (256 + 256; 256 + 128), bmm and * scaling are
// bf16 (2,048 each; 1,024), .to(param.dtype) is bf16 to bf16, the delta itself (Tensor.to returns self: no copy), and
// W + delta is bf16 (2,048; 1,024, kept): gate_up 6,656 B, 2,560 kept; down 3,456, 1,408 kept.
TEST_F(LoraTargetParameters, AutocastOverABf16Base) {
  const auto g = graph("grouped_mm");
  TrainingRun o = lora(kBoth);
  o.precision = Precision::AmpBf16;
  o.amp_param_dtype = DType::BFloat16;
  const Program p = build_training_program(*g, o).program;
  EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.gate_up_proj/lora/"),
            std::make_pair(uint64_t{6656}, uint64_t{2560}));
  EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.down_proj/lora/"),
            std::make_pair(uint64_t{3456}, uint64_t{1408}));
  EXPECT_EQ(testing::bytes_of(p, "layers.1.mlp.experts.gate_up_proj"), 2048u);          // the parameter, bf16
  EXPECT_EQ(testing::bytes_of(p, "layers.1.mlp.experts.gate_up_proj.lora_A.weight"), 512u);  // float32
}

// GPTQ and AWQ (--frozen-dtype gptq-int4 / awq-int4) re-store the decoder's Linear layers (optimum's
// GPTQQuantizer.convert_model, AutoAWQ: frozen_storage.h), not the stacked experts, which keep the model's type and are
// adapted as on a half base (HalfBaseCopiesTheDeltaIntoItsType). A qwen3_moe whose Linear layers pack (every in and
// out a multiple of 32: hidden 32, 4 heads and 4 KV heads of 8, 32 experts of 32, the router [32, 32]), --precision
// bf16 (GPTQ) / fp16 (AWQ, group 32): gate_up_proj [32, 64, 32] = 65,536 values, 131,072 B; down_proj [32, 32, 32]
// = 32,768 values, 65,536 B, both half, not re-stored (2 layers: 393,216 B, the note's). Layer 1's gate_up delta:
// bmm [E, out, in] float32 (PEFT's float32 adapters) 262,144 B, * scaling 262,144, .to(half) 131,072, W + delta
// 131,072 (kept): 786,432 B.
TEST_F(LoraTargetParameters, PackedBaseLeavesAdaptedExpertsWhole) {
  std::ofstream(path_) << R"({"model_type": "qwen3_moe", "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 8, "vocab_size": 64,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": false,
      "torch_dtype": "float32", "hidden_act": "silu", "num_experts": 32, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
      "output_router_logits": false, "router_aux_loss_coef": 0.001, "attention_bias": false})";
  const auto g = graph("grouped_mm");
  for (FrozenStorage s : {FrozenStorage::GptqInt4, FrozenStorage::AwqInt4}) {
    TrainingRun o = lora(kBoth);
    o.frozen_storage = s;
    o.precision = s == FrozenStorage::GptqInt4 ? Precision::Bf16 : Precision::Fp16;
    o.quant_group_size = 32;
    const TrainingResult r = build_training_program(*g, o);
    const Program& p = r.program;
    EXPECT_EQ(r.lora_adapted_parameters, 4);
    EXPECT_EQ(testing::bytes_of(p, "layers.1.mlp.experts.gate_up_proj"), 131072u);
    EXPECT_EQ(testing::bytes_of(p, "layers.1.mlp.experts.down_proj"), 65536u);
    EXPECT_LT(testing::bytes_of(p, "layers.1.self_attn.q_proj.weight"), 32u * 32 * 2);  // packed
    EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.gate_up_proj/lora/"),
              std::make_pair(uint64_t{786432}, uint64_t{131072}));
    bool said = false;
    for (const std::string& n : r.notes)
      said = said || (n.rfind("4 stacked experts' parameters (393216 bytes) are not re-stored", 0) == 0 &&
                      n.find(s == FrozenStorage::GptqInt4 ? "GPTQ's conversion" : "AutoAWQ's conversion") !=
                          std::string::npos);
    EXPECT_TRUE(said);
  }
}

// PEFT's ParamWrapper refuses lora_dropout != 0 (ParamWrapper.__init__ and update_layer). --frozen-dtype bf16 / fp16
// over float32 parameters: PEFT adds delta.to(param.dtype) to the half parameter, and _grouped_mm cannot take float32
// rows with that half sum (check_lora_parameter_storage); a base stored in bf16 that computes in it (--precision bf16:
// nothing re-stored) is modelled (HalfBaseCopiesTheDeltaIntoItsType).
TEST_F(LoraTargetParameters, Refusals) {
  const auto g = graph("grouped_mm");
  auto refused = [&](const TrainingRun& o, const std::string& message) {
    try {
      build_training_program(*g, o);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  TrainingRun o = lora(kBoth);
  o.lora_dropout = 0.1;
  refused(o, "refuses lora_dropout != 0");
  for (Precision p : {Precision::Fp32, Precision::AmpBf16}) {
    o = lora(kBoth);
    o.precision = p;
    o.frozen_storage = FrozenStorage::Bf16;
    refused(o, "--frozen-dtype bf16 with --lora-targets naming the stacked experts' parameter "
               "'layers.0.mlp.experts.gate_up_proj': PEFT's ParamWrapper adds its delta");
  }
  o.frozen_storage = FrozenStorage::Fp16;
  refused(o, "cannot multiply float32 rows by that float16 sum");
  o = lora(kBoth);
  o.precision = Precision::Bf16;
  o.frozen_storage = FrozenStorage::Bf16;
  EXPECT_EQ(build_training_program(*g, o).lora_adapted_parameters, 4);
  o = lora("q_proj");  // the experts not adapted: the per-op cast of --frozen-dtype, as before
  o.frozen_storage = FrozenStorage::Bf16;
  EXPECT_EQ(build_training_program(*g, o).lora_adapted_layers, 2);
}

// gpt_oss (GptOssExperts: gate_up_proj [E, H, 2I] = [4, 16, 16], down_proj [E, I, H] = [4, 8, 16], stored [E, in,
// out], is_transposed: no swap): in = shape[1], out = shape[2]; gate_up lora_A [8, 16] and lora_B [16, 8] (256),
// down lora_A [8, 8] and lora_B [16, 8] (192): 896 in two layers, as the qwen3_moe's. einsum "o r e, e r i -> e i o":
// bmm [E, out, in] permuted back to [E, in, out], a view; the same 3 x (4,096 + 2,048) bytes a layer and the two sums
// kept. The eager loop reads one expert at a time (self.gate_up_proj[expert_idx], a Gather by a Python int): refused.
TEST_F(LoraTargetParameters, GptOssGroupedAndEager) {
  std::ofstream(path_) << R"({"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 16,
      "intermediate_size": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "vocab_size": 64,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 150000.0, "tie_word_embeddings": false,
      "torch_dtype": "float32", "hidden_act": "silu", "attention_bias": true, "num_local_experts": 4,
      "num_experts_per_tok": 2, "experts_per_token": 2, "sliding_window": 8,
      "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0})";
  const TrainingResult r = build_training_program(*graph("grouped_mm"), lora(kBoth));
  EXPECT_EQ(r.lora_adapted_parameters, 4);
  EXPECT_EQ(r.lora_parameters, 896u);
  const Program& p = r.program;
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.1.mlp.experts.down_proj.lora_A.weight")].bytes, 8u * 8 * 4);
  EXPECT_EQ(p.buffers[buffer_named(p, "layers.1.mlp.experts.down_proj.lora_B.weight")].bytes, 16u * 8 * 4);
  EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.gate_up_proj/lora/").second, 4096u);
  EXPECT_EQ(testing::forward_and_kept_bytes(p, "/layers.1.mlp.experts.down_proj/lora/").second, 2048u);
  try {
    build_training_program(*graph("eager"), lora(kBoth));
    FAIL() << "the eager loop accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("modelled on transformers' grouped_mm experts only"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace memplan
