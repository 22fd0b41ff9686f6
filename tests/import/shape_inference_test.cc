// Unit tests of shape inference (onnx_import/shape_inference.h). Models are written in ONNX's text syntax;
// every expected shape is worked out by hand in the comment beside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <string>

#include "onnx_import/errors.h"
#include "onnx_import/shape_inference.h"
#include "tests/import/import_test_util.h"

namespace memplan {
namespace {

using testing::contains;
using testing::parse_text_model;

using Shape = std::vector<int64_t>;

InferenceResult infer(const std::string& text, const Bindings& b = {}) { return infer_shapes(parse_text_model(text), b); }

Bindings dims(std::map<std::string, int64_t> d) {
  Bindings b;
  b.dims = std::move(d);
  return b;
}

// Runs inference expecting an InputError; returns its message.
template <typename E = InputError>
std::string error_of(const std::string& text, const Bindings& b = {}) {
  try {
    infer(text, b);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return {};
}

// --- the shape-computation evaluator --------------------------------------------------------------

// The transformer head split as exporters write it: the target of Reshape is computed from Shape(x).
TEST(ShapeEvaluator, TransformerShapeChainGivesReshapeAConcreteTarget) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[B, S, 768] x) => (float[B, H, S, D] y) {
      s = Shape(x)
      i0 = Constant<value = int64 {0}>()
      i1 = Constant<value = int64 {1}>()
      b = Gather<axis = 0>(s, i0)
      seq = Gather<axis = 0>(s, i1)
      ax = Constant<value = int64[1] {0}>()
      b1 = Unsqueeze(b, ax)
      s1 = Unsqueeze(seq, ax)
      heads = Constant<value = int64[1] {12}>()
      hd = Constant<value = int64[1] {-1}>()
      target = Concat<axis = 0>(b1, s1, heads, hd)
      r = Reshape(x, target)
      y = Transpose<perm = [0, 2, 1, 3]>(r)
    })", dims({{"B", 2}, {"S", 7}}));
  // Shape(x) = [2, 7, 768]; target = [2, 7, 12, -1]; -1 = 2*7*768 / (2*7*12) = 64.
  EXPECT_EQ(r.values.at("s").int_value, Shape({2, 7, 768}));
  EXPECT_EQ(r.values.at("target").int_value, Shape({2, 7, 12, -1}));
  EXPECT_EQ(r.values.at("r").shape, Shape({2, 7, 12, 64}));
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 12, 7, 64}));  // perm (0, 2, 1, 3)
  EXPECT_EQ(r.values.at("y").dtype, DType::Float32);
  EXPECT_EQ(r.values.at("b").shape, Shape{});  // Gather of a scalar index drops the axis
}

// A causal-mask pattern: Range/ConstantOfShape/Expand sized by arithmetic on Shape values.
TEST(ShapeEvaluator, ArithmeticOnShapesSizesRangeConstantOfShapeAndExpand) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[B, S] ids) => (float[B, S, T] m) {
      s = Shape<start = 1>(ids)
      two = Constant<value = int64[1] {2}>()
      t = Mul(s, two)
      zero = Constant<value = int64 {0}>()
      one = Constant<value = int64 {1}>()
      tsc = Squeeze(t)
      pos = Range(zero, tsc, one)
      bs = Shape(ids)
      full = Concat<axis = 0>(bs, t)
      m = ConstantOfShape<value = float[1] {1.0}>(full)
      e = Expand(pos, full)
      sub = Sub(t, s)
      half = Div(t, two)
      eq = Equal(half, s)
    })", dims({{"B", 3}, {"S", 5}}));
  // s = [5]; t = [10]; pos = 0..9 (10 values); full = [3, 5, 10].
  EXPECT_EQ(r.values.at("s").int_value, Shape({5}));
  EXPECT_EQ(r.values.at("t").int_value, Shape({10}));
  EXPECT_EQ(r.values.at("pos").shape, Shape({10}));
  EXPECT_EQ(r.values.at("pos").int_value, Shape({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(r.values.at("m").shape, Shape({3, 5, 10}));
  EXPECT_EQ(r.values.at("e").shape, Shape({3, 5, 10}));
  EXPECT_EQ(r.values.at("sub").int_value, Shape({5}));   // 10 - 5
  EXPECT_EQ(r.values.at("half").int_value, Shape({5}));  // 10 / 2
  EXPECT_EQ(r.values.at("eq").int_value, Shape({1}));    // 5 == 5
  EXPECT_EQ(r.values.at("eq").dtype, DType::Bool);
}

// Slice on a shape vector with opset-10+ inputs (INT64_MAX as "to the end", as PyTorch writes it).
TEST(ShapeEvaluator, SliceAndWhereOnShapeVectors) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[B, C, H, W] x) => (float[B, C, K] y) {
      s = Shape(x)
      st = Constant<value = int64[1] {2}>()
      en = Constant<value = int64[1] {9223372036854775807}>()
      hw = Slice(s, st, en)
      p = ReduceProd<keepdims = 1>(hw)
      st0 = Constant<value = int64[1] {0}>()
      bc = Slice(s, st0, st)
      target = Concat<axis = 0>(bc, p)
      y = Reshape(x, target)
      c = Constant<value = bool[2] {1, 0}>()
      big = Constant<value = int64[2] {100, 200}>()
      w = Where(c, hw, big)
    })", dims({{"B", 2}, {"C", 3}, {"H", 4}, {"W", 5}}));
  // hw = [4, 5]; p = [20]; target = [2, 3, 20]; w = [4, 200].
  EXPECT_EQ(r.values.at("hw").int_value, Shape({4, 5}));
  EXPECT_EQ(r.values.at("p").int_value, Shape({20}));
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 3, 20}));
  EXPECT_EQ(r.values.at("w").int_value, Shape({4, 200}));
}

// --- opset 18+ rules ---------------------------------------------------------------------------------

TEST(Opset18, ReduceTakesAxesAsAnInputAndHonoursNoopWithEmptyAxes) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 18]>
    g (float[2, 3, 4] x) => (float[2, 1, 4] a) {
      ax = Constant<value = int64[1] {-2}>()
      a = ReduceMean(x, ax)
      b = ReduceMax<keepdims = 0>(x, ax)
      c = ReduceSum<noop_with_empty_axes = 1>(x)
      d = ReduceL2<keepdims = 0>(x)
    })");
  EXPECT_EQ(r.values.at("a").shape, Shape({2, 1, 4}));  // axis -2 = 1, kept as 1
  EXPECT_EQ(r.values.at("b").shape, Shape({2, 4}));     // axis 1 dropped
  EXPECT_EQ(r.values.at("c").shape, Shape({2, 3, 4}));  // no axes + noop: identity
  EXPECT_EQ(r.values.at("d").shape, Shape{});           // no axes: all reduced, keepdims 0
}

TEST(Opset18, SplitWithNumOutputsMakesTheLastChunkSmaller) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 18]>
    g (float[10, 6] x) => (float[4, 6] a, float[4, 6] b, float[2, 6] c) {
      a, b, c = Split<axis = 0, num_outputs = 3>(x)
      sizes = Constant<value = int64[2] {1, 5}>()
      p, q = Split<axis = 1>(x, sizes)
    })");
  // ceil(10 / 3) = 4: chunks 4, 4, 2.
  EXPECT_EQ(r.values.at("a").shape, Shape({4, 6}));
  EXPECT_EQ(r.values.at("b").shape, Shape({4, 6}));
  EXPECT_EQ(r.values.at("c").shape, Shape({2, 6}));
  EXPECT_EQ(r.values.at("p").shape, Shape({10, 1}));
  EXPECT_EQ(r.values.at("q").shape, Shape({10, 5}));
}

TEST(Opset18, PadWithAxesInputPadsOnlyThoseAxes) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 18]>
    g (float[2, 3, 4] x) => (float[2, 3, 7] y) {
      pads = Constant<value = int64[4] {1, 0, 2, 5}>()
      axes = Constant<value = int64[2] {-1, 0}>()
      y = Pad(x, pads, , axes)
      pads_all = Constant<value = int64[6] {0, 1, 1, 0, 1, 1}>()
      z = Pad(x, pads_all)
    })");
  // axes (2, 0): axis 2 gets 1 + 2 = 3 more (4 -> 7), axis 0 gets 0 + 5 (2 -> 7).
  EXPECT_EQ(r.values.at("y").shape, Shape({7, 3, 7}));
  EXPECT_EQ(r.values.at("z").shape, Shape({2, 5, 6}));  // (0+0, 1+1, 1+1)
}

TEST(Opset18, ResizeWithAxesAndKeepAspectRatio) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 19]>
    g (float[1, 3, 100, 200] x) => (float[1, 3, 50, 100] y) {
      sizes = Constant<value = int64[2] {50, 150}>()
      y = Resize<axes = [2, 3], keep_aspect_ratio_policy = "not_larger">(x, , , sizes)
      scales = Constant<value = float[4] {1.0, 1.0, 1.5, 0.5}>()
      z = Resize(x, , scales)
    })");
  // not_larger: scale = min(50/100, 150/200) = 0.5 -> (50, 100).
  EXPECT_EQ(r.values.at("y").shape, Shape({1, 3, 50, 100}));
  EXPECT_EQ(r.values.at("z").shape, Shape({1, 3, 150, 100}));  // floor(100*1.5), floor(200*0.5)
}

TEST(NewOps, OpsAddedAfterOpset17) {
  const auto r = infer(R"(<ir_version: 9, opset_import: ["" : 23]>
    g (float[2, 8, 16] x, float[2, 4, 64] q, float[2, 6, 32] kv, int32[4] a, int32[4] b) => (float[2, 8, 16] y) {
      y = Gelu<approximate = "tanh">(x)
      sc = Constant<value = float[8] {1, 1, 1, 1, 1, 1, 1, 1}>()
      bi = Constant<value = float[8] {0, 0, 0, 0, 0, 0, 0, 0}>()
      gn = GroupNormalization<num_groups = 2>(x, sc, bi)
      rms = RMSNormalization(x, sc)
      att, pk, pv = Attention<q_num_heads = 8, kv_num_heads = 4>(q, kv, kv)
      ba = BitwiseAnd(a, b)
      big = Cast<to = 17>(x)
    })");
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 8, 16}));
  EXPECT_EQ(r.values.at("gn").shape, Shape({2, 8, 16}));
  EXPECT_EQ(r.values.at("rms").shape, Shape({2, 8, 16}));
  // Q [2, 4, 64] with 8 heads: head 8; V [2, 6, 32] with 4 kv heads: v_head 8 -> Y [2, 4, 8*8].
  EXPECT_EQ(r.values.at("att").shape, Shape({2, 4, 64}));
  EXPECT_EQ(r.values.at("pk").shape, Shape({2, 4, 6, 8}));  // [B, kv_heads, kv_seq, head]
  EXPECT_EQ(r.values.at("ba").dtype, DType::Int32);
  EXPECT_EQ(r.values.at("big").dtype, DType::Float8E4M3FN);  // ONNX code 17
}

// --- com.microsoft ---------------------------------------------------------------------------------

TEST(Microsoft, TransformerOptimizerOps) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (int32[B, S] ids, float[B, S, 64] x, float[64, 192] w, float[192] bias, float[64] gamma, float[64] beta,
       float[100, 64] word, float[128, 64] pos, float[2, 64] seg, int32[B, S] segids, int32[B, S] mask)
      => (float[B, S, 64] out) {
      att, present = com.microsoft.Attention<num_heads = 4>(x, w, bias)
      sln, mean, inv, sum = com.microsoft.SkipLayerNormalization(att, x, gamma, beta)
      fg = com.microsoft.FastGelu(sln)
      emb, mask_index = com.microsoft.EmbedLayerNormalization(ids, segids, word, pos, seg, gamma, beta, mask)
      wt = Transpose(w)
      fm = com.microsoft.FusedMatMul<transB = 1>(x, wt)
      out = com.microsoft.BiasGelu(fg, gamma)
      mha = com.microsoft.MultiHeadAttention<num_heads = 4>(x, x, x)
    })", dims({{"B", 2}, {"S", 10}}));
  // Attention: weights [64, 192] = 3 x 64 -> output [2, 10, 64]; present [2, B, heads, S, 64/4].
  EXPECT_EQ(r.values.at("att").shape, Shape({2, 10, 64}));
  EXPECT_EQ(r.values.at("present").shape, Shape({2, 2, 4, 10, 16}));
  EXPECT_EQ(r.values.at("sln").shape, Shape({2, 10, 64}));
  EXPECT_EQ(r.values.at("mean").shape, Shape({2, 10, 1}));
  EXPECT_EQ(r.values.at("sum").shape, Shape({2, 10, 64}));
  EXPECT_EQ(r.values.at("fg").shape, Shape({2, 10, 64}));
  EXPECT_EQ(r.values.at("emb").shape, Shape({2, 10, 64}));  // [B, S, hidden of word_embedding]
  EXPECT_EQ(r.values.at("mask_index").shape, Shape({2}));
  EXPECT_EQ(r.values.at("mask_index").dtype, DType::Int32);
  EXPECT_EQ(r.values.at("fm").shape, Shape({2, 10, 192}));  // x [2,10,64] @ (wt [192,64])^T
  EXPECT_EQ(r.values.at("mha").shape, Shape({2, 10, 64}));
}

TEST(Microsoft, GroupQueryAttentionWithKvCache) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[2, 5, 64] q, float[2, 5, 32] k, float[2, 5, 32] v, float[2, 2, 10, 16] pk, float[2, 2, 10, 16] pv,
       int32[2] seqlens) => (float[2, 5, 64] out) {
      total = Constant<value = int32 {15}>()
      out, present_k, present_v = com.microsoft.GroupQueryAttention<num_heads = 4, kv_num_heads = 2>(q, k, v, pk, pv, seqlens, total)
    })");
  // head = 64 / 4 = 16; present length max(past 10, total 15) = 15.
  EXPECT_EQ(r.values.at("out").shape, Shape({2, 5, 64}));
  EXPECT_EQ(r.values.at("present_k").shape, Shape({2, 2, 15, 16}));
  EXPECT_EQ(r.values.at("present_v").shape, Shape({2, 2, 15, 16}));
}

// The other cases of ONNX Runtime's present length (bert_defs.cc BaseGroupQueryAttentionTypeAndShapeInference;
// its CPU kernel's present_sequence_length = max(total, past) in group_query_attention_helper.h). The shared
// buffer case is what onnxruntime-node 1.30 returned for tests/models/llama_tiny_gqa.onnx with a 32-long
// past at total 17 (tests/models/kv/ort_shapes.json): [2, 2, 32, 32].
TEST(Microsoft, GroupQueryAttentionPresentLength) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[2, 1, 128] q, float[2, 1, 64] k, float[2, 1, 64] v, float[2, 2, 32, 32] pk, float[2, 2, 32, 32] pv,
       int8[2, 2, 32, 32] qk, int8[2, 2, 32, 32] qv, int32[2] seqlens, float[2, 3, 128] q3, float[2, 3, 64] k3,
       float[2, 3, 64] v3) => (float[2, 1, 128] out) {
      total = Constant<value = int32 {17}>()
      nine = Constant<value = int32 {9}>()
      out, shared_k, shared_v = com.microsoft.GroupQueryAttention<num_heads = 4, kv_num_heads = 2>(q, k, v, pk, pv, seqlens, total)
      o2, window_k, window_v = com.microsoft.GroupQueryAttention<num_heads = 4, kv_num_heads = 2, sliding_window_cache = 1>(q, k, v, pk, pv, seqlens, nine)
      o3, int8_k, int8_v = com.microsoft.GroupQueryAttention<num_heads = 4, kv_num_heads = 2>(q, k, v, qk, qv, seqlens, total)
      o4, first_k, first_v = com.microsoft.GroupQueryAttention<num_heads = 4, kv_num_heads = 2>(q3, k3, v3, , , seqlens, nine)
      o5, unknown_k, unknown_v = com.microsoft.GroupQueryAttention<num_heads = 4, kv_num_heads = 2>(q3, k3, v3, , , seqlens, )
    })");
  EXPECT_EQ(r.values.at("shared_k").shape, Shape({2, 2, 32, 32}));  // max(past 32, total 17): the shared buffer
  EXPECT_EQ(r.values.at("window_k").shape, Shape({2, 2, 32, 32}));  // sliding_window_cache: the window's buffer
  EXPECT_EQ(r.values.at("int8_k").dtype, DType::Int8);              // present in the (quantized) past's dtype
  EXPECT_EQ(r.values.at("int8_v").shape, Shape({2, 2, 32, 32}));
  EXPECT_EQ(r.values.at("first_k").shape, Shape({2, 2, 9, 32}));    // no past: total
  EXPECT_EQ(r.values.at("first_k").dtype, DType::Float32);
  EXPECT_EQ(r.values.at("unknown_v").shape, Shape({2, 2, 3, 32}));  // no past, no total: the new keys' 3
}

TEST(Microsoft, QuantizedOps) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 13, "com.microsoft" : 1]>
    g (float[4, 16] x, uint8[16, 8] wq, float s, uint8 z) => (float[4, 8] y) {
      xq, xs, xz = DynamicQuantizeLinear(x)
      acc = MatMulInteger(xq, wq, xz, z)
      y = Cast<to = 1>(acc)
      qa = com.microsoft.QLinearAdd(xq, s, z, xq, s, z, s, z)
      dq = DequantizeLinear(qa, s, z)
    })");
  EXPECT_EQ(r.values.at("xq").dtype, DType::UInt8);
  EXPECT_EQ(r.values.at("xs").shape, Shape{});
  EXPECT_EQ(r.values.at("acc").shape, Shape({4, 8}));
  EXPECT_EQ(r.values.at("acc").dtype, DType::Int32);
  EXPECT_EQ(r.values.at("qa").shape, Shape({4, 16}));
  EXPECT_EQ(r.values.at("dq").dtype, DType::Float32);
}

// --- quantized weights (rules/quantized.cc) --------------------------------------------------------

TEST(Quantized, BlockedAndPerAxisDequantizeAndMatMulNBits) {
  const auto r = infer(R"(<ir_version: 9, opset_import: ["" : 21, "com.microsoft" : 1]>
    g (float[3, 64] x, int8[64, 32] w, float[2, 32] ws, int8[2, 32] wz, int8[64, 32] v, float[32] vs,
       float16[2, 5, 80] a, uint8[32, 3, 16] b, float16[96] s, uint8[64] z) => (float[3, 32] y) {
      w_dq = DequantizeLinear<axis = 0, block_size = 32>(w, ws, wz)
      v_dq = DequantizeLinear<axis = 1>(v, vs)
      y = MatMul(x, w_dq)
      nb = com.microsoft.MatMulNBits<K = 80, N = 32, bits = 4, block_size = 32>(a, b, s, z)
    })");
  // Blocked: scale [ceil(64 / 32), 32] = [2, 32] fits; the output has w's shape in the scale's type.
  EXPECT_EQ(r.values.at("w_dq").shape, Shape({64, 32}));
  EXPECT_EQ(r.values.at("w_dq").dtype, DType::Float32);
  EXPECT_EQ(r.values.at("v_dq").shape, Shape({64, 32}));  // per-axis: 32 scales along axis 1
  // MatMulNBits: n_blocks = ceil(80 / 32) = 3, blob = 16; zero points 32 * ceil(3 * 4 / 8) = 64 bytes.
  EXPECT_EQ(r.values.at("nb").shape, Shape({2, 5, 32}));
  EXPECT_EQ(r.values.at("nb").dtype, DType::Float16);
}

// ONNX's QLinearMatMul/MatMulInteger allow per-row parameters for a ([M] or [M, 1]) and per-column for b ([N]
// or [1, N]); both pass the checks and ONNX's schema shapes the result: [2, 64] x [64, 32] -> [2, 32].
TEST(Quantized, PerRowAndPerColumnMatMulParametersAreAccepted) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 10]>
    g (uint8[2, 64] a, float[2, 1] as, uint8[2, 1] az, uint8[64, 32] b, float[1, 32] bs, uint8[32] bz, float ys, uint8 yz,
       uint8[2] aiz) => (uint8[2, 32] y) {
      y = QLinearMatMul(a, as, az, b, bs, bz, ys, yz)
      acc = MatMulInteger(a, b, aiz, bz)
    })");
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 32}));
  EXPECT_EQ(r.values.at("acc").shape, Shape({2, 32}));
  EXPECT_EQ(r.values.at("acc").dtype, DType::Int32);
}

// Each bad quantization attribute or parameter shape is an InputError naming the node.
TEST(Quantized, BadAttributesAndScaleShapesNameTheNode) {
  auto nbits = [](const std::string& attrs, const std::string& b_type, const std::string& s_type) {
    return error_of(R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
      g (float16[2, 64] a, )" + b_type + R"( b, )" + s_type + R"( s) => (float16[2, 32] y) {
        y = com.microsoft.MatMulNBits<)" + attrs + R"(>(a, b, s)
      })");
  };
  const std::string ok = "K = 64, N = 32, bits = 4, block_size = 32";
  std::string e = nbits("K = 64, N = 32, bits = 3, block_size = 32", "uint8[32, 2, 16]", "float16[64]");
  EXPECT_TRUE(contains(e, "MatMulNBits_0") && contains(e, "bits is 3; it must be 2, 4 or 8")) << e;
  e = nbits("K = 64, N = 32, bits = 4, block_size = 24", "uint8[32, 2, 16]", "float16[64]");
  EXPECT_TRUE(contains(e, "block_size is 24; it must be a power of two, at least 16")) << e;
  e = nbits("K = 64, N = 32, bits = 4, block_size = 8", "uint8[32, 2, 16]", "float16[64]");
  EXPECT_TRUE(contains(e, "block_size is 8")) << e;
  e = nbits(ok, "uint8[32, 2, 8]", "float16[64]");  // blob must be 32 * 4 / 8 = 16
  EXPECT_TRUE(contains(e, "B must be uint8 [32, 2, 16]")) << e;
  e = nbits(ok, "uint8[32, 2, 16]", "float16[32]");  // scales N * n_blocks = 64
  EXPECT_TRUE(contains(e, "scales must hold N * n_blocks = 64 values, not [32]")) << e;
  e = nbits("K = 48, N = 32, bits = 4, block_size = 32", "uint8[32, 2, 16]", "float16[64]");
  EXPECT_TRUE(contains(e, "A [2, 64] must end in K = 48")) << e;

  e = error_of(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (int8[64, 32] w, float[16] s) => (float[64, 32] y) { y = DequantizeLinear<axis = 1>(w, s) })");
  EXPECT_TRUE(contains(e, "DequantizeLinear_0") && contains(e, "per-axis scale must be 1-D with 32 values")) << e;
  e = error_of(R"(<ir_version: 9, opset_import: ["" : 21]>
    g (int8[64, 32] w, float[4, 32] s) => (float[64, 32] y) { y = DequantizeLinear<axis = 0, block_size = 32>(w, s) })");
  EXPECT_TRUE(contains(e, "blocked scale (block_size 32, axis 0) must be [2, 32]")) << e;
  e = error_of(R"(<ir_version: 9, opset_import: ["" : 21]>
    g (int8[64, 32] w, float[2, 32] s, int8[32] z) => (float[64, 32] y) { y = DequantizeLinear<axis = 0, block_size = 32>(w, s, z) })");
  EXPECT_TRUE(contains(e, "zero point [32] must have the scale's shape [2, 32]")) << e;
  e = error_of(R"(<ir_version: 8, opset_import: ["" : 10]>
    g (uint8[2, 64] a, float as, uint8 az, uint8[64, 32] b, float[16] bs, uint8 bz, float ys, uint8 yz) => (uint8[2, 32] y) {
      y = QLinearMatMul(a, as, az, b, bs, bz, ys, yz)
    })");
  EXPECT_TRUE(contains(e, "QLinearMatMul_0") && contains(e, "b_scale must be a scalar, 1-D with 32 values (one per column) or [1, 32]")) << e;
  e = error_of(R"(<ir_version: 8, opset_import: ["" : 10]>
    g (uint8[1, 3, 8, 8] x, float xs, uint8 xz, uint8[16, 3, 3, 3] w, float[3] ws, uint8 wz, float ys, uint8 yz) => (uint8[1, 16, 6, 6] y) {
      y = QLinearConv(x, xs, xz, w, ws, wz, ys, yz)
    })");
  EXPECT_TRUE(contains(e, "w_scale must be a scalar or 1-D with 16 values (one per output channel)")) << e;
  e = error_of(R"(<ir_version: 8, opset_import: ["" : 10]>
    g (uint8[2, 64] a, uint8[64, 32] b, uint8 az, uint8[2] bz) => (int32[2, 32] y) { y = MatMulInteger(a, b, az, bz) })");
  EXPECT_TRUE(contains(e, "b_zero_point must be a scalar, 1-D with 32 values (one per column) or [1, 32]")) << e;
}

// --- control flow ----------------------------------------------------------------------------------

const char* kIfModel = R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 4] x) => (float[M, K] y) {
      s = Shape(x)
      zero = Constant<value = int64[1] {0}>()
      b = Gather(s, zero)
      one = Constant<value = int64[1] {1}>()
      c1 = Equal(b, one)
      c = Squeeze(c1)
      y = If(c) <then_branch = g1 () => (float[N, 4] t) { t = Identity(x) },
                 else_branch = g2 () => (float[N, 8] e) { e = Concat<axis = 1>(x, x) }>
    })";

TEST(ControlFlow, IfWithAComputableConditionTakesThatBranch) {
  // N = 1: the condition N == 1 holds -> then branch, y = x [1, 4].
  auto r = infer(kIfModel, dims({{"N", 1}}));
  EXPECT_EQ(r.values.at("y").shape, Shape({1, 4}));
  EXPECT_TRUE(r.warnings.empty());
  // N = 3: else branch, y = concat(x, x) along 1 = [3, 8].
  r = infer(kIfModel, dims({{"N", 3}}));
  EXPECT_EQ(r.values.at("y").shape, Shape({3, 8}));
}

TEST(ControlFlow, IfWithAnUnknownConditionTakesTheLargerBranchAndWarns) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x, bool c) => (float[M, K] y) {
      y = If(c) <then_branch = g1 () => (float[2, 4] t) { t = Identity(x) },
                 else_branch = g2 () => (float[2, 8] e) { e = Concat<axis = 1>(x, x) }>
    })");
  // y is the else branch's output e, shaped inside the body: float [2, 8] (64 bytes > then's 32 bytes).
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 8}));
  EXPECT_EQ(r.values.at("y").dtype, DType::Float32);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "both branches")) << r.warnings[0];
}

TEST(ControlFlow, LoopScanOutputsGetTheTripCountAsLeadingDim) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[3] x) => (float[3] final, float[5, 3] stacked) {
      m = Constant<value = int64 {5}>()
      cond = Constant<value = bool {1}>()
      final, stacked = Loop(m, cond, x) <body = b (int64 i, bool ci, float[3] acc) => (bool co, float[3] next, float[3] out) {
        co = Identity(ci)
        next = Add(acc, acc)
        out = Identity(next)
      }>
    })");
  EXPECT_EQ(r.values.at("final").shape, Shape({3}));
  EXPECT_EQ(r.values.at("stacked").shape, Shape({5, 3}));  // 5 iterations of [3]
}

TEST(ControlFlow, ScanStacksOutputsAlongScanOutputAxes) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] init, float[5, 2] xs) => (float[2] final, float[5, 2] ys) {
      final, ys, zs = Scan<num_scan_inputs = 1, scan_output_axes = [0, 1],
          body = b (float[2] s, float[2] x) => (float[2] s2, float[2] y, float[2] z) {
            s2 = Add(s, x)
            y = Identity(s2)
            z = Identity(x)
          }>(init, xs)
    })");
  // 5 steps over axis 0 of xs, each slice [2]: state [2], ys stacked on axis 0 -> [5, 2], zs on axis 1 -> [2, 5].
  EXPECT_EQ(r.values.at("final").shape, Shape({2}));
  EXPECT_EQ(r.values.at("ys").shape, Shape({5, 2}));
  EXPECT_EQ(r.values.at("zs").shape, Shape({2, 5}));
}

TEST(ControlFlow, LoopWhoseShapesDependOnTheIterationIsUnrolled) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[4, 3] x) => (float[4, 1, 3] rows) {
      m = Constant<value = int64 {4}>()
      t = Constant<value = bool {1}>()
      rows = Loop(m, t) <body = b (int64 i, bool c) => (bool co, float[1, 3] row) {
        co = Identity(c)
        ax = Constant<value = int64[1] {0}>()
        one = Constant<value = int64[1] {1}>()
        start = Unsqueeze(i, ax)
        end = Add(start, one)
        row = Slice(x, start, end)
      }>
    })");
  // Each iteration i slices x[i:i+1] -> [1, 3]; 4 iterations stack to [4, 1, 3].
  EXPECT_EQ(r.values.at("rows").shape, Shape({4, 1, 3}));
}

TEST(Opset18, AveragePool19Dilations) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 19]>
    g (float[1, 1, 10, 10] x) => (float[1, 1, 6, 6] y) {
      y = AveragePool<kernel_shape = [3, 3], dilations = [2, 2]>(x)
      z = AveragePool<kernel_shape = [3, 3], dilations = [2, 2], strides = [2, 2], ceil_mode = 1>(x)
    })");
  // Dilated window (3-1)*2+1 = 5: (10-5)/1+1 = 6; with stride 2 and ceil: ceil(5/2)+1 = 4.
  EXPECT_EQ(r.values.at("y").shape, Shape({1, 1, 6, 6}));
  EXPECT_EQ(r.values.at("z").shape, Shape({1, 1, 4, 4}));
}

// --- graph structure errors ------------------------------------------------------------------------

TEST(Walker, UnsortedNodesAreOrderedTopologically) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 3] x) => (float[2, 3] z) {
      z = Relu(y)
      y = Sigmoid(x)
    })");
  EXPECT_EQ(r.order, std::vector<int32_t>({1, 0}));
  EXPECT_EQ(r.values.at("z").shape, Shape({2, 3}));
}

TEST(Walker, ModelOrderIsKeptWhenValid) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] c) {
      a = Relu(x)
      b = Relu(x)
      c = Add(a, b)
    })");
  EXPECT_EQ(r.order, std::vector<int32_t>({0, 1, 2}));
}

TEST(Walker, CycleIsAnErrorNamingItsNodes) {
  const std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] b) {
      a = Add(x, b)
      b = Relu(a)
    })");
  EXPECT_TRUE(contains(msg, "cycle")) << msg;
  EXPECT_TRUE(contains(msg, "Add_0")) << msg;
  EXPECT_TRUE(contains(msg, "Relu_1")) << msg;
}

TEST(Walker, MissingTensorIsAnErrorNamingNodeAndTensor) {
  const std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) {
      y = Add(x, ghost)
    })");
  EXPECT_TRUE(contains(msg, "Add_0")) << msg;
  EXPECT_TRUE(contains(msg, "'ghost'")) << msg;
}

TEST(Walker, OnnxInferenceErrorsNameTheNode) {
  const std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 3] a, float[4, 5] b) => (float[2, 5] y) {
      y = MatMul(a, b)
    })");
  EXPECT_TRUE(contains(msg, "MatMul_0")) << msg;  // inner dims 3 and 4 differ
}

TEST(Walker, NodeWithTooFewInputsIsRefusedNotCrashed) {
  const std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 3] a) => (float[2, 3] y) {
      y = Add(a)
    })");
  EXPECT_TRUE(contains(msg, "Add_0")) << msg;
  EXPECT_TRUE(contains(msg, "1 inputs")) << msg;
}

// --- bindings --------------------------------------------------------------------------------------

const char* kTwoSymbols = R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, seq, 16] x, float[?, 16] m) => (float[batch, seq, 16] y) {
      y = Relu(x)
    })";

TEST(Bindings, UnboundDimsAreListedWithTheFlagThatBindsThem) {
  const std::string msg = error_of(kTwoSymbols);
  EXPECT_TRUE(contains(msg, "input 'x' axis 0 ('batch')")) << msg;
  EXPECT_TRUE(contains(msg, "--dim batch=N or --batch N")) << msg;
  EXPECT_TRUE(contains(msg, "input 'x' axis 1 ('seq')")) << msg;
  EXPECT_TRUE(contains(msg, "--dim seq=N")) << msg;
  EXPECT_TRUE(contains(msg, "input 'm' axis 0 (unnamed)")) << msg;
  EXPECT_TRUE(contains(msg, "--input m=")) << msg;
}

// A symbol free at many input axes is one line, at the first axis, counting the others: a decoder's 2 x layers past
// inputs share batch and past (here 2 + 3 axes), and the line says how to bind it.
TEST(Bindings, ASymbolFreeAtManyAxesIsOneLine) {
  const std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, seq] ids, float[batch, 2, past, 4] k0, float[batch, 2, past, 4] v0) => (float[batch, seq] y) {
      y = Relu(ids)
    })");
  EXPECT_TRUE(contains(msg, "input 'ids' axis 0 ('batch'; 2 more input axes share it): bind it with --dim batch=N or "
                            "--batch N or --input ids=...")) << msg;
  EXPECT_TRUE(contains(msg, "input 'k0' axis 2 ('past'; 1 more input axis shares it): bind it with --dim past=N")) << msg;
  EXPECT_TRUE(contains(msg, "input 'ids' axis 1 ('seq'): bind it with --dim seq=N")) << msg;
  EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 3) << msg;  // the heading and three lines
}

TEST(Bindings, BatchBindsLeadingDimsAndDimBindsByName) {
  Bindings b;
  b.batch = 4;
  b.dims["seq"] = 9;
  const auto r = infer(kTwoSymbols, b);
  EXPECT_EQ(r.values.at("x").shape, Shape({4, 9, 16}));
  EXPECT_EQ(r.values.at("m").shape, Shape({4, 16}));  // unnamed leading dim: --batch too
  EXPECT_EQ(r.bound_dims.at("batch"), 4);
}

TEST(Bindings, InputFlagFixesAWholeShape) {
  Bindings b;
  b.input_shapes["x"] = {2, 5, 16};
  b.input_shapes["m"] = {3, 16};
  const auto r = infer(kTwoSymbols, b);
  EXPECT_EQ(r.values.at("y").shape, Shape({2, 5, 16}));
  EXPECT_EQ(r.bound_dims.at("seq"), 5);  // learned from --input x
}

TEST(Bindings, BadFlagsAreErrors) {
  Bindings unknown_dim = dims({{"sequence", 3}});
  EXPECT_TRUE(contains(error_of(kTwoSymbols, unknown_dim), "no symbolic dimension named 'sequence'"));
  Bindings unknown_input;
  unknown_input.input_shapes["z"] = {1};
  EXPECT_TRUE(contains(error_of(kTwoSymbols, unknown_input), "no graph input named 'z'"));
  Bindings wrong_rank;
  wrong_rank.input_shapes["x"] = {2, 5};
  EXPECT_TRUE(contains(error_of(kTwoSymbols, wrong_rank), "gives 2 dimensions"));
  Bindings negative = dims({{"seq", -1}});
  EXPECT_TRUE(contains(error_of(kTwoSymbols, negative), "cannot be negative"));
}

TEST(Bindings, ByteSizeOverflowIsShapeOverflow) {
  // 2^21 cubed = 2^63 elements: the element count no longer fits in int64.
  const std::string msg = error_of<ShapeOverflow>(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, N, N] x) => (float[N, N, N] y) { y = Relu(x) })", dims({{"N", int64_t{1} << 21}}));
  EXPECT_TRUE(contains(msg, "'x'")) << msg;
  // 2^20 cubed = 2^60 elements fits, but 2^60 float32 are 2^62 bytes... and Concat doubles it to 2^63.
  const std::string msg2 = error_of<ShapeOverflow>(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, N, N] x) => (float[M, N, N] y) { y = Concat<axis = 0>(x, x, x, x) })", dims({{"N", int64_t{1} << 20}}));
  EXPECT_TRUE(contains(msg2, "'y'")) << msg2;
}

TEST(Bindings, UnknownDtypeIsAnError) {
  auto model = parse_text_model(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) { y = Relu(x) })");
  model.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(99);
  try {
    infer_shapes(model, {});
    ADD_FAILURE() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "unknown data type 99")) << e.what();
  }
}

// --- custom domains --------------------------------------------------------------------------------

TEST(CustomOps, DeclaredValueInfoShapesAreUsed) {
  auto model = parse_text_model(R"(<ir_version: 8, opset_import: ["" : 17, "my.domain" : 1]>
    g (float[B, 8] x) => (float[B, 8] y) {
      h = my.domain.Mystery(x)
      y = Relu(h)
    })");
  auto* vi = model.mutable_graph()->add_value_info();
  vi->set_name("h");
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  tt->mutable_shape()->add_dim()->set_dim_param("B");
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  const auto r = infer_shapes(model, dims({{"B", 6}}));
  EXPECT_EQ(r.values.at("h").shape, Shape({6, 3}));  // B bound to 6 in the declared [B, 3]
  EXPECT_EQ(r.values.at("y").shape, Shape({6, 3}));
}

TEST(CustomOps, UndeclaredShapesAreAnErrorNamingTheOp) {
  const std::string msg = error_of(R"(<ir_version: 8, opset_import: ["" : 17, "my.domain" : 1]>
    g (float[2, 8] x) => (float[2, 8] y) {
      h = my.domain.Mystery(x)
      y = Relu(h)
    })");
  EXPECT_TRUE(contains(msg, "my.domain.Mystery")) << msg;
  EXPECT_TRUE(contains(msg, "value_info")) << msg;
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Model-local functions (PyTorch's dynamo exporter): the body is inferred with the caller's attributes.
TEST(CustomOps, ModelLocalFunctionsAreInferredThroughTheirBody) {
  const auto r = infer(R"(<ir_version: 8, opset_import: ["" : 17, "local" : 1]>
    g (float[N, 4] x) => (float[N, 8] y) {
      y = local.Double<axis = 1>(x)
      z = local.Double<axis = 0>(x)
    }
    <domain: "local", opset_import: ["" : 17]>
    Double <axis> (a) => (b) {
      b = Concat<axis : int = @axis>(a, a)
    })", dims({{"N", 3}}));
  EXPECT_EQ(r.values.at("y").shape, Shape({3, 8}));  // concat along 1: 4 + 4
  EXPECT_EQ(r.values.at("z").shape, Shape({6, 4}));  // concat along 0: 3 + 3
}

// --- scale -----------------------------------------------------------------------------------------

TEST(Walker, HundredThousandNodesInferQuickly) {
  onnx::ModelProto m = parse_text_model(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[B, 64] x) => (float[B, 64] y) { y = Relu(x) })");
  auto* g = m.mutable_graph();
  g->clear_node();
  std::string prev = "x";
  for (int i = 0; i < 100000; ++i) {
    auto* n = g->add_node();
    n->set_op_type(i % 2 ? "Relu" : "Add");
    n->add_input(prev);
    if (i % 2 == 0) n->add_input("x");
    prev = i == 99999 ? "y" : "t" + std::to_string(i);
    n->add_output(prev);
  }
  // CPU time of this thread, so a busy machine does not fail the test.
  const double start = thread_cpu_seconds();
  const auto r = infer_shapes(m, dims({{"B", 8}}));
  const double s = thread_cpu_seconds() - start;
  EXPECT_EQ(r.values.at("y").shape, Shape({8, 64}));
  EXPECT_EQ(r.order.size(), 100000u);
  // Under ASan+UBSan (scripts/test.sh sets MEMPLAN_SANITIZED=1, whichever compiler built it) a tenth the speed.
  EXPECT_LT(s, std::getenv("MEMPLAN_SANITIZED") ? 10.0 : 1.0);
}

}  // namespace
}  // namespace memplan
