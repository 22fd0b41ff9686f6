// The float32 islands of a half-precision model (--upcast, cost_models/fp32_islands.h) and the loss's float32 copy;
// every expected byte count is worked out by hand in the comments.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::int_attr;
using testing::ints_attr;
using testing::step_named;
using testing::buffer_ending;
using testing::last_reader;
using testing::step_reads;

TrainingRun bf16_sgd(Upcast upcast) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;
  o.loss = LossKind::CrossEntropy;
  o.precision = Precision::Bf16;
  o.upcast = upcast;
  return o;
}

// x[4,8] -> Gemm W1 -> h[4,16] -> LlamaRMSNorm as torch.onnx writes it (Pow, ReduceMean, Add, Sqrt, Div(1, .),
// Mul(h, .) = n, Mul(w, n) = o) -> Gemm W2 -> y[4,2]. `gemma`: Mul(n, Add(w, 1)), Gemma's (1 + weight).
Graph rms_norm_mlp(bool gemma = false) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h = b.node1("Gemm", {x, b.weight("W1", {16, 8})}, "h", {4, 16}, {{"transB", int_attr(1)}});
  const int32_t p = b.node1("Pow", {h, b.scalar("two", 2.0f)}, "p", {4, 16});
  const int32_t m = b.node1("ReduceMean", {p}, "m", {4, 1}, {{"axes", ints_attr({-1})}, {"keepdims", int_attr(1)}});
  const int32_t a = b.node1("Add", {m, b.scalar("eps", 1e-6f)}, "a", {4, 1});
  const int32_t s = b.node1("Sqrt", {a}, "s", {4, 1});
  const int32_t d = b.node1("Div", {b.scalar("one", 1.0f), s}, "d", {4, 1});
  const int32_t n = b.node1("Mul", {h, d}, "n", {4, 16});
  const int32_t w = b.weight("w", {16});
  const int32_t o = gemma ? b.node1("Mul", {n, b.node1("Add", {w, b.scalar("one_w", 1.0f)}, "w1", {16})}, "o", {4, 16})
                          : b.node1("Mul", {w, n}, "o", {4, 16});
  b.output(b.node1("Gemm", {o, b.weight("W2", {2, 16})}, "y", {4, 2}, {{"transB", int_attr(1)}}));
  return b.graph();
}

// --precision bf16 --upcast rmsnorm: h (bf16, 4x16x2 = 128 bytes) is copied into float32 (256 bytes), which both
// Pow and the Mul read and whose backwards keep it; p and n are float32 (256 each); the cast back of n is bf16
// (128), read by the weight's Mul, whose backward keeps it. The bf16 h is read by nothing after the upcast.
TEST(Fp32Islands, RmsNormNormalisesAFloat32CopyAndCastsBack) {
  const TrainingResult r = build_training_program(rms_norm_mlp(), bf16_sgd({.rms_norm = true}));
  const Program& p = r.program;
  const int32_t up = buffer_ending(p, "/upcast_output_0"), down = buffer_ending(p, "/downcast_output_0");
  ASSERT_GE(up, 0);
  ASSERT_GE(down, 0);
  EXPECT_EQ(p.buffers[up].bytes, 256u);
  EXPECT_EQ(p.buffers[down].bytes, 128u);
  EXPECT_EQ(p.buffers[buffer_named(p, "p")].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "n")].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "h")].bytes, 128u);
  EXPECT_EQ(p.buffers[buffer_named(p, "o")].bytes, 128u);
  // Saved for backward: the float32 copy by Pow's and the Mul's backward, the bf16 cast back by the weight's.
  EXPECT_TRUE(step_reads(p.steps[step_named(p, "backward:/Pow_1")], up));
  EXPECT_TRUE(step_reads(p.steps[last_reader(p, down)], down));
  EXPECT_EQ(p.steps[last_reader(p, down)].phase, Phase::Backward);
  EXPECT_LT(last_reader(p, buffer_named(p, "h")), step_named(p, "/Pow_1"));  // h dies at its cast
  EXPECT_NE(std::find_if(r.notes.begin(), r.notes.end(),
                         [](const std::string& s) { return s.find("1 RMSNorms normalise a float32 copy") != std::string::npos; }),
            r.notes.end());
}

// Gemma's norm multiplies by (1 + weight) in float32 too: the sum (16 x 4 = 64 bytes) and o (256) are float32 and
// the cast back follows o (128 bytes, read by W2's Gemm).
TEST(Fp32Islands, GemmaNormCastsBackAfterTheWeight) {
  const Program p = build_training_program(rms_norm_mlp(/*gemma=*/true), bf16_sgd({.rms_norm = true})).program;
  const int32_t down = buffer_ending(p, "/downcast_output_0");
  ASSERT_GE(down, 0);
  EXPECT_EQ(p.buffers[buffer_named(p, "w1")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "o")].bytes, 256u);
  EXPECT_EQ(p.buffers[down].bytes, 128u);
  EXPECT_TRUE(step_reads(p.steps[step_named(p, "/Gemm_9")], down));
}

// Under fp32 and autocast the casts would be no-ops: the graph is not rewritten, and the note says why.
TEST(Fp32Islands, NothingChangesUnlessTheModelIsHalf) {
  for (Precision precision : {Precision::Fp32, Precision::AmpBf16}) {
    TrainingRun o = bf16_sgd({.rms_norm = true, .softmax = true});
    o.precision = precision;
    const TrainingResult r = build_training_program(rms_norm_mlp(), o);
    EXPECT_EQ(buffer_ending(r.program, "/upcast_output_0"), -1);
    EXPECT_NE(std::find_if(r.notes.begin(), r.notes.end(),
                           [](const std::string& s) { return s.find("--upcast changes nothing") == 0; }),
              r.notes.end());
  }
}

// x[4,8] -> Gemm W1 -> h[4,8]; MatMul(h, k[8,16]) = s[4,16] (scores of two activations, as attention's: a softmax
// on a linear layer's output would be a router's) -> Softmax -> q[4,16] -> Gemm -> y[4,2]. --upcast softmax: s
// (bf16, 128) is copied into float32 (256), the softmax writes float32 (256), which its backward keeps, and a bf16
// copy (128) goes on.
TEST(Fp32Islands, SoftmaxRunsInFloat32AndKeepsItsFloat32Result) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h = b.node1("Gemm", {x, b.weight("W1", {8, 8})}, "h", {4, 8}, {{"transB", int_attr(1)}});
  const int32_t s = b.node1("MatMul", {h, b.input("k", {8, 16})}, "s", {4, 16});
  const int32_t q = b.node1("Softmax", {s}, "q", {4, 16}, {{"axis", int_attr(-1)}});
  b.output(b.node1("Gemm", {q, b.weight("W2", {2, 16})}, "y", {4, 2}, {{"transB", int_attr(1)}}));
  const Program p = build_training_program(b.graph(), bf16_sgd({.softmax = true})).program;
  const int32_t up = buffer_ending(p, "/upcast_output_0"), down = buffer_ending(p, "/downcast_output_0");
  ASSERT_GE(up, 0);
  ASSERT_GE(down, 0);
  EXPECT_EQ(p.buffers[up].bytes, 256u);
  EXPECT_EQ(p.buffers[buffer_named(p, "q")].bytes, 256u);
  EXPECT_EQ(p.buffers[down].bytes, 128u);
  EXPECT_TRUE(step_reads(p.steps[step_named(p, "backward:/Softmax_2")], buffer_named(p, "q")));
}

// The mlp's logits y[4,2] under bf16 (16 bytes) with --upcast loss: the loss reads a float32 copy (32 bytes), its
// log_softmax is float32 (32), and backward makes the float32 grad (32) at log_softmax's backward and the bf16 grad
// (16) at a step of its own, after log_softmax's saved result is released.
Graph islands_mlp() {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h = b.node1("Gemm", {x, b.weight("W1", {16, 8})}, "h", {4, 16}, {{"transB", int_attr(1)}});
  b.output(b.node1("Gemm", {h, b.weight("W2", {2, 16})}, "y", {4, 2}, {{"transB", int_attr(1)}}));
  return b.graph();
}

TEST(Fp32Islands, LossReadsAFloat32CopyOfTheLogits) {
  const Program p = build_training_program(islands_mlp(), bf16_sgd({.loss = true})).program;
  EXPECT_EQ(p.buffers[buffer_named(p, "y")].bytes, 16u);
  EXPECT_EQ(p.buffers[buffer_named(p, "y:float32")].bytes, 32u);
  EXPECT_EQ(p.buffers[buffer_named(p, "y:log_softmax")].bytes, 32u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:y:float32")].bytes, 32u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:y")].bytes, 16u);
  const Program plain = build_training_program(islands_mlp(), bf16_sgd({})).program;
  EXPECT_EQ(buffer_named(plain, "y:float32"), -1);
  EXPECT_EQ(plain.buffers[buffer_named(plain, "y:log_softmax")].bytes, 16u);
}

// Autocast's loss has the same float32 copy: the cast of its grad back to the logits' type is ToCopyBackward0, a
// node of its own, so log_softmax's saved result and its incoming grad are gone before the bf16 grad exists.
TEST(Fp32Islands, TheGradsCastBackIsANodeOfItsOwn) {
  TrainingRun o = bf16_sgd({});
  o.precision = Precision::AmpBf16;
  const Program p = build_training_program(islands_mlp(), o).program;
  const int32_t to_copy = step_named(p, "backward:to_copy");
  ASSERT_GE(to_copy, 0);
  EXPECT_TRUE(step_reads(p.steps[to_copy], buffer_named(p, "grad:y:float32")));
  EXPECT_LT(last_reader(p, buffer_named(p, "y:log_softmax")), to_copy);
  EXPECT_LT(last_reader(p, buffer_named(p, "grad:y:log_softmax")), to_copy);
}

// transformers up to 4.45 (--upcast logits): x[2,4,8] -> MatMul(Wᵀ) -> y[2,4,3] in bf16 (48 bytes); the model returns
// logits.float() (96 bytes), the loss copies the shifted logits, [2,3,3] float32 (72), and the shifted labels,
// [2,3] int64 (48); log_softmax is 72. Backward: the shifted copy's grad (72), SliceBackward's full grad (96) in a
// step of its own, then the cast's backward writes y's bf16 grad (48).
TEST(Fp32Islands, LegacyLogitsAreAFloat32OutputAndTheLossCopiesTheShiftedOnes) {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 4, 8});
  const int32_t wt = b.node1("Transpose", {b.weight("W", {3, 8})}, "W_t", {8, 3}, {{"perm", ints_attr({1, 0})}});
  b.output(b.node1("MatMul", {x, wt}, "y", {2, 4, 3}));
  const Program p = build_training_program(b.graph(), bf16_sgd({.logits = true})).program;
  EXPECT_EQ(p.buffers[buffer_named(p, "y")].bytes, 48u);
  const int32_t logits = buffer_ending(p, "/logits_float_output_0");
  ASSERT_GE(logits, 0);
  EXPECT_EQ(p.buffers[logits].bytes, 96u);
  const std::string out = p.buffers[logits].name;
  EXPECT_EQ(p.buffers[buffer_named(p, out + ":shifted")].bytes, 72u);
  EXPECT_EQ(p.buffers[buffer_named(p, "targets:shifted")].bytes, 48u);
  EXPECT_EQ(p.buffers[buffer_named(p, out + ":log_softmax")].bytes, 72u);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:" + out + ":shifted")].bytes, 72u);
  const int32_t slice = step_named(p, "backward:slice");
  ASSERT_GE(slice, 0);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:" + out)].bytes, 96u);
  EXPECT_TRUE(step_reads(p.steps[slice], buffer_named(p, "grad:" + out + ":shifted")));
  EXPECT_LT(last_reader(p, buffer_named(p, out + ":log_softmax")), slice);
  EXPECT_EQ(p.buffers[buffer_named(p, "grad:y")].bytes, 48u);
}

// A mixture of experts' router as torch.onnx writes Qwen3MoeSparseMoeBlock.forward's (tests/models/hf_moe.py):
// x[4,8] -> MatMul(x, Transpose(gate[4,8])) = logits[4,4] -> Softmax = probs -> Cast(float) = pf
// (F.softmax(router_logits, dim=1, dtype=torch.float)) -> TopK(k 2) = v[4,2], i (int64) -> ReduceSum(v) = sum[4,1]
// -> Div(v, sum) = w -> Cast(float) = wc (.to(hidden_states.dtype)) -> MatMul(wc, W2[2,3]) = y[4,3].
// `topk_first`: gpt_oss's router instead (TopK on the logits, then Softmax -> Cast: softmax(..., dtype=
// router_top_value.dtype), the model's own type), which the export cannot tell from the float32 one by its casts.
Graph router(bool topk_first = false) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t gate_t = b.node1("Transpose", {b.weight("gate", {4, 8})}, "gate_t", {8, 4}, {{"perm", ints_attr({1, 0})}});
  const int32_t logits = b.node1("MatMul", {x, gate_t}, "logits", {4, 4});
  const int32_t k = b.int_constant("k", {2});
  int32_t v = -1;
  if (topk_first) {
    const int32_t top = b.node("TopK", {logits, k}, {{"top", {4, 2}}, {"i", {4, 2}}}, {{"axis", int_attr(-1)}});
    b.mutable_graph().tensors[top + 1].dtype = DType::Int64;
    const int32_t probs = b.node1("Softmax", {top}, "probs", {4, 2}, {{"axis", int_attr(-1)}});
    v = b.node1("Cast", {probs}, "pf", {4, 2}, {{"to", int_attr(1)}});
  } else {
    const int32_t probs = b.node1("Softmax", {logits}, "probs", {4, 4}, {{"axis", int_attr(1)}});
    const int32_t pf = b.node1("Cast", {probs}, "pf", {4, 4}, {{"to", int_attr(1)}});
    v = b.node("TopK", {pf, k}, {{"v", {4, 2}}, {"i", {4, 2}}}, {{"axis", int_attr(-1)}});
    b.mutable_graph().tensors[v + 1].dtype = DType::Int64;
  }
  const int32_t sum = b.node1("ReduceSum", {v, b.int_constant("axes", {-1})}, "sum", {4, 1}, {{"keepdims", int_attr(1)}});
  const int32_t w = b.node1("Div", {v, sum}, "w", {4, 2});
  const int32_t wc = b.node1("Cast", {w}, "wc", {4, 2}, {{"to", int_attr(1)}});
  b.output(b.node1("MatMul", {wc, b.weight("W2", {2, 3})}, "y", {4, 3}));
  return b.graph();
}

// Under bf16 (no --upcast: the modeling code asks for float32 itself): the logits (bf16, 32 bytes) are copied into
// float32 (64), the softmax writes float32 probs (64), which its backward keeps; top-k's values (32), their sum (16)
// and the quotient (32) are float32, and the cast back `wc` is bf16 (16). fp32 and autocast insert nothing.
TEST(Fp32Islands, MixtureOfExpertsRoutingSoftmaxRunsInFloat32) {
  const TrainingResult r = build_training_program(router(), bf16_sgd({}));
  const Program& p = r.program;
  const int32_t up = buffer_ending(p, "/upcast_output_0");
  ASSERT_GE(up, 0);
  EXPECT_EQ(p.buffers[up].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "logits")].bytes, 32u);
  EXPECT_EQ(p.buffers[buffer_named(p, "probs")].bytes, 64u);
  EXPECT_TRUE(step_reads(p.steps[step_named(p, "backward:/Softmax_2")], buffer_named(p, "probs")));
  EXPECT_EQ(last_reader(p, up), step_named(p, "/Softmax_2"));
  EXPECT_EQ(p.buffers[buffer_named(p, "v")].bytes, 32u);
  EXPECT_EQ(p.buffers[buffer_named(p, "sum")].bytes, 16u);
  EXPECT_EQ(p.buffers[buffer_named(p, "w")].bytes, 32u);
  EXPECT_EQ(p.buffers[buffer_named(p, "wc")].bytes, 16u);
  EXPECT_NE(std::find_if(r.notes.begin(), r.notes.end(),
                         [](const std::string& n) { return n.rfind("1 routers run F.softmax(router_logits", 0) == 0; }),
            r.notes.end());
  for (Precision precision : {Precision::Fp32, Precision::AmpBf16}) {
    TrainingRun o = bf16_sgd({});
    o.precision = precision;
    EXPECT_LT(buffer_ending(build_training_program(router(), o).program, "/upcast_output_0"), 0);
  }
}

// gpt_oss's top-k softmax runs in the model's type: the same Softmax -> Cast, but on top-k's values, not read by a
// TopK: nothing inserted, the probabilities bf16 (4 x 2 x 2 = 16 bytes), with --upcast softmax too (a router's
// softmax is not eager attention's).
TEST(Fp32Islands, ASoftmaxAfterTheTopKStaysInTheModelsType) {
  for (Upcast upcast : {Upcast{}, Upcast{.softmax = true}}) {
    const Program p = build_training_program(router(/*topk_first=*/true), bf16_sgd(upcast)).program;
    EXPECT_LT(buffer_ending(p, "/upcast_output_0"), 0);
    EXPECT_EQ(p.buffers[buffer_named(p, "probs")].bytes, 16u);
  }
}

// GptOss's eager attention with sinks: scores = MatMul(q[1,2,4,3], kt[1,2,3,4]) [1,2,4,4]; sinks[2] -> Reshape
// [1,2,1,1] -> Expand [1,2,4,1]; Concat(scores, that) = combined [1,2,4,5]; minus its ReduceMax; Softmax -> Cast
// (softmax(..., dtype=combined_logits.dtype)) -> MatMul(., v[1,2,5,3]). --upcast softmax leaves it in the model's
// type: no float32 copy, the probabilities bf16 (1 x 2 x 4 x 5 x 2 = 80 bytes).
TEST(Fp32Islands, AnAttentionWithSinksSoftmaxesInTheModelsType) {
  GraphBuilder b;
  const int32_t scores = b.node1("MatMul", {b.input("q", {1, 2, 4, 3}), b.input("kt", {1, 2, 3, 4})}, "scores",
                                 {1, 2, 4, 4});
  const int32_t column = b.node1("Reshape", {b.weight("sinks", {2}), b.int_constant("shape", {1, 2, 1, 1})}, "column",
                                 {1, 2, 1, 1});
  const int32_t sinks = b.node1("Expand", {column, b.int_constant("to", {1, 2, 4, 1})}, "sinks_x", {1, 2, 4, 1});
  const int32_t combined = b.node1("Concat", {scores, sinks}, "combined", {1, 2, 4, 5}, {{"axis", int_attr(-1)}});
  const int32_t max = b.node1("ReduceMax", {combined}, "max", {1, 2, 4, 1}, {{"axes", ints_attr({-1})},
                                                                           {"keepdims", int_attr(1)}});
  const int32_t shifted = b.node1("Sub", {combined, max}, "shifted", {1, 2, 4, 5});
  const int32_t probs = b.node1("Softmax", {shifted}, "probs", {1, 2, 4, 5}, {{"axis", int_attr(-1)}});
  const int32_t cast = b.node1("Cast", {probs}, "probs_cast", {1, 2, 4, 5}, {{"to", int_attr(1)}});
  b.output(b.node1("MatMul", {cast, b.input("v", {1, 2, 5, 3})}, "y", {1, 2, 4, 3}));
  const Program p = build_training_program(b.graph(), bf16_sgd({.softmax = true})).program;
  EXPECT_LT(buffer_ending(p, "/upcast_output_0"), 0);
  EXPECT_EQ(p.buffers[buffer_named(p, "probs")].bytes, 80u);
}

// DeepseekV2MoEGate as torch.onnx writes it: x[4,8] -> Cast(float) = xf; gate[4,8] -> Cast(float) = gf ->
// Transpose = gt; MatMul(xf, gt) = logits[4,4] -> Softmax = probs -> Cast(float) = pf (softmax(dtype=torch.float32))
// -> TopK(k 2) = v[4,2], i -> Mul(v, 16) = w (routed_scaling_factor) -> Cast(float) = wc (each expert's weighted
// output back in the model's type) -> MatMul(wc, W2[2,3]) = y[4,3].
Graph deepseek_v2_gate() {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t xf = b.node1("Cast", {x}, "xf", {4, 8}, {{"to", int_attr(1)}});
  const int32_t gf = b.node1("Cast", {b.weight("gate", {4, 8})}, "gf", {4, 8}, {{"to", int_attr(1)}});
  const int32_t gt = b.node1("Transpose", {gf}, "gt", {8, 4}, {{"perm", ints_attr({1, 0})}});
  const int32_t logits = b.node1("MatMul", {xf, gt}, "logits", {4, 4});
  const int32_t probs = b.node1("Softmax", {logits}, "probs", {4, 4}, {{"axis", int_attr(-1)}});
  const int32_t pf = b.node1("Cast", {probs}, "pf", {4, 4}, {{"to", int_attr(1)}});
  const int32_t v = b.node("TopK", {pf, b.int_constant("k", {2})}, {{"v", {4, 2}}, {"i", {4, 2}}},
                           {{"axis", int_attr(-1)}});
  b.mutable_graph().tensors[v + 1].dtype = DType::Int64;
  const int32_t w = b.node1("Mul", {v, b.scalar("scale", 16.0f)}, "w", {4, 2});
  const int32_t wc = b.node1("Cast", {w}, "wc", {4, 2}, {{"to", int_attr(1)}});
  b.output(b.node1("MatMul", {wc, b.weight("W2", {2, 3})}, "y", {4, 3}));
  return b.graph();
}

// Under bf16 the gate runs in float32 and the region goes on through the softmax's own Cast to float32: the copies
// xf (4 x 8 x 4 = 128 bytes) and gf (128), the logits (64), the scores (64), the top-k weights v and w (4 x 2 x 4 = 32
// each); the cast back wc is bf16 (16). No copy is inserted: the logits are float32 already (the Mixtral rule's
// upcast is not there), and --upcast softmax does not take the router's softmax for attention's (no copy either).
TEST(Fp32Islands, DeepSeekV2GateRunsInFloat32ThroughItsSoftmaxCast) {
  for (Upcast upcast : {Upcast{}, Upcast{.softmax = true}}) {
    const TrainingResult r = build_training_program(deepseek_v2_gate(), bf16_sgd(upcast));
    const Program& p = r.program;
    EXPECT_LT(buffer_ending(p, "/upcast_output_0"), 0);
    EXPECT_EQ(p.buffers[buffer_named(p, "xf")].bytes, 128u);
    EXPECT_EQ(p.buffers[buffer_named(p, "gf")].bytes, 128u);
    EXPECT_EQ(p.buffers[buffer_named(p, "logits")].bytes, 64u);
    EXPECT_EQ(p.buffers[buffer_named(p, "probs")].bytes, 64u);
    EXPECT_EQ(p.buffers[buffer_named(p, "v")].bytes, 32u);
    EXPECT_EQ(p.buffers[buffer_named(p, "w")].bytes, 32u);
    EXPECT_EQ(p.buffers[buffer_named(p, "wc")].bytes, 16u);
    EXPECT_NE(std::find_if(r.notes.begin(), r.notes.end(),
                           [](const std::string& n) { return n.rfind("1 routers run in float32", 0) == 0; }),
              r.notes.end());
  }
}

// --upcast softmax (eager attention's islands) leaves Mixtral's routing softmax to its own rule: the top-k weights
// stay float32 (v and w 4 x 2 x 4 = 32 bytes, as MixtureOfExpertsRoutingSoftmaxRunsInFloat32; the islands would have
// cast the probabilities back and left them bf16, 16), one float32 copy of the logits (64), and the islands' note
// counts no attention softmax.
TEST(Fp32Islands, UpcastSoftmaxLeavesARoutersSoftmaxToItsRule) {
  const TrainingResult r = build_training_program(router(), bf16_sgd({.softmax = true}));
  const Program& p = r.program;
  EXPECT_EQ(p.buffers[buffer_named(p, "/Softmax_2/upcast_output_0")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "probs")].bytes, 64u);
  EXPECT_EQ(p.buffers[buffer_named(p, "v")].bytes, 32u);
  EXPECT_EQ(p.buffers[buffer_named(p, "w")].bytes, 32u);
  EXPECT_EQ(p.buffers[buffer_named(p, "wc")].bytes, 16u);
  EXPECT_NE(std::find_if(r.notes.begin(), r.notes.end(),
                         [](const std::string& n) { return n.find(": 0 softmaxes run in float32") != std::string::npos; }),
            r.notes.end());
}

}  // namespace
}  // namespace memplan
