// bitsandbytes' optimizer states (cost_models/bnb_optimizer.h), every figure by hand from
// bitsandbytes/optim/optimizer.py (Optimizer2State.init_state, Optimizer8bit.get_state_buffer, >= 0.44.0):
// 8-bit when a parameter has at least 4096 elements (uint8 states, a float32 absmax per 256 elements), float32
// below; paged (managed memory, outside the program) when it has at least 1e5 elements; two 1 KiB quantization
// maps once for the 8-bit optimizers.
#include <gtest/gtest.h>

#include "cost_models/bnb_optimizer.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using testing::buffer_named;
using testing::int_attr;
using testing::step_named;

// x[2,256] -> Gemm(W[512,256], b[512], transB) -> y[2,512]. W: 131,072 elements (8-bit, paged); b: 512 elements
// (under min_8bit_size: float32 states; under 1e5: never paged).
Graph linear() {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 256});
  const int32_t y = b.node1("Gemm", {x, b.weight("W", {512, 256}), b.weight("b", {512})}, "y", {2, 512},
                            {{"transB", int_attr(1)}});
  b.output(y);
  return b.graph();
}

TrainingResult run_bnb_optimizer(Optimizer o, Precision precision = Precision::Fp32) {
  TrainingRun r;
  r.runtime = Runtime::Ideal;
  r.optimizer = o;
  r.precision = precision;
  return build_training_program(linear(), r);
}

TEST(BitsAndBytesStates, OneParameterByHand) {
  // 8-bit, 131,072 elements: state1, state2 131,072 B each; 512 blocks of 256 -> absmax 2,048 B each.
  const std::vector<BnbState> w = bitsandbytes_states(Optimizer::AdamW8bit, 131072);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].bytes, 131072u);
  EXPECT_EQ(w[2].bytes, 2048u);
  EXPECT_FALSE(w[0].paged);
  // 4,097 elements: 17 blocks (16 full and one of 1 element) -> 68 B each.
  EXPECT_EQ(bitsandbytes_states(Optimizer::AdamW8bit, 4097)[3].bytes, 68u);
  // 4,095 elements: under min_8bit_size, two float32 states of 16,380 B.
  const std::vector<BnbState> small = bitsandbytes_states(Optimizer::PagedAdamW8bit, 4095);
  ASSERT_EQ(small.size(), 2u);
  EXPECT_EQ(small[1].bytes, 16380u);
  EXPECT_FALSE(small[1].paged);
  // Paging starts at 1e5 elements.
  EXPECT_FALSE(bitsandbytes_states(Optimizer::PagedAdamW, 99999)[0].paged);
  EXPECT_TRUE(bitsandbytes_states(Optimizer::PagedAdamW, 100000)[0].paged);
}

TEST(BitsAndBytesStates, AdamW8bitOnTheDevice) {
  // W: 131,072 x 2 + absmax 2,048 x 2 = 266,240; b: float32 2,048 x 2 = 4,096; maps 1,024 x 2 = 2,048.
  const TrainingResult r = run_bnb_optimizer(Optimizer::AdamW8bit);
  EXPECT_EQ(r.optimizer_state_bytes, 266240u + 4096u + 2048u);
  EXPECT_EQ(r.paged_state_bytes, 0u);
  EXPECT_GE(buffer_named(r.program, "state1:W"), 0);
  EXPECT_GE(buffer_named(r.program, "absmax2:W"), 0);
  EXPECT_GE(buffer_named(r.program, "qmap:udynamic"), 0);
  // The update runs in place: the step writes nothing.
  EXPECT_TRUE(r.program.steps[step_named(r.program, "optimizer:step")].writes.empty());
}

TEST(BitsAndBytesStates, PagedStatesLeaveTheProgram) {
  // PagedAdamW8bit: W's uint8 states (262,144 B) paged; on the device its absmax 4,096, b's 4,096, maps 2,048.
  const TrainingResult eight = run_bnb_optimizer(Optimizer::PagedAdamW8bit);
  EXPECT_EQ(eight.paged_state_bytes, 262144u);
  EXPECT_EQ(eight.optimizer_state_bytes, 4096u + 4096u + 2048u);
  EXPECT_EQ(buffer_named(eight.program, "state1:W"), -1);
  // PagedAdamW: W's float32 states (524,288 B each) paged; b's 2,048 x 2 on the device; no maps.
  const TrainingResult full = run_bnb_optimizer(Optimizer::PagedAdamW);
  EXPECT_EQ(full.paged_state_bytes, 1048576u);
  EXPECT_EQ(full.optimizer_state_bytes, 4096u);
}

TEST(BitsAndBytesStates, ThirtyTwoBitStatesAreFloat32UnderBf16) {
  // --precision bf16: torch's AdamW keeps b's states in bf16 (zeros_like: 1,024 B each); bitsandbytes in float32.
  EXPECT_EQ(run_bnb_optimizer(Optimizer::AdamW8bit, Precision::Bf16).optimizer_state_bytes, 266240u + 4096u + 2048u);
  TrainingRun torch_adamw;
  torch_adamw.runtime = Runtime::Ideal;
  torch_adamw.optimizer = Optimizer::AdamW;
  torch_adamw.precision = Precision::Bf16;
  EXPECT_EQ(build_training_program(linear(), torch_adamw).optimizer_state_bytes, 2u * (262144u + 1024u));
}

}  // namespace
}  // namespace memplan
