// The one forward emitter's two policies, on a MaxPool (an extra buffer: int64 indices) and a Gemm (a cuBLAS
// call), with every figure by hand. x[1,4,8,8] -> MaxPool 2x2 -> y[1,4,4,4] (64 elements); y reshaped is not
// needed: the Gemm reads a[4,8] and W[16,8] and writes h[4,16].
#include <gtest/gtest.h>

#include "cost_models/eager_semantics.h"
#include "cost_models/forward_emitter.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::int_attr;
using testing::ints_attr;

Graph two_ops() {
  GraphBuilder b;
  const int32_t x = b.input("x", {1, 4, 8, 8});
  const int32_t y = b.node1("MaxPool", {x}, "y", {1, 4, 4, 4},
                            {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
  const int32_t a = b.input("a", {4, 8});
  const int32_t w = b.weight("W", {16, 8});
  const int32_t h = b.node1("Gemm", {a, w}, "h", {4, 16}, {{"transB", int_attr(1)}});
  b.output(y);
  b.output(h);
  return b.graph();
}

struct Emitted {
  Program program;
  std::vector<ClosedOp> closed;
};

// Emits every op of the graph under `policy`, inputs and weights given buffers first.
Emitted emit_all(const Graph& g, bool training, const ForwardPolicy& policy) {
  Emitted out;
  ProgramWriter writer(out.program);
  TensorLayout layout;
  for (const Tensor& t : g.tensors) layout.dtype.push_back(t.dtype);
  layout.tp.axis.assign(g.tensors.size(), -1);
  layout.tp.local_dim.assign(g.tensors.size(), 0);
  layout.tp.gathered_input.assign(g.nodes.size(), -1);
  RuntimeModel runtime;
  runtime.semantics = Semantics::PyTorchEager;
  runtime.library_workspaces = true;
  const std::vector<bool> shape(g.tensors.size(), false);
  std::vector<int32_t> buffer(g.tensors.size(), -1);
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (g.tensors[t].kind == TensorKind::Input || g.tensors[t].kind == TensorKind::Weight)
      buffer[t] = writer.new_buffer(g.tensors[t].name, g.tensors[t].bytes(), Category::Activation);
  ForwardEmitter emitter(g, layout, runtime, shape, training, Precision::Fp32, /*cuda_arch_major=*/9, writer);
  const BufferView view{[&](int32_t t) { return buffer[t]; }, &out.program, nullptr};
  for (const FusedOp& op : executed_ops(g, runtime.semantics, AttentionImpl::Eager, shape)) {
    Step st = emitter.open(op, 0, policy);
    emitter.read_inputs(op, view, st);
    out.closed.push_back(emitter.close(op, view, [&](int32_t t) { return g.tensors[t].bytes(); },
                                       [&](int32_t t, int32_t b) { buffer[t] = b; }, std::move(st), policy));
  }
  return out;
}

TEST(ForwardEmitter, InferenceFreesTheExtrasAndUsesTheCallersHandle) {
  const Emitted e = emit_all(two_ops(), /*training=*/false, ForwardPolicy{});
  ASSERT_EQ(e.program.steps.size(), 2u);
  ASSERT_EQ(e.closed[0].extras.size(), 1u);
  const Buffer& indices = e.program.buffers[e.closed[0].extras[0].buffer];
  EXPECT_EQ(indices.name, "/MaxPool_0:indices");  // named after its op, in every mode
  EXPECT_EQ(indices.bytes, 64u * 8u);              // one int64 per output element
  EXPECT_TRUE(e.closed[0].saved.empty());          // nothing kept: it dies at its op
  // The Gemm creates the caller's handle's workspace: on sm90, ":4096:8", 4096 KiB x 8 = 33,554,432 bytes
  // (CublasHandlePool.cpp).
  const Step& gemm = e.program.steps[1];
  EXPECT_EQ(gemm.name, "/Gemm_1");
  EXPECT_EQ(gemm.phase, Phase::Forward);
  ASSERT_EQ(gemm.writes.size(), 2u);  // h, then the workspace
  EXPECT_EQ(e.program.buffers[gemm.writes[1]].name, "cublas_workspace");
  EXPECT_EQ(e.program.buffers[gemm.writes[1]].bytes, 33554432u);
  EXPECT_TRUE(e.program.buffers[gemm.writes[1]].live_at_end);
}

TEST(ForwardEmitter, RecomputationSavesTheExtrasAndUsesAutogradsHandle) {
  const ForwardPolicy recompute{Phase::Backward, "recompute:", /*save_extras=*/true, CublasHandle::Autograd};
  const Emitted e = emit_all(two_ops(), /*training=*/true, recompute);
  ASSERT_EQ(e.closed[0].extras.size(), 1u);
  ASSERT_EQ(e.closed[0].saved.size(), 1u);
  EXPECT_EQ(e.closed[0].saved[0], e.closed[0].extras[0].buffer);
  EXPECT_EQ(e.program.buffers[e.closed[0].saved[0]].category, Category::Activation);  // a result autograd keeps
  const Step& gemm = e.program.steps[1];
  EXPECT_EQ(gemm.name, "recompute:/Gemm_1");
  EXPECT_EQ(gemm.phase, Phase::Backward);
  EXPECT_EQ(e.program.buffers[gemm.writes.back()].name, "cublas_workspace:autograd");
}

}  // namespace
}  // namespace memplan
