// Inference programs of small graphs, with every expected byte count worked out by hand below.
#include <gtest/gtest.h>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::int_attr;
using testing::ints_attr;
using testing::peak_live_bytes;
using testing::resident_bytes;
using testing::step_named;

// x[4,8] -> Gemm(W1[16,8], b1[16], transB) -> h[4,16] -> Relu -> r[4,16] -> Gemm(W2[2,16], b2[2]) -> y[4,2]
Graph inference_mlp() {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t w1 = b.weight("W1", {16, 8});
  const int32_t b1 = b.weight("b1", {16});
  const int32_t w2 = b.weight("W2", {2, 16});
  const int32_t b2 = b.weight("b2", {2});
  const int32_t h = b.node1("Gemm", {x, w1, b1}, "h", {4, 16}, {{"transB", int_attr(1)}});
  const int32_t r = b.node1("Relu", {h}, "r", {4, 16});
  const int32_t y = b.node1("Gemm", {r, w2, b2}, "y", {4, 2}, {{"transB", int_attr(1)}});
  b.output(y);
  return b.graph();
}

TEST(InferenceIdeal, MlpBuffersAndPeakByHand) {
  const CostModelResult r = build_inference_program(inference_mlp(), {});
  const Program& p = r.program;
  ASSERT_EQ(p.steps.size(), 3u);
  // Weights: W1 16*8*4 = 512, b1 64, W2 2*16*4 = 128, b2 8 -> 712 bytes resident.
  EXPECT_EQ(resident_bytes(p), 712u);
  // x 4*8*4 = 128 (from the start), h 256, r 256, y 4*2*4 = 32 (to the end).
  EXPECT_EQ(p.buffers[buffer_named(p, "x")].bytes, 128u);
  EXPECT_TRUE(p.buffers[buffer_named(p, "x")].live_at_start);
  EXPECT_TRUE(p.buffers[buffer_named(p, "y")].live_at_end);
  // Step 0: x + h = 384; step 1: h + r = 512 (x was last read at step 0); step 2: r + y = 288.
  const auto peak = peak_live_bytes(p);
  EXPECT_EQ(peak.bytes, 512u);
  EXPECT_EQ(peak.step, 1);
  EXPECT_EQ(r.fixed_bytes, 0u);
}

TEST(InferenceDtype, Fp16HalvesWeightsAndActivations) {
  InferenceRun o;
  o.float_dtype = DType::Float16;
  const Program p = build_inference_program(inference_mlp(), o).program;
  EXPECT_EQ(resident_bytes(p), 356u);           // 712 / 2
  EXPECT_EQ(peak_live_bytes(p).bytes, 256u);    // 512 / 2
  o.float_dtype = DType::BFloat16;
  EXPECT_EQ(peak_live_bytes(build_inference_program(inference_mlp(), o).program).bytes, 256u);
}

TEST(InferencePyTorch, CublasWorkspaceAtFirstMatmulAndKept) {
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const Program p = build_inference_program(inference_mlp(), o).program;
  const int32_t ws = buffer_named(p, "cublas_workspace");
  ASSERT_GE(ws, 0);
  // CublasHandlePool.cpp: 4096 KiB * 8 = 33,554,432 bytes on sm90 (the default arch).
  EXPECT_EQ(p.buffers[ws].bytes, 33554432u);
  EXPECT_TRUE(p.buffers[ws].live_at_end);
  EXPECT_EQ(p.steps[0].writes.back(), ws);  // allocated by the first Gemm, after its output
  EXPECT_EQ(peak_live_bytes(p).bytes, 512u + 33554432u);
  o.cuda_arch_major = 8;  // A100: 4096 KiB * 2 + 16 KiB * 8 = 8,519,680
  const Program a100 = build_inference_program(inference_mlp(), o).program;
  EXPECT_EQ(a100.buffers[buffer_named(a100, "cublas_workspace")].bytes, 8519680u);
}

// x[2,3,4] -> Reshape(shape=[6,4]) -> v -> Relu -> y. The reshape is a view of x.
Graph reshape_relu() {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 3, 4});
  const int32_t shape = b.int_constant("shape", {6, 4});
  const int32_t v = b.node1("Reshape", {x, shape}, "v", {6, 4});
  const int32_t y = b.node1("Relu", {v}, "y", {6, 4});
  b.output(y);
  return b.graph();
}

TEST(InferenceViews, ReshapeAliasesItsInputAndExtendsItsLife) {
  const Program p = build_inference_program(reshape_relu(), {}).program;
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_TRUE(p.steps[0].writes.empty());          // the reshape allocates nothing
  const int32_t x = buffer_named(p, "x");
  EXPECT_EQ(buffer_named(p, "v"), -1);             // no buffer of its own
  EXPECT_NE(std::find(p.steps[1].reads.begin(), p.steps[1].reads.end(), x), p.steps[1].reads.end());
  // Ideal keeps the shape constant as a 2 * 8 = 16-byte weight; step 1: x (96) + y (96) = 192.
  EXPECT_EQ(resident_bytes(p), 16u);
  EXPECT_EQ(peak_live_bytes(p).bytes, 192u);
  // PyTorch passes the shape as Python ints: no weight at all.
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  EXPECT_EQ(resident_bytes(build_inference_program(reshape_relu(), o).program), 0u);
}

// x[2,3,4] -> Transpose(perm 0,2,1) -> t[2,4,3] -> Reshape([8,3]) -> v -> Relu -> y
Graph transpose_reshape() {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 3, 4});
  const int32_t t = b.node1("Transpose", {x}, "t", {2, 4, 3}, {{"perm", ints_attr({0, 2, 1})}});
  const int32_t shape = b.int_constant("shape", {8, 3});
  const int32_t v = b.node1("Reshape", {t, shape}, "v", {8, 3});
  const int32_t y = b.node1("Relu", {v}, "y", {8, 3});
  b.output(y);
  return b.graph();
}

TEST(InferenceViews, PyTorchTransposeIsAViewAndReshapeOfItCopies) {
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const Program p = build_inference_program(transpose_reshape(), o).program;
  EXPECT_EQ(buffer_named(p, "t"), -1);   // permute: a strided view of x
  EXPECT_GE(buffer_named(p, "v"), 0);    // reshape of a non-contiguous view copies (96 bytes)
  // x (96) read by the reshape copy at step 1 together with v (96): 192; step 2: v + y = 192.
  EXPECT_EQ(peak_live_bytes(p).bytes, 192u);
  // ORT copies on Transpose, and the reshape of the copy is a view.
  o.runtime = Runtime::OnnxRuntime;
  const Program ort = build_inference_program(transpose_reshape(), o).program;
  EXPECT_GE(buffer_named(ort, "t"), 0);
  EXPECT_EQ(buffer_named(ort, "v"), -1);
}

// x[4,8] -> MatMul(Gather(W[3,8,16], idx)) -> y[4,16]: gpt_oss's experts read their stacked parameters by a Python
// int (GptOssExperts: x @ self.gate_up_proj[e]), which torch.onnx writes as a Gather by a scalar Constant.
Graph select_matmul(bool scalar_index) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t w = b.weight("W", {3, 8, 16});
  const int32_t idx = scalar_index ? b.node("Constant", {}, {{"idx", {}}}, {}, DType::Int64) : b.int_constant("idx", {1});
  const int32_t s = b.node1("Gather", {w, idx}, "s", scalar_index ? std::vector<int64_t>{8, 16} : std::vector<int64_t>{1, 8, 16});
  const int32_t y = b.node1("MatMul", {x, s}, "y", {4, 16});
  b.output(y);
  return b.graph();
}

TEST(InferenceViews, PyTorchSelectOfAParameterIsAView) {
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  // W 3*8*16*4 = 1536 B resident; W[1] is a view of it (Tensor.select), so the MatMul holds x 128 + y 256 = 384
  // and the cuBLAS workspace its first MatMul allocates (kCublasWorkspaceHopper, 33,554,432 B).
  const Program p = build_inference_program(select_matmul(true), o).program;
  EXPECT_EQ(buffer_named(p, "s"), -1);
  EXPECT_EQ(resident_bytes(p), 1536u);
  EXPECT_EQ(peak_live_bytes(p).bytes, 33554432u + 384u);
  // index_select by a 1-D index copies: s 8*16*4 = 512 B live with x and y at the MatMul: 896 + the workspace.
  const Program copy = build_inference_program(select_matmul(false), o).program;
  EXPECT_GE(buffer_named(copy, "s"), 0);
  EXPECT_EQ(peak_live_bytes(copy).bytes, 33554432u + 896u);
}

// x[1,4,8,8] -> MaxPool(2x2, stride 2) -> y[1,4,4,4]
Graph maxpool() {
  GraphBuilder b;
  const int32_t x = b.input("x", {1, 4, 8, 8});
  const int32_t y = b.node1("MaxPool", {x}, "y", {1, 4, 4, 4},
                            {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
  b.output(y);
  return b.graph();
}

TEST(InferencePyTorch, MaxPoolWritesInt64IndicesOnCuda) {
  // Ideal: x 256*4 = 1024 + y 64*4 = 256 -> 1280.
  EXPECT_EQ(peak_live_bytes(build_inference_program(maxpool(), {}).program).bytes, 1280u);
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const Program p = build_inference_program(maxpool(), o).program;
  const int32_t idx = buffer_named(p, "/MaxPool_0:indices");  // named after its op, as every extra buffer
  ASSERT_GE(idx, 0);
  EXPECT_EQ(p.buffers[idx].bytes, 64u * 8u);  // one int64 per output element
  EXPECT_EQ(peak_live_bytes(p).bytes, 1280u + 512u);
  EXPECT_FALSE(p.buffers[idx].live_at_end);  // freed right after the op
}

// GELU as torch.onnx writes it: x[2,8] -> Div(sqrt2) -> Erf -> Add(1) -> Mul(x, .) -> Mul(., 0.5) -> y
Graph gelu_erf() {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 8});
  const int32_t d = b.node1("Div", {x, b.scalar("sqrt2", 1.4142f)}, "d", {2, 8});
  const int32_t e = b.node1("Erf", {d}, "e", {2, 8});
  const int32_t a = b.node1("Add", {e, b.scalar("one")}, "a", {2, 8});
  const int32_t m = b.node1("Mul", {x, a}, "m", {2, 8});
  const int32_t y = b.node1("Mul", {m, b.scalar("half", 0.5f)}, "y", {2, 8});
  b.output(y);
  return b.graph();
}

TEST(InferenceFusion, PyTorchRunsDecomposedGeluAsOneOp) {
  // Ideal: the graph as written. Each tensor is 64 bytes; step Mul(x, a): x, a, m live -> 192 (e died at Add).
  const Program ideal = build_inference_program(gelu_erf(), {}).program;
  EXPECT_EQ(ideal.steps.size(), 5u);
  EXPECT_EQ(peak_live_bytes(ideal).bytes, 192u);
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const Program p = build_inference_program(gelu_erf(), o).program;
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].op, "gelu");
  EXPECT_EQ(peak_live_bytes(p).bytes, 128u);  // x + y
}

// Gemma 2's attention soft-cap (transformers' modeling_gemma2.py eager_attention_forward): scores / cap, tanh,
// * cap, after the scale. An elementwise chain with one Tanh, but it reads the scores once: not a GELU, whose
// x is read twice (x * Phi(x)). PyTorch runs the four ops, each writing a 2*8*4 = 64-byte tensor.
TEST(InferenceFusion, ASoftCapIsNotAGelu) {
  GraphBuilder b;
  const int32_t scores = b.input("scores", {2, 8});
  const int32_t scaled = b.node1("Mul", {scores, b.scalar("scale", 0.125f)}, "scaled", {2, 8});
  const int32_t d = b.node1("Div", {scaled, b.scalar("cap", 50.0f)}, "d", {2, 8});
  const int32_t t = b.node1("Tanh", {d}, "t", {2, 8});
  const int32_t y = b.node1("Mul", {t, b.scalar("cap2", 50.0f)}, "y", {2, 8});
  b.output(y);
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const Program p = build_inference_program(b.graph(), o).program;
  ASSERT_EQ(p.steps.size(), 4u);
  for (const Step& s : p.steps) EXPECT_NE(s.op, "gelu");
  EXPECT_GE(buffer_named(p, "t"), 0);
}

// LayerNorm before opset 17: x[2,3,8] -> ReduceMean(-1) -> Sub -> Pow(2) -> ReduceMean -> Add(eps)
// -> Sqrt -> Div -> Mul(gamma[8]) -> Add(beta[8]) -> y
Graph layer_norm_decomposed() {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 3, 8});
  const int32_t gamma = b.weight("gamma", {8});
  const int32_t beta = b.weight("beta", {8});
  const auto axes = std::map<std::string, Attribute>{{"axes", ints_attr({-1})}};
  const int32_t mean = b.node1("ReduceMean", {x}, "mean", {2, 3, 1}, axes);
  const int32_t centered = b.node1("Sub", {x, mean}, "centered", {2, 3, 8});
  const int32_t sq = b.node1("Pow", {centered, b.scalar("two", 2)}, "sq", {2, 3, 8});
  const int32_t var = b.node1("ReduceMean", {sq}, "var", {2, 3, 1}, axes);
  const int32_t ve = b.node1("Add", {var, b.scalar("eps", 1e-5f)}, "ve", {2, 3, 1});
  const int32_t sd = b.node1("Sqrt", {ve}, "sd", {2, 3, 1});
  const int32_t norm = b.node1("Div", {centered, sd}, "norm", {2, 3, 8});
  const int32_t scaled = b.node1("Mul", {norm, gamma}, "scaled", {2, 3, 8});
  const int32_t y = b.node1("Add", {scaled, beta}, "y", {2, 3, 8});
  b.output(y);
  return b.graph();
}

TEST(InferenceFusion, PyTorchLayerNormIsOneOpWithFloatStatistics) {
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  o.float_dtype = DType::Float16;
  const Program p = build_inference_program(layer_norm_decomposed(), o).program;
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].op, "layer_norm");
  // mean and rstd: 2*3 rows, float32 even for half inputs -> 24 bytes each, freed at the op.
  const int32_t mean = buffer_named(p, p.steps[0].name + ":mean");
  ASSERT_GE(mean, 0);
  EXPECT_EQ(p.buffers[mean].bytes, 24u);
  // x 48*2 = 96 + y 96 + mean 24 + rstd 24 = 240.
  EXPECT_EQ(peak_live_bytes(p).bytes, 240u);
}

// x[4,6,8] -> MatMul(W[8,16]) -> Add(b[16]) -> y: nn.Linear on a 3-D input, one addmm in PyTorch.
TEST(InferenceFusion, PyTorchLinearBiasIsOneOutput) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 6, 8});
  const int32_t mm = b.node1("MatMul", {x, b.weight("W", {8, 16})}, "mm", {4, 6, 16});
  const int32_t y = b.node1("Add", {mm, b.weight("b", {16})}, "y", {4, 6, 16});
  b.output(y);
  // Ideal: step Add holds mm (384*4 = 1536) and y (1536) -> 3072 (x 768 died at MatMul... x+mm = 2304).
  EXPECT_EQ(peak_live_bytes(build_inference_program(b.graph(), {}).program).bytes, 3072u);
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  o.cuda_arch_major = 8;
  const Program p = build_inference_program(b.graph(), o).program;
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(buffer_named(p, "mm"), -1);
  EXPECT_EQ(peak_live_bytes(p).bytes, 768u + 1536u + 8519680u);  // x + y + cuBLAS workspace
}

// A training export keeps nn.Linear's weight as the parameter and writes weight.t() as a Transpose node;
// PyTorch runs F.linear as one addmm all the same (without a bias, one mm reading the untransposed weight).
TEST(InferenceFusion, PyTorchLinearThroughTransposeIsOneOp) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 6, 8});
  const int32_t wt = b.node1("Transpose", {b.weight("W", {16, 8})}, "Wt", {8, 16}, {{"perm", ints_attr({1, 0})}});
  const int32_t mm = b.node1("MatMul", {x, wt}, "mm", {4, 6, 16});
  const int32_t head = b.node1("Transpose", {b.weight("E", {32, 16})}, "Et", {16, 32}, {{"perm", ints_attr({1, 0})}});
  const int32_t y = b.node1("Add", {mm, b.weight("b", {16})}, "y", {4, 6, 16});
  const int32_t logits = b.node1("MatMul", {y, head}, "logits", {4, 6, 32});
  b.output(logits);
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  o.cuda_arch_major = 8;
  const Program p = build_inference_program(b.graph(), o).program;
  ASSERT_EQ(p.steps.size(), 2u);  // linear (Transpose, MatMul, Add) and linear without bias (Transpose, MatMul)
  EXPECT_EQ(p.steps[0].op, "linear");
  EXPECT_EQ(p.steps[1].op, "linear");
  EXPECT_EQ(buffer_named(p, "mm"), -1);
  // At the head: y (4*6*16*4 = 1536) and logits (4*6*32*4 = 3072) + the cuBLAS workspace; x died at step 0.
  EXPECT_EQ(peak_live_bytes(p).bytes, 1536u + 3072u + 8519680u);
}

// torch.baddbmm(mask, q, k) as torch.onnx writes it: Add(Mul(MatMul(q, k), alpha), Mul(mask, beta)). PyTorch
// runs one batched gemm writing the [4, 5, 5] scores once (400 bytes); a residual Add of a MatMul result
// (no scalar Muls) is two ops, and so is the pattern when the product is read elsewhere too.
TEST(InferenceFusion, PyTorchBaddbmmIsOneOpOnlyInItsExportedSpelling) {
  auto build = [](bool scaled, bool product_read_twice) {
    GraphBuilder b;
    const int32_t q = b.input("q", {4, 5, 4});
    const int32_t k = b.input("k", {4, 4, 5});
    const int32_t mask = b.input("mask", {1, 5, 5});
    const int32_t mm = b.node1("MatMul", {q, k}, "mm", {4, 5, 5});
    const int32_t lhs = scaled ? b.node1("Mul", {mm, b.scalar("alpha")}, "scaled", {4, 5, 5}) : mm;
    const int32_t rhs = scaled ? b.node1("Mul", {mask, b.scalar("beta")}, "scaled_mask", {1, 5, 5}) : mask;
    b.output(b.node1("Add", {lhs, rhs}, "scores", {4, 5, 5}));
    if (product_read_twice) b.output(b.node1("Relu", {mm}, "other", {4, 5, 5}));
    InferenceRun o;
    o.runtime = Runtime::PyTorch;
    return build_inference_program(b.graph(), o).program;
  };
  const Program fused = build(true, false);
  ASSERT_EQ(fused.steps.size(), 1u);
  EXPECT_EQ(fused.steps[0].op, "baddbmm");
  EXPECT_EQ(fused.buffers[buffer_named(fused, "scores")].bytes, 400u);
  EXPECT_EQ(buffer_named(fused, "mm"), -1);
  EXPECT_EQ(buffer_named(fused, "scaled"), -1);
  const Program residual = build(false, false);
  ASSERT_EQ(residual.steps.size(), 2u);
  EXPECT_EQ(residual.steps[1].op, "Add");
  EXPECT_EQ(build(true, true).steps.size(), 5u);  // MatMul, Mul, Mul, Add, Relu
}

// ORT gives a unary activation its input's buffer when that is the input's last use.
TEST(InferenceOrt, ReluReusesItsInputBufferAtItsLastUse) {
  GraphBuilder b;
  const int32_t x = b.input("x", {16});
  const int32_t h = b.node1("Sin", {x}, "h", {16});
  const int32_t r = b.node1("Relu", {h}, "r", {16});
  const int32_t y = b.node1("Cos", {r}, "y", {16});
  b.output(y);
  InferenceRun o;
  o.runtime = Runtime::OnnxRuntime;
  const Program p = build_inference_program(b.graph(), o).program;
  EXPECT_EQ(buffer_named(p, "r"), -1);
  EXPECT_TRUE(p.steps[step_named(p, "/Relu_1")].writes.empty());
  EXPECT_GE(buffer_named(build_inference_program(b.graph(), {}).program, "r"), 0);  // ideal keeps it
}

TEST(InferencePyTorch, ShapeComputationsTakeNoGpuMemory) {
  // x[2,3] -> Shape -> s[2] -> Gather(0) -> n -> Unsqueeze -> u[1] -> Concat(u, [-1]) -> c[2] -> Reshape(x, c)
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 3});
  const int32_t s = b.node("Shape", {x}, {{"s", {2}}}, {}, DType::Int64);
  const int32_t idx = b.int_constant("zero", {0});
  const int32_t n = b.node("Gather", {s, idx}, {{"n", {1}}}, {}, DType::Int64);
  const int32_t minus1 = b.int_constant("minus1", {-1});
  const int32_t c = b.node("Concat", {n, minus1}, {{"c", {2}}}, {{"axis", int_attr(0)}}, DType::Int64);
  const int32_t v = b.node1("Reshape", {x, c}, "v", {2, 3});
  const int32_t y = b.node1("Relu", {v}, "y", {2, 3});
  b.output(y);
  InferenceRun o;
  o.runtime = Runtime::PyTorch;
  const Program p = build_inference_program(b.graph(), o).program;
  EXPECT_EQ(p.steps.size(), 2u);  // Reshape and Relu only
  EXPECT_EQ(resident_bytes(p), 0u);
  EXPECT_EQ(peak_live_bytes(p).bytes, 48u);  // x 24 + y 24
  const Program ideal = build_inference_program(b.graph(), {}).program;
  EXPECT_EQ(ideal.steps.size(), 5u);
}

// q, k, v [1,2,16,8] (graph inputs) -> MatMul(q, kT) -> scores [1,2,16,16] -> Mul(scale) -> Softmax
// -> MatMul(., v) -> o [1,2,16,8]
TEST(InferencePyTorch, SdpaNeverMaterialisesTheScores) {
  GraphBuilder b;
  const int32_t q = b.input("q", {1, 2, 16, 8});
  const int32_t kt = b.input("kt", {1, 2, 8, 16});
  const int32_t v = b.input("v", {1, 2, 16, 8});
  const int32_t s = b.node1("MatMul", {q, kt}, "scores", {1, 2, 16, 16});
  const int32_t m = b.node1("Mul", {s, b.scalar("scale", 0.35f)}, "scaled", {1, 2, 16, 16});
  const int32_t p = b.node1("Softmax", {m}, "probs", {1, 2, 16, 16}, {{"axis", int_attr(-1)}});
  const int32_t o = b.node1("MatMul", {p, v}, "o", {1, 2, 16, 8});
  b.output(o);
  InferenceRun opt;
  opt.runtime = Runtime::PyTorch;
  opt.cuda_arch_major = 8;
  // Eager: step 0 q/kt/v (3 * 1024) + scores 2048 = 5120; step 1 v 1024 + scores + scaled 2048 = 5120;
  // step 2 v + scaled + probs = 5120; step 3 v + probs + o 1024 = 4096. Plus the cuBLAS workspace.
  EXPECT_EQ(peak_live_bytes(build_inference_program(b.graph(), opt).program).bytes, 5120u + 8519680u);
  opt.attention = AttentionImpl::Sdpa;
  const Program p2 = build_inference_program(b.graph(), opt).program;
  ASSERT_EQ(p2.steps.size(), 1u);
  EXPECT_EQ(p2.steps[0].op, "attention");
  // q, k, v, o 4 * 1024 + logsumexp float [1, 2, 16] = 128; no matmul left, so no cuBLAS workspace.
  EXPECT_EQ(peak_live_bytes(p2).bytes, 4096u + 128u);
}

TEST(InferenceErrors, RejectsNonFloatDtype) {
  InferenceRun o;
  o.float_dtype = DType::Int8;
  EXPECT_THROW(build_inference_program(inference_mlp(), o), InputError);
}

}  // namespace
}  // namespace memplan
