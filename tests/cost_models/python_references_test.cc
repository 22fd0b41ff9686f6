// Eager PyTorch inference holds what transformers' Python still references in a decoder layer's attention
// (cost_models/python_references.h), on a tiny decoder layer whose every byte is worked out by hand below.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::int_attr;
using testing::ints_attr;
using testing::peak_live_bytes;

// One decoder layer, float32, heads 2, kv heads 1 (repeat_kv doubles k and v), seq 4, head_dim 4; a [1,2,4,4]
// tensor is 32 floats = 128 B (F), a [1,1,4,4] one 64 B (K). Node i is step i (every node runs; the int64
// constants are shape arguments, Python values off the device):
//   0 <layer>/input_layernorm/Mul  h = x * gw                          F  (x: the graph input, read again at 17)
//   1 <attn>/q_proj/Mul            q = h * wq                          F
//   2 <attn>/k_proj/ReduceMean     k = mean(h, axis 1)                 K
//   3 <attn>/v_proj/ReduceMean     v = mean(h, axis 1)                 K
//   4-6 <attn>/Unsqueeze, Expand, Reshape: kr = repeat_kv(k)           F  (views of k, then the reshape's copy)
//   7-9 the same for v: vr                                             F
//   10 <attn>/MatMul   s = q @ kr      11 <attn>/Mul  sc = s * 0.5     12 <attn>/Softmax  p       F each
//   13 <attn>/MatMul_1 c = p @ vr      14 <attn>/Transpose ct (view)   15 <attn>/Reshape_3 cm (a copy)  F each
//   16 <attn>/o_proj/Mul o = cm * wo   17 <layer>/Add y = x + o        18 <layer>/mlp/Mul m = y * wm
//   19 <layer>/Add_1 z = y + m (the output)                                                        F each
// with <layer> = /layers.0 and <attn> = <layer>/self_attn (torch.onnx's module scopes), or <layer>/attn.
Graph tiny_decoder_layer(const std::string& attn) {
  const std::string layer = "/layers.0";
  GraphBuilder b;
  const std::vector<int64_t> full = {1, 2, 4, 4}, kv = {1, 1, 4, 4};
  const int32_t x = b.input("x", full);
  const int32_t h = b.node1("Mul", {x, b.weight("gw", {4})}, "h", full);
  const int32_t q = b.node1("Mul", {h, b.weight("wq", {4})}, "q", full);
  const int32_t k = b.node1("ReduceMean", {h}, "k", kv, {{"axes", ints_attr({1})}, {"keepdims", int_attr(1)}});
  const int32_t v = b.node1("ReduceMean", {h}, "v", kv, {{"axes", ints_attr({1})}, {"keepdims", int_attr(1)}});
  auto repeat_kv = [&](int32_t t, const std::string& n) {
    const int32_t u = b.node1("Unsqueeze", {t, b.int_constant(n + "_axes", {2})}, n + "_u", {1, 1, 1, 4, 4});
    const int32_t e = b.node1("Expand", {u, b.int_constant(n + "_sizes", {1, 1, 2, 4, 4})}, n + "_e", {1, 1, 2, 4, 4});
    return b.node1("Reshape", {e, b.int_constant(n + "_shape", full)}, n + "r", full);
  };
  const int32_t kr = repeat_kv(k, "k"), vr = repeat_kv(v, "v");
  const int32_t s = b.node1("MatMul", {q, kr}, "s", full);
  const int32_t sc = b.node1("Mul", {s, b.scalar("scale", 0.5f)}, "sc", full);
  const int32_t p = b.node1("Softmax", {sc}, "p", full, {{"axis", int_attr(-1)}});
  const int32_t c = b.node1("MatMul", {p, vr}, "c", full);
  const int32_t ct = b.node1("Transpose", {c}, "ct", {1, 4, 2, 4}, {{"perm", ints_attr({0, 2, 1, 3})}});
  const int32_t cm = b.node1("Reshape", {ct, b.int_constant("cm_shape", full)}, "cm", full);
  const int32_t o = b.node1("Mul", {cm, b.weight("wo", {4})}, "o", full);
  const int32_t y = b.node1("Add", {x, o}, "y", full);
  const int32_t m = b.node1("Mul", {y, b.weight("wm", {4})}, "m", full);
  b.output(b.node1("Add", {y, m}, "z", full));
  Graph g = b.graph();
  const char* names[] = {"/input_layernorm/Mul", "@/q_proj/Mul", "@/k_proj/ReduceMean", "@/v_proj/ReduceMean",
                         "@/Unsqueeze", "@/Expand", "@/Reshape", "@/Unsqueeze_1", "@/Expand_1", "@/Reshape_1",
                         "@/MatMul", "@/Mul", "@/Softmax", "@/MatMul_1", "@/Transpose", "@/Reshape_3",
                         "@/o_proj/Mul", "/Add", "/mlp/Mul", "/Add_1"};
  EXPECT_EQ(g.nodes.size(), std::size(names));
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const std::string n = names[i];
    g.nodes[i].name = n[0] == '@' ? layer + "/" + attn + n.substr(1) : layer + n;
  }
  return g;
}

bool has_hold_note(const CostModelResult& r) {
  return std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.rfind("8 buffers of decoder layers with eager attention under a self_attn module are held", 0) == 0;
  });
}

// The cuBLAS workspace of compute capability 8.x (8,519,680 B), created at the first MatMul (step 10), kept.
constexpr uint64_t kWorkspace = 8519680;

TEST(PythonReferences, TransformersAttentionHoldsByHand) {
  InferenceRun opt;
  opt.runtime = Runtime::PyTorch;
  opt.cuda_arch_major = 8;
  // Graph liveness (the scope is not a self_attn one, like the zoo's GPT): x 0-17, h 0-3, q 1-10, k 2-6, v 3-9,
  // kr 6-10, vr 9-13, s 10-11, sc 11-12, p 12-13, c 13-15, cm 15-16, o 16-17, y 17-19, m 18-19, z 19.
  // Step 10: x + q + kr + vr + s = 5 F = 640, the peak (11 to 13: 4 F = 512).
  const CostModelResult plain = build_inference_program(tiny_decoder_layer("attn"), opt);
  EXPECT_EQ(peak_live_bytes(plain.program).bytes, 640u + kWorkspace);
  EXPECT_FALSE(has_hold_note(plain));
  // transformers' references: (1) h, the scope's input, to the scope's last node 16; (2) q, k, v to 16; (3) kr,
  // vr to the first copy past the context's transposes, 15; (4) p to the layer's last node 19; (5) x, the layer's
  // input, to 19 (the caller's reference); (6) y, the mlp scope's input, to its last node 18 (read at 19 anyway).
  // So x 0-19, h 0-16,
  // q 1-16, k 2-16, v 3-16, kr 6-15, vr 9-15, s 10-11, sc 11-12, p 12-19, c 13-15, cm 15-16, o 16-17, y 17-19,
  // m 18-19, z 19. Step 10: x h q kr vr s 6 F + k v 2 K = 896; 11: + sc = 1024; 12 and 13: s out, p or c in,
  // 1024; 15: x h q kr vr p c cm 8 F + 2 K = 1152, the peak; 16: x h q p cm o 6 F + 2 K = 896; 17: x p o y 512;
  // 19: x p y m z 640.
  const CostModelResult held = build_inference_program(tiny_decoder_layer("self_attn"), opt);
  const testing::Peak peak = peak_live_bytes(held.program);
  EXPECT_EQ(peak.bytes, 1152u + kWorkspace);
  EXPECT_EQ(held.program.steps[peak.step].name, "/layers.0/self_attn/Reshape_3");
  EXPECT_TRUE(has_hold_note(held));  // x, h, q, k, v, kr, vr, p (y's hold ends before its last reader)
  // The scaled scores stay freed at graph liveness: transformers rebinds attn_weights (the step-12 figure above).
  // With SDPA nothing is held: no probabilities exist, and (1) to (3) are eager-only (python_references.h).
  opt.attention = AttentionImpl::Sdpa;
  EXPECT_FALSE(has_hold_note(build_inference_program(tiny_decoder_layer("self_attn"), opt)));
  // Another runtime frees by graph liveness.
  opt.runtime = Runtime::OnnxRuntime;
  opt.attention = AttentionImpl::Eager;
  EXPECT_FALSE(has_hold_note(build_inference_program(tiny_decoder_layer("self_attn"), opt)));
}

}  // namespace
}  // namespace memplan
