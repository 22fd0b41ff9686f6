// Exporter patterns from real torch.onnx exports (tests/models/patterns, written by
// tests/models/export_patterns.py with torch 1.13): each hides one PyTorch op behind several nodes, or
// is one node PyTorch runs its own way. Each test checks that memplan runs the op PyTorch ran, with the
// bytes of its output and of what autograd saves worked out by hand from the shapes below,
// tools/autograd/derivatives.yaml and the autocast lists of aten/src/ATen/autocast_mode.cpp.
//
// Shapes (export_patterns.py, bound at batch 2): x [2, 5, 8] (rank-2 patterns: [2, 8]); nn.Linear(8, 16)
// for the linear patterns, nn.Linear(8, 8) in front of every parameterless op (so that its input needs
// a grad, as in a network). Under amp-fp16 a float16 element is 2 bytes, a float32 one 4.
#include <gtest/gtest.h>

#include <string>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::step_named;
using testing::bytes_of;

Graph pattern(const std::string& stem) {
  Bindings b;
  b.batch = 2;
  return import_model(std::string(MEMPLAN_ZOO_DIR) + "/patterns/" + stem + ".onnx", b);
}

// One training step of the export as it is (loss none: the graph's output is differentiated), SGD, without
// library workspaces (Runtime::Ideal keeps PyTorch's eager semantics, section 3 of docs/cost-models.md).
Program train(const std::string& stem, Precision precision = Precision::AmpFp16) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.loss = LossKind::None;
  o.optimizer = Optimizer::Sgd;
  o.precision = precision;
  return build_training_program(pattern(stem), o).program;
}

std::string op_at(const Program& p, const std::string& step) {
  const int32_t s = step_named(p, step);
  EXPECT_GE(s, 0) << step;
  return s < 0 ? "" : p.steps[s].op;
}

// What the op's backward step reads besides grads and resident parameters: the bytes autograd saved.
uint64_t saved_bytes(const Program& p, const std::string& op_step) {
  const int32_t s = step_named(p, "backward:" + op_step);
  EXPECT_GE(s, 0) << op_step;
  if (s < 0) return 0;
  uint64_t sum = 0;
  for (int32_t b : p.steps[s].reads) {
    const Buffer& buf = p.buffers[b];
    if (!buf.resident && buf.name.rfind("grad:", 0) != 0) sum += buf.bytes;
  }
  return sum;
}

int count_steps_with_op(const Program& p, const std::string& op) {
  int n = 0;
  for (const Step& s : p.steps)
    if (s.op == op && s.phase == Phase::Forward) ++n;
  return n;
}

// ---- Linear ----

// nn.Linear on a 2-D input with a bias exports as Gemm(x, W, b, transB=1): addmm. Under autocast: x cast to
// float16 (2*8*2 = 32 bytes), W cached (16*8*2 = 256), the output float16 (2*16*2 = 64). addmm saves mat1 (x)
// for W's grad; W.t() only for x's grad, which x (an input) does not need.
TEST(ExportedPatterns, LinearWithBiasOn2dIsGemmTransB) {
  const Program p = train("linear_train");
  EXPECT_EQ(op_at(p, "/Gemm"), "Gemm");
  EXPECT_EQ(bytes_of(p, "y"), 64u);
  EXPECT_EQ(bytes_of(p, "weight:autocast"), 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "weight:autocast")].category, Category::Weight);
  EXPECT_EQ(bytes_of(p, "bias:autocast"), 32u);
  EXPECT_EQ(saved_bytes(p, "/Gemm"), 32u);
}

// Without a bias (2-D) torch.onnx writes weight.t() as a Transpose and a MatMul: one mm, the same bytes.
TEST(ExportedPatterns, LinearWithoutBiasIsTransposeMatMul) {
  const Program p = train("linear_nobias_train");
  ASSERT_EQ(count_steps_with_op(p, "linear"), 1);
  EXPECT_EQ(buffer_named(p, "/Transpose_output_0"), -1);
  EXPECT_EQ(bytes_of(p, "y"), 64u);
  EXPECT_EQ(saved_bytes(p, "/MatMul"), 32u);
}

// On a 3-D input: Transpose(W) -> MatMul -> Add(b) with a bias, Transpose -> MatMul without. One output,
// 2*5*16*2 = 320 bytes; saved: x in float16, 2*5*8*2 = 160.
TEST(ExportedPatterns, Linear3dIsOneOpWithAndWithoutBias) {
  const Program with_bias = train("linear3d_train");
  ASSERT_EQ(count_steps_with_op(with_bias, "linear"), 1);
  EXPECT_EQ(op_at(with_bias, "/Add"), "linear");
  EXPECT_EQ(buffer_named(with_bias, "/MatMul_output_0"), -1);
  EXPECT_EQ(bytes_of(with_bias, "y"), 320u);
  EXPECT_EQ(saved_bytes(with_bias, "/Add"), 160u);
  const Program no_bias = train("linear3d_nobias_train");
  ASSERT_EQ(count_steps_with_op(no_bias, "linear"), 1);
  EXPECT_EQ(bytes_of(no_bias, "y"), 320u);
  EXPECT_EQ(saved_bytes(no_bias, "/MatMul"), 160u);
}

// Eval exports fold the transpose into an initializer: Gemm on 2-D, MatMul(x, Wt) -> Add(b) on 3-D. In
// PyTorch inference each is one op writing y (2*16*4 = 128 and 2*5*16*4 = 640 bytes, float32).
TEST(ExportedPatterns, LinearEvalExportsAreOneOpInInference) {
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const Program gemm = build_inference_program(pattern("linear_eval"), o).program;
  ASSERT_EQ(gemm.steps.size(), 1u);
  EXPECT_EQ(gemm.steps[0].op, "Gemm");
  EXPECT_EQ(bytes_of(gemm, "y"), 128u);
  const Program mm_add = build_inference_program(pattern("linear3d_eval"), o).program;
  ASSERT_EQ(mm_add.steps.size(), 1u);
  EXPECT_EQ(mm_add.steps[0].op, "linear");
  EXPECT_EQ(bytes_of(mm_add, "y"), 640u);
  // Without a bias, a MatMul on the folded initializer is already the mm PyTorch runs: one MatMul step.
  const Program mm = build_inference_program(pattern("linear3d_nobias_eval"), o).program;
  ASSERT_EQ(mm.steps.size(), 1u);
  EXPECT_EQ(mm.steps[0].op, "MatMul");
  EXPECT_EQ(bytes_of(mm, "y"), 640u);
}

// The same MatMul on an initializer in training under autocast: the weight is cast once into the autocast
// cache (16*8*2 = 256 bytes) and the output is float16 (2*5*16*2 = 320).
TEST(ExportedPatterns, MatMulOnAnInitializerIsLowPrecisionWithACachedWeight) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.loss = LossKind::None;
  o.optimizer = Optimizer::Sgd;
  o.precision = Precision::AmpFp16;
  const Program p = build_training_program(pattern("linear3d_nobias_eval"), o).program;
  EXPECT_EQ(op_at(p, "/MatMul"), "MatMul");
  EXPECT_EQ(bytes_of(p, "y"), 320u);
  const int32_t cached = buffer_named(p, "onnx::MatMul_4:autocast");
  ASSERT_GE(cached, 0);
  EXPECT_EQ(p.buffers[cached].bytes, 256u);
  EXPECT_EQ(p.buffers[cached].category, Category::Weight);
}

// ---- LayerNorm ----

// Opset 13 decomposes nn.LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add); opset 17
// writes LayerNormalization. Both are one native_layer_norm: float32 under autocast, so the float16 input
// is cast (2*5*8*4 = 320 bytes) and saved with mean and rstd, one float per row (10 rows: 40 bytes each):
// 400 bytes saved, and a float32 output of 320.
TEST(ExportedPatterns, LayerNormOpset13And17AreOneLayerNorm) {
  for (const char* stem : {"layernorm_op13_train", "layernorm_op17_train", "layernorm_noaffine_op13_train"}) {
    const Program p = train(stem);
    const std::string step = std::string(stem) == "layernorm_op17_train" ? "/1/LayerNormalization"
                             : std::string(stem) == "layernorm_op13_train" ? "/1/Add_1" : "/1/Div";
    EXPECT_EQ(op_at(p, step), std::string(stem) == "layernorm_op17_train" ? "LayerNormalization" : "layer_norm") << stem;
    EXPECT_EQ(bytes_of(p, "y"), 320u) << stem;
    EXPECT_EQ(saved_bytes(p, step), 400u) << stem;
    EXPECT_EQ(buffer_named(p, "/1/ReduceMean_output_0"), -1) << stem;
  }
}

// ---- GELU, SiLU ----

// nn.GELU exports as Div/Erf/Add/Mul/Mul at opsets 13 and 17 (torch 1.13 has no Gelu op: that is opset 20),
// and its tanh form as nine Mul/Add/Tanh nodes. Either is one gelu, not on autocast's lists, so it runs in
// its input's type: output float16 (2*5*8*2 = 160), saving its input (the linear's float16 output, 160).
TEST(ExportedPatterns, GeluErfAndTanhFormsAreOneGelu) {
  for (const char* stem : {"gelu_op13_train", "gelu_op17_train", "gelu_tanh_op13_train", "gelu_tanh_op17_train"}) {
    const Program p = train(stem);
    ASSERT_EQ(count_steps_with_op(p, "gelu"), 1) << stem;
    const std::string step = std::string(stem).find("tanh") != std::string::npos ? "/1/Mul_5" : "/1/Mul_1";
    EXPECT_EQ(bytes_of(p, "y"), 160u) << stem;
    EXPECT_EQ(saved_bytes(p, step), 160u) << stem;
    EXPECT_EQ(buffer_named(p, "/1/Erf_output_0"), -1) << stem;
    EXPECT_EQ(buffer_named(p, "/1/Tanh_output_0"), -1) << stem;
  }
}

// With --loss none the caller runs `y.backward(grad)`: no loss, so no float32 copy of the float16 output
// (it would be 2*5*8*4 = 320 bytes); the loss step writes nothing and the seed grad has y's type (160).
TEST(ExportedPatterns, NoLossCastsNothingUnderAutocast) {
  const Program p = train("gelu_op17_train");
  EXPECT_EQ(buffer_named(p, "y:autocast"), -1);
  EXPECT_TRUE(p.steps[step_named(p, "loss:none")].writes.empty());
  EXPECT_EQ(bytes_of(p, "grad:y"), 160u);
}

// nn.SiLU exports as Sigmoid, Mul: one silu saving its input (160), output float16 (160).
TEST(ExportedPatterns, SiluIsOneSilu) {
  const Program p = train("silu_train");
  ASSERT_EQ(count_steps_with_op(p, "silu"), 1);
  EXPECT_EQ(bytes_of(p, "y"), 160u);
  EXPECT_EQ(saved_bytes(p, "/1/Mul"), 160u);
  EXPECT_EQ(buffer_named(p, "/1/Sigmoid_output_0"), -1);
}

// ---- torch.rsqrt (LlamaRMSNorm) ----

// weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)) on h = Linear(x) [2, 5, 8], float32. torch.onnx
// writes rsqrt as Div(1, Sqrt(v)) (symbolic_opset9.rsqrt); eager runs one rsqrt, whose output [2, 5, 1] is
// 2*5*1*4 = 40 bytes, and RsqrtBackward0 saves only that result (derivatives.yaml rsqrt: result.pow(3)). The
// Sqrt's own 40 bytes never exist, so no second [2, 5, 1] tensor is kept for backward. h * rsqrt saves both
// operands: h (2*5*8*4 = 320) and the same 40-byte result.
TEST(ExportedPatterns, RsqrtIsOneRsqrtSavingItsResult) {
  const Program p = train("rms_norm_train", Precision::Fp32);
  EXPECT_EQ(op_at(p, "/1/Div"), "rsqrt");
  EXPECT_EQ(count_steps_with_op(p, "Sqrt"), 0);
  EXPECT_EQ(buffer_named(p, "/1/Sqrt_output_0"), -1);
  EXPECT_EQ(bytes_of(p, "/1/Div_output_0"), 40u);
  EXPECT_EQ(saved_bytes(p, "/1/Div"), 40u);
  EXPECT_EQ(saved_bytes(p, "/1/Mul"), 320u + 40u);
}

// ---- A mixture of experts' top-k ----

// torch.topk(softmax(h), 2) on h [2, 5, 8] (Mixtral's and Qwen-MoE's routing weights): TopkBackward0 keeps the int64
// indices (derivatives.yaml topk), [2, 5, 2] x 8 = 160 bytes; the values [2, 5, 2] float32 (80 bytes) are the output.
TEST(ExportedPatterns, TopKSavesItsIndices) {
  const Program p = train("topk_weights_train", Precision::Fp32);
  EXPECT_EQ(bytes_of(p, "y"), 80u);
  EXPECT_EQ(bytes_of(p, "/1/TopK_output_1"), 160u);
  EXPECT_EQ(saved_bytes(p, "/1/TopK"), 160u);
}

// DeepseekV3TopkRouter's scores.gather(-1, topk(scores, 2).indices) on sigmoid scores [2, 5, 8]: GatherBackward0 keeps
// self (the scores, 320 bytes, the buffer the sigmoid saves too) and the int64 index (160). The top-k's values reach
// no loss, so its backward node (and a second hold on the indices) is freed with them: no backward step.
TEST(ExportedPatterns, GatherElementsSavesSelfAndIndex) {
  const Program p = train("gather_weights_train", Precision::Fp32);
  EXPECT_EQ(bytes_of(p, "y"), 80u);
  EXPECT_EQ(saved_bytes(p, "/1/GatherElements"), 320u + 160u);
  EXPECT_EQ(step_named(p, "backward:/1/TopK"), -1);
}

// ---- Softmax, LogSoftmax ----

// Both are float32 under autocast: the float16 input is cast (320 bytes, not saved) and the float32 output
// (2*5*8*4 = 320) is what backward reads.
TEST(ExportedPatterns, SoftmaxAndLogSoftmaxSaveTheirFloatOutput) {
  for (const char* stem : {"softmax_train", "log_softmax_train"}) {
    const Program p = train(stem);
    const std::string step = std::string(stem) == "softmax_train" ? "/1/Softmax" : "/1/LogSoftmax";
    EXPECT_EQ(bytes_of(p, "/0/Add_output_0:autocast"), 320u) << stem;
    EXPECT_EQ(bytes_of(p, "y"), 320u) << stem;
    EXPECT_EQ(saved_bytes(p, step), 320u) << stem;
  }
}

// ---- Attention (nn.MultiheadAttention, 8 features, 2 heads, torch 1.13's math path) ----
// q, k, v are [batch*heads, seq, head_dim] = [4, 5, 4] (float16: 160 bytes), scores [4, 5, 5] (100 elements).

// Without a mask: bmm(q / sqrt(d), k^T) writes float16 scores (200 bytes); softmax casts them to float32
// (400) and saves its float32 output (400); bmm(p, v) casts p to float16 (200) and saves it with v.
TEST(ExportedPatterns, AttentionWithoutMaskIsBmmSoftmaxBmm) {
  const Program p = train("mha_train");
  EXPECT_EQ(op_at(p, "/mha/MatMul_1"), "MatMul");
  EXPECT_EQ(bytes_of(p, "/mha/MatMul_1_output_0"), 200u);
  EXPECT_EQ(saved_bytes(p, "/mha/Softmax"), 400u);
  EXPECT_EQ(saved_bytes(p, "/mha/MatMul_2"), 200u + 160u);
}

// With attn_mask (or key_padding_mask, merged into a float mask), torch 1.13 runs
// torch.baddbmm(mask, q, k^T), exported as Add(Mul(MatMul(q, k^T), alpha), Mul(mask, beta)). One op: the
// mask cast to float16, the float16 scores written once (200 bytes; not a float32 sum of 400 plus a
// MatMul result and a scaled copy), saving q and k^T (160 + 160).
TEST(ExportedPatterns, AttentionWithMaskIsOneBaddbmm) {
  for (const char* stem : {"mha_attn_mask_train", "mha_kpm_train"}) {
    const Program p = train(stem);
    EXPECT_EQ(op_at(p, "/mha/Add_2"), "baddbmm") << stem;
    EXPECT_EQ(bytes_of(p, "/mha/Add_2_output_0"), 200u) << stem;
    EXPECT_EQ(buffer_named(p, "/mha/MatMul_1_output_0"), -1) << stem;
    EXPECT_EQ(saved_bytes(p, "/mha/Add_2"), 160u + 160u) << stem;
    EXPECT_EQ(saved_bytes(p, "/mha/Softmax"), 400u) << stem;
  }
  // The causal attn_mask [5, 5] as [1, 5, 5], cast to float16: 50 bytes.
  EXPECT_EQ(bytes_of(train("mha_attn_mask_train"), "/mha/Unsqueeze_output_0:autocast"), 50u);
  // In float32 the scores are 400 bytes and nothing is cast.
  const Program fp32 = train("mha_attn_mask_train", Precision::Fp32);
  EXPECT_EQ(bytes_of(fp32, "/mha/Add_2_output_0"), 400u);
  EXPECT_EQ(buffer_named(fp32, "/mha/Mul_4_output_0"), -1);
  // With --attention sdpa the whole attention, mask included, is one scaled_dot_product_attention: the
  // attention matcher runs before baddbmm's, so the scores never exist.
  InferenceRun sdpa;
  sdpa.runtime = Runtime::PyTorch;
  sdpa.attention = AttentionImpl::Sdpa;
  const Program fused = build_inference_program(pattern("mha_attn_mask_train"), sdpa).program;
  EXPECT_EQ(op_at(fused, "/mha/MatMul_2"), "attention");
  EXPECT_EQ(buffer_named(fused, "/mha/Add_2_output_0"), -1);
}

// With dropout (p = 0.1, training), the probabilities pass through native_dropout: a float32 output (400)
// and a bool mask (100), both read by the dropout's backward.
TEST(ExportedPatterns, AttentionDropoutKeepsItsMask) {
  const Program p = train("mha_dropout_train");
  EXPECT_EQ(saved_bytes(p, "/mha/Dropout"), 100u);
  EXPECT_EQ(bytes_of(p, "/mha/Dropout_output_0"), 400u);
}

// ---- BatchNorm (training mode), Embedding ----

// Conv2d(3, 8, 3, padding 1) -> BatchNorm2d(8) in training mode -> ReLU on [2, 3, 6, 6]. Under autocast the
// conv writes float16 [2, 8, 6, 6] (1,152 bytes); batch norm keeps that type (not on autocast's lists),
// and cudnn_batch_norm saves its input with save_mean and save_invstd, one float per channel (32 bytes
// each): 1,152 + 64 saved.
TEST(ExportedPatterns, TrainingBatchNormSavesInputAndStatistics) {
  const Program p = train("conv_bn_train");
  EXPECT_EQ(bytes_of(p, "/conv/Conv_output_0"), 1152u);
  EXPECT_EQ(bytes_of(p, "/bn/BatchNormalization_output_0"), 1152u);
  EXPECT_EQ(bytes_of(p, "/bn/BatchNormalization:save_mean"), 32u);
  EXPECT_EQ(bytes_of(p, "/bn/BatchNormalization:save_invstd"), 32u);
  EXPECT_EQ(saved_bytes(p, "/bn/BatchNormalization"), 1152u + 32u + 32u);
}

// nn.Embedding(32, 8) is a Gather on the table: not autocast (float32 output, 2*5*8*4 = 320), saving the int64
// indices (2*5*8 = 80 bytes); its backward writes a dense grad of the whole table (32*8*4 = 1,024).
TEST(ExportedPatterns, EmbeddingIsGatherSavingIndices) {
  const Program p = train("embedding_train");
  EXPECT_EQ(bytes_of(p, "y"), 320u);
  EXPECT_EQ(saved_bytes(p, "/emb/Gather"), 80u);
  EXPECT_EQ(bytes_of(p, "grad:emb.weight"), 1024u);
}

}  // namespace
}  // namespace memplan
