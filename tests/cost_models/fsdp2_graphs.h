// The small graph the FSDP2 tests shard (tests/cost_models/fsdp2_test.cc, fsdp2_mp_test.cc):
// x[4,5] -> MatMul(layers.0.fc.w[5,6]) -> Add(layers.0.fc.b[6]) -> Relu -> MatMul(layers.1.fc.w[6,5]) -> Relu
//   -> Gemm(head.w[2,5] transposed, head.b[2]) -> y[4,2]
// Nodes: /MatMul_0, /Add_1, /Relu_2, /MatMul_3, /Relu_4, /Gemm_5; the first two run as one Linear op, named /Add_1.
// Units: root {head.w, head.b}, layers.0, layers.1; every tensor float32 as stored. Its first dimensions (5, 6, 2)
// do not divide evenly over 4 GPUs.
#pragma once

#include "onnx_import/graph.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan::testing {

inline Graph fsdp2_odd_rows() {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 5});
  const int32_t h0 = b.node1("MatMul", {x, b.weight("layers.0.fc.w", {5, 6})}, "h0", {4, 6});
  const int32_t a0 = b.node1("Add", {h0, b.weight("layers.0.fc.b", {6})}, "a0", {4, 6});
  const int32_t r0 = b.node1("Relu", {a0}, "r0", {4, 6});
  const int32_t h1 = b.node1("MatMul", {r0, b.weight("layers.1.fc.w", {6, 5})}, "h1", {4, 5});
  const int32_t r1 = b.node1("Relu", {h1}, "r1", {4, 5});
  const int32_t y = b.node1("Gemm", {r1, b.weight("head.w", {2, 5}), b.weight("head.b", {2})}, "y", {4, 2},
                            {{"transB", int_attr(1)}});
  b.output(y);
  return b.graph();
}

}  // namespace memplan::testing
