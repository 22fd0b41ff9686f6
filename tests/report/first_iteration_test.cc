// The first training iteration (before the optimizer states exist) runs with the checkpoints the estimate reports.
// Under --checkpoint auto the estimate chooses them on the steady-state step; the first iteration used to search
// again on its own program and could take another set, so first_iteration_total_bytes described checkpoints the
// user was never told to set.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "report/estimate_config.h"

namespace memplan {
namespace {

TEST(FirstIteration, CheckpointAutoRunsTheStepsChosenBoundaries) {
  // gpt_train at batch 4, seq 128 on a 200 MiB budget: no set fits, and a search over the first iteration's own
  // program picks a different set from the steady state's (so this case tells the two apart).
  EstimateArgs a;
  a.model.path = std::string(MEMPLAN_ZOO_DIR) + "/gpt_train.onnx";
  a.model.batch = 4;
  a.model.dims = {"seq=128"};
  a.mode = "train";
  a.checkpoint = "auto";
  a.budget = "200MiB";
  a.top = 0;
  const ConfiguredEstimate c = estimate_model(a);
  const Estimate& e = c.estimate;
  ASSERT_FALSE(e.checkpoint_boundaries.empty());
  ASSERT_TRUE(e.first_iteration_total_bytes);

  const EstimateOptions o = to_estimate_options(a);
  TrainingOptions t = o.training;
  t.steady_state = false;
  auto first_total = [&](const TrainingResult& r) {
    return measure(r.program, runtime_model(o.execution, /*training=*/true).allocator).reserved_bytes + r.fixed_bytes;
  };
  // A search of its own (the old first iteration) chooses other boundaries here.
  const TrainingResult own = build_training_program(*c.graph, o.execution, t);
  ASSERT_NE(own.checkpoint_boundaries, e.checkpoint_boundaries);
  // The first iteration with the reported boundaries: the figure the estimate gives.
  t.checkpoint.auto_chosen = e.checkpoint_boundaries;
  const TrainingResult first = build_training_program(*c.graph, o.execution, t);
  EXPECT_EQ(first.checkpoint_boundaries, e.checkpoint_boundaries);
  EXPECT_EQ(*e.first_iteration_total_bytes, first_total(first));
  EXPECT_NE(*e.first_iteration_total_bytes, first_total(own));
}

}  // namespace
}  // namespace memplan
