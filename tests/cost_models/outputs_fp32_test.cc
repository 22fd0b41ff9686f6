// accelerate's convert_outputs_to_fp32 (--outputs-to-fp32): under its mixed precision the model's half output comes
// back as a float32 copy taken after the loss the forward computed (src/accelerate/accelerator.py prepare_model,
// utils/operations.py convert_to_fp32; v1.14.0). Every expected number is worked out by hand in the comments.
#include <gtest/gtest.h>

#include <string>

#include "cost_models/cost_model.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::decoder_head;
using testing::buffer_named;
using testing::last_reader;
using testing::live_at_step;
using testing::step_named;

// decoder_head() (graph_builder.h) under amp-bf16: the logits [2,4,8] are bfloat16, 64 elements, 128 bytes; their
// float32 copy 256.
Program step(bool free_output, bool outputs_to_fp32) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;  // no states: the update in place
  o.loss = LossKind::CrossEntropy;
  o.precision = Precision::AmpBf16;
  o.free_output = free_output;
  o.outputs_to_fp32 = outputs_to_fp32;
  return build_training_program(decoder_head(), o).program;
}

// A plain loop holds the output through backward. With the conversion the copy is taken in the step right after
// the loss, reading the bf16 logits (their last reader now) and writing the float32 copy, which the loop holds to
// the end instead. Every step before the conversion holds what it held without it; every step after holds the
// copy in place of the logits: 256 - 128 = 128 bytes more.
TEST(OutputsToFp32, TheCopyReplacesTheHalfLogitsFromTheStepAfterTheLoss) {
  const Program base = step(false, false), conv = step(false, true);
  ASSERT_EQ(conv.steps.size(), base.steps.size() + 1);
  const int32_t loss = step_named(conv, "loss:cross_entropy");
  ASSERT_GE(loss, 0);
  EXPECT_EQ(conv.steps[loss + 1].name, "convert_outputs_to_fp32");
  const int32_t logits = buffer_named(conv, "logits"), copy = buffer_named(conv, "logits:to_fp32");
  ASSERT_GE(copy, 0);
  EXPECT_EQ(conv.buffers[logits].bytes, 128u);
  EXPECT_EQ(conv.buffers[copy].bytes, 256u);
  EXPECT_FALSE(conv.buffers[logits].live_at_end);
  EXPECT_TRUE(conv.buffers[copy].live_at_end);
  EXPECT_EQ(last_reader(conv, logits), loss + 1);
  EXPECT_TRUE(base.buffers[buffer_named(base, "logits")].live_at_end);
  for (size_t s = 0; s < base.steps.size(); ++s) {
    const std::string& name = base.steps[s].name;
    EXPECT_EQ(live_at_step(conv, name), live_at_step(base, name) + (static_cast<int32_t>(s) > loss ? 128u : 0u)) << name;
  }
}

// The Trainer (--free-output) drops the outputs with compute_loss: the copy is read by nothing and lives in its own
// step only, and the logits die there. At that step, against the loss step: the loss's float32 upcast of the
// logits (256, read by nothing after the loss) and W1's bf16 autocast copy (4 x 4 x 2 = 32: the cache lives through
// the forward, and no backward needs it, x needing no grad) are gone, the copy (256) is new: 256 + 32 less, 256
// more. Every later step holds what it held without the conversion.
TEST(OutputsToFp32, UnderTheTrainerTheCopyLivesOneStep) {
  const Program base = step(true, false), conv = step(true, true);
  const int32_t copy = buffer_named(conv, "logits:to_fp32");
  ASSERT_GE(copy, 0);
  EXPECT_FALSE(conv.buffers[copy].live_at_end);
  EXPECT_EQ(last_reader(conv, copy), -1);
  EXPECT_EQ(live_at_step(conv, "convert_outputs_to_fp32"), live_at_step(conv, "loss:cross_entropy") - 256 - 32 + 256);
  for (const Step& s : base.steps) EXPECT_EQ(live_at_step(conv, s.name), live_at_step(base, s.name)) << s.name;
}

// A float32 output (--precision fp32, or an output autocast leaves float32) is returned as it is: no copy.
TEST(OutputsToFp32, AFloat32OutputIsNotCopied) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;
  o.loss = LossKind::CrossEntropy;
  o.outputs_to_fp32 = true;
  const Program p = build_training_program(decoder_head(), o).program;
  EXPECT_EQ(buffer_named(p, "logits:to_fp32"), -1);
  EXPECT_EQ(step_named(p, "convert_outputs_to_fp32"), -1);
}

}  // namespace
}  // namespace memplan
