// --cudnn-benchmark (report/cudnn_workspace.h): the decision counts no cuDNN workspace either way; with the
// benchmark, fit and check say what it may take at the answer and how much more the first iteration has free at a
// convolution than later ones. Expected numbers are derived by hand in the comments, from the caching allocator's
// published rules (c10/cuda/CUDACachingAllocator.cpp: 512-byte rounding, 2 MiB small-pool segments for requests
// up to 1 MiB), never read back from the code under test.
#include <gtest/gtest.h>

#include "onnx_import/import.h"
#include "report/cudnn_workspace.h"
#include "report/estimate.h"
#include "report/estimate_format.h"
#include "report/fit.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

Program named_steps(const std::vector<std::pair<std::string, std::string>>& name_op) {
  Program p;
  for (const auto& [name, op] : name_op) {
    Step s;
    s.name = name;
    s.op = op;
    p.steps.push_back(s);
  }
  return p;
}

TEST(CudnnBenchmark, FirstIterationExtraFreeIsTheLargestGrowthAtAConvolutionOfTheSameName) {
  // Steady: c1 (Conv) 300 allocated, r (Relu) 900, b1 (Conv_backward) 250, c2 (Conv) 100.
  // First:  c1 200, b1 240, c2 150 (more in use than later: no extra there), and a step the steady one lacks.
  const Program steady = named_steps({{"c1", "Conv"}, {"r", "Relu"}, {"b1", "Conv_backward"}, {"c2", "Conv"}});
  const Program first = named_steps({{"c1", "Conv"}, {"opt", "Adam"}, {"b1", "Conv_backward"}, {"c2", "Conv"}});
  const std::vector<uint64_t> steady_alloc{300, 900, 250, 100}, first_alloc{200, 5, 240, 150};
  const auto r = cudnn_workspace_range(steady, steady_alloc, /*benchmark=*/true, {&first, &first_alloc});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->convolution_steps, 3);
  EXPECT_EQ(r->least_allocated_at_convolution, 100u);
  ASSERT_TRUE(r->first_iteration_extra_free);
  EXPECT_EQ(*r->first_iteration_extra_free, 100u);  // c1: 300 - 200 (b1: 10; c2: none, 100 < 150)
  EXPECT_EQ(r->first_iteration_extra_free_at, "c1");
  EXPECT_NE(cudnn_workspace_note(*r).find("100 bytes more free at a convolution (c1)"), std::string::npos);

  // Without benchmark the plan is not chosen by timing: nothing is compared, and the note says which engines run.
  const auto off = cudnn_workspace_range(steady, steady_alloc, /*benchmark=*/false, {&first, &first_alloc});
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->first_iteration_extra_free);
  EXPECT_NE(cudnn_workspace_note(*off).find("--cudnn-benchmark off"), std::string::npos);
  // Inference (no first iteration to compare): benchmark on, nothing compared.
  EXPECT_FALSE(cudnn_workspace_range(steady, steady_alloc, true)->first_iteration_extra_free);
}

// x [N,1,16,16] fp32 -> Conv 3x3, pad 1, weight [1,1,3,3] -> y [N,1,16,16], the graph's output.
Graph tiny_convolution(int64_t n) {
  testing::GraphBuilder b;
  const int32_t x = b.input("x", {n, 1, 16, 16});
  const int32_t w = b.weight("w", {1, 1, 3, 3});
  const int32_t y = b.node1("Conv", {x, w}, "y", {n, 1, 16, 16},
                            {{"kernel_shape", testing::ints_attr({3, 3})}, {"pads", testing::ints_attr({1, 1, 1, 1})}});
  b.output(y);
  return b.graph();
}

EstimateOptions pytorch_inference(bool benchmark) {
  EstimateOptions o;
  o.execution.runtime = Runtime::PyTorch;
  o.cudnn_benchmark = benchmark;
  return o;
}

TEST(CudnnBenchmark, TinyConvolutionFitsWithItsMarginAndTheBenchmarksReachDerivedByHand) {
  // By hand, on PyTorch's allocator: w is 36 B -> a 512 B block in a new 2 MiB small-pool segment; x and y are
  // 1,024 N B each, rounded to 512 B, small-pool blocks while N <= 1,024 (1 MiB). All three share the segment
  // while 512 + 2 x 1,024 N <= 2,097,152, i.e. N <= 1,023; at N = 1,024 y needs a second 2 MiB segment.
  // So the step requires 2 MiB (2,097,152 B) up to N = 1,023 and 4 MiB at N = 1,024: on a 3 MiB budget the
  // largest batch is 1,023, with a margin of 3,145,728 - 2,097,152 = 1,048,576 B.
  constexpr uint64_t budget = 3ull << 20;
  const EstimateOptions on = pytorch_inference(true);
  auto required = [&](int64_t n) { return estimate_graph(tiny_convolution(n), on).required_bytes; };
  EXPECT_EQ(required(1023), 2097152u);
  EXPECT_EQ(required(1024), 4194304u);
  const FitResult r = fit_search(required, budget, 1, 4096);
  ASSERT_TRUE(r.any_fits);
  EXPECT_EQ(r.value, 1023);

  FitAnswer a;
  a.model = "tiny";
  a.search = "batch";
  a.budget_bytes = budget;
  a.max_value = 4096;
  a.result = r;
  EstimateOptions at_budget = on;
  at_budget.device_budget = budget;
  a.at_value = estimate_graph(tiny_convolution(1023), at_budget);
  EXPECT_EQ(fit_margin(a), 1048576u);

  // At the convolution 512 + 1,047,552 (x: 1,024 x 1,023 B) + 1,047,552 (y) = 2,095,616 B are allocated: a plan
  // the benchmark times there may take the rest of the budget, 3,145,728 - 2,095,616 = 1,050,112 B. The decision
  // counts none of it (PyTorch never fails the step on a workspace).
  ASSERT_TRUE(a.at_value->cudnn_workspace);
  EXPECT_EQ(a.at_value->cudnn_workspace->least_allocated_at_convolution, 2095616u);
  const nlohmann::ordered_json j = fit_to_json(a);
  EXPECT_EQ(j["margin_bytes"], 1048576u);
  EXPECT_EQ(j["cudnn_workspace"]["benchmark"], true);
  EXPECT_EQ(j["cudnn_workspace"]["decision_bytes"], 0u);
  EXPECT_EQ(j["cudnn_workspace"]["least_free_at_convolution_bytes"], 1050112u);
  EXPECT_FALSE(j["cudnn_workspace"].contains("first_iteration_extra_free_bytes"));  // inference
  const std::string text = fit_to_text(a);
  EXPECT_NE(text.find("margin: 1.00 MiB (1,048,576 B)"), std::string::npos) << text;
  EXPECT_NE(text.find("1,050,112 B"), std::string::npos) << text;

  // --cudnn-benchmark off: the same answer and margin (the decision never counted the workspace); no reach.
  EXPECT_EQ(estimate_graph(tiny_convolution(1023), pytorch_inference(false)).required_bytes, 2097152u);
  EstimateOptions off = pytorch_inference(false);
  off.device_budget = budget;
  a.at_value = estimate_graph(tiny_convolution(1023), off);
  const nlohmann::ordered_json k = fit_to_json(a);
  EXPECT_EQ(k["margin_bytes"], 1048576u);
  EXPECT_EQ(k["cudnn_workspace"]["benchmark"], false);
  EXPECT_FALSE(k["cudnn_workspace"].contains("least_free_at_convolution_bytes"));
}

TEST(CudnnBenchmark, Resnet18TrainingsFirstIterationHasAtLeastAdamsStatesMoreFree) {
  // torch.optim creates AdamW's exp_avg and exp_avg_sq at the first step(): the first iteration's forward runs
  // without them, later forwards with them. torchvision's resnet18 has 11,689,512 parameters (its published
  // count), so at the first convolution at least 2 x 4 x 11,689,512 = 93,516,096 B more are in use later.
  Bindings b;
  b.batch = 2;
  const Graph g = import_model(std::string(MEMPLAN_ZOO_DIR) + "/resnet18_train.onnx", b);
  EstimateOptions o;
  o.execution.runtime = Runtime::PyTorch;
  o.mode = Mode::Training;
  o.training.loss = LossKind::CrossEntropy;
  o.training.optimizer = Optimizer::AdamW;
  const Estimate e = estimate_graph(g, o);
  ASSERT_TRUE(e.cudnn_workspace);
  ASSERT_TRUE(e.cudnn_workspace->first_iteration_extra_free);
  EXPECT_GE(*e.cudnn_workspace->first_iteration_extra_free, 93516096u);
  o.cudnn_benchmark = false;
  EXPECT_FALSE(estimate_graph(g, o).cudnn_workspace->first_iteration_extra_free);
  EXPECT_EQ(estimate_graph(g, o).required_bytes, e.required_bytes);  // the decision is the same either way
}

}  // namespace
}  // namespace memplan
