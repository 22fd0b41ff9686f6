// --offload-activations (cost_models/activation_offload.h): torchtune's OffloadActivations with streams, on small
// graphs whose every tensor is worked out by hand.
#include <gtest/gtest.h>

#include <string>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::last_reader;
using testing::peak_live_bytes;
using testing::step_named;

// a = Mul(x, w) then six Relus r1..r6, every tensor float32 [n]; the output r6 seeds backward (no loss), SGD,
// no library workspace. Mul keeps x (w needs a grad, x does not); each Relu keeps its result. GraphBuilder names the
// nodes /Mul_0, /Relu_1, ..., /Relu_6.
Graph relu_chain(int64_t n) {
  GraphBuilder b;
  int32_t t = b.node1("Mul", {b.input("x", {n}), b.weight("w", {n})}, "a", {n});
  for (int k = 1; k <= 6; ++k) t = b.node1("Relu", {t}, "r" + std::to_string(k), {n});
  b.output(t);
  return b.graph();
}

TrainingRun run(bool offload) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;
  o.offload_activations = offload;
  return o;
}

// n = 256: every tensor is 1024 bytes (1 KiB), at torchtune's min_offload_size, so all seven packs are offloaded,
// in order: x (Mul), r1, ..., r6. Host bytes: 7 x 1024 = 7168.
// Forward stash (max_fwd_stash_size 5): x is released at the 6th pack (r5's op), r1 at the 7th (r6's op); r2..r6
// stay until the first backward node's post-hook, the Relu of r6, whose own r6 is still stashed and read as it is.
// Each later node reads a copy brought back, dropped after the next node: R5 lives over bwd r5..bwd r4, ..., R1 over
// bwd r1..bwd Mul, and x's copy over bwd Mul.
// Live KiB, w resident apart (g_k: grad of r_k, ga: of a, gw: w's grad; r6, the output, is held to the end, and so
// is x, the batch the training loop holds: releasing its pack frees nothing on the GPU):
//   without offload: at bwd r6, x r1..r6 g6 g5 = 9 (the peak; at bwd r5: x r1..r6 g5 g4 = 9 too).
//   with offload:    forward: at r5's op x r1..r5 = 6, at r6's op x r1..r6 = 7; bwd r6: x r2..r6 g6 g5 = 8 (the
//                    peak); bwd r5: x r6 g5 R5 g4 = 5; bwd r4: x r6 R5 R4 g4 g3 = 6, ..., bwd Mul: x r6 R1 X' ga
//                    gw = 6.
TEST(ActivationOffload, SevenPacksOfOneKibHandWorked) {
  const TrainingResult plain = build_training_program(relu_chain(256), run(false));
  const TrainingResult off = build_training_program(relu_chain(256), run(true));
  EXPECT_EQ(plain.offloaded_host_bytes, 0u);
  EXPECT_EQ(off.offloaded_host_bytes, 7168u);
  EXPECT_EQ(peak_live_bytes(plain.program).bytes, 9u * 1024);
  EXPECT_EQ(peak_live_bytes(off.program).bytes, 8u * 1024);
  const Program& p = off.program;
  // The forward stash's releases.
  EXPECT_EQ(last_reader(p, buffer_named(p, "x")), step_named(p, "/Relu_5"));
  EXPECT_EQ(last_reader(p, buffer_named(p, "r1")), step_named(p, "/Relu_6"));
  EXPECT_EQ(last_reader(p, buffer_named(p, "r2")), step_named(p, "backward:/Relu_6"));
  // r6 was still stashed at its unpack: no copy. r5's copy is dropped after the next node, r4's backward.
  EXPECT_LT(buffer_named(p, "offload_restore:r6"), 0);
  const int32_t r5 = buffer_named(p, "offload_restore:r5");
  ASSERT_GE(r5, 0);
  EXPECT_EQ(last_reader(p, r5), step_named(p, "backward:/Relu_4"));
  EXPECT_GE(buffer_named(p, "offload_restore:x"), 0);
}

// n = 255: 1020 bytes each, under min_offload_size (1024): nothing moves, the program is the plain one.
TEST(ActivationOffload, TensorsUnder1024BytesStay) {
  const TrainingResult plain = build_training_program(relu_chain(255), run(false));
  const TrainingResult off = build_training_program(relu_chain(255), run(true));
  EXPECT_EQ(off.offloaded_host_bytes, 0u);
  EXPECT_EQ(peak_live_bytes(off.program).bytes, peak_live_bytes(plain.program).bytes);
  EXPECT_EQ(peak_live_bytes(off.program).bytes, 9u * 1020);
  EXPECT_LT(buffer_named(off.program, "offload_restore:r5"), 0);
}

}  // namespace
}  // namespace memplan
