// The cuDNN convolution workspace range (report/cudnn_workspace.h): which steps call cuDNN, and the least
// allocated at one of them (the upper end on a card is its usable memory minus that).
#include <gtest/gtest.h>

#include "onnx_import/import.h"
#include "report/cudnn_workspace.h"
#include "report/estimate.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

Program steps_with_ops(const std::vector<std::string>& ops) {
  Program p;
  for (const std::string& op : ops) {
    Step s;
    s.name = op;
    s.op = op;
    p.steps.push_back(s);
  }
  return p;
}

TEST(CudnnWorkspace, ConvolutionStepsAndTheLeastAllocatedAmongThem) {
  // Conv forward (300 allocated), a Relu (50: not a cuDNN call), a ConvTranspose (200), the conv's backward (250).
  const Program p = steps_with_ops({"Conv", "Relu", "ConvTranspose", "Conv_backward", "MatMul"});
  const auto r = cudnn_workspace_range(p, {300, 50, 200, 250, 10});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->convolution_steps, 3);
  EXPECT_EQ(r->counted_bytes, 0u);
  EXPECT_EQ(r->least_allocated_at_convolution, 200u);
  EXPECT_FALSE(cudnn_workspace_range(steps_with_ops({"MatMul", "Relu"}), {10, 20}));
}

// At batch 2 (and 16 positions for the GPT).
Graph batch2(const std::string& name) {
  return testing::zoo_graph(name, 2, name.rfind("gpt", 0) == 0 ? std::optional<int64_t>(16) : std::nullopt);
}

// torchvision's resnet18 has 20 Conv2d layers (conv1, 16 in the 8 basic blocks, 3 downsample 1x1): 20 cuDNN
// steps in inference; in training each also has a backward step (conv1's computes only the weight grad).
TEST(CudnnWorkspace, Resnet18CallsCudnnAtEachConvolution) {
  EstimateOptions o;
  o.execution.runtime = Runtime::PyTorch;
  const Estimate inference = estimate_graph(batch2("resnet18"), o);
  ASSERT_TRUE(inference.cudnn_workspace);
  EXPECT_EQ(inference.cudnn_workspace->convolution_steps, 20);
  EXPECT_LE(inference.cudnn_workspace->least_allocated_at_convolution, inference.allocated_bytes);
  o.mode = Mode::Training;
  o.training.loss = LossKind::CrossEntropy;
  const Estimate training = estimate_graph(batch2("resnet18_train"), o);
  ASSERT_TRUE(training.cudnn_workspace);
  EXPECT_EQ(training.cudnn_workspace->convolution_steps, 40);
  // A model without convolutions, or a runtime without cuDNN modelled, has no range.
  o.mode = Mode::Inference;
  EXPECT_FALSE(estimate_graph(batch2("gpt_tiny"), o).cudnn_workspace);
  o.execution.runtime = Runtime::Ideal;
  EXPECT_FALSE(estimate_graph(batch2("resnet18"), o).cudnn_workspace);
}

}  // namespace
}  // namespace memplan
