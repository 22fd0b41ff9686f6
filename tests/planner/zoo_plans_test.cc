// The planner over every zoo model (inference and training programs) at two batch sizes: every packing
// algorithm's plan and the memory-aware schedule's plans pass the invariant checker (summarize_planning
// throws otherwise), the plan file round-trips and checks clean, and the arena meets the goal of at
// most 1.05 x the lower bound for every program.
#include <ostream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "planner/plan_json.h"
#include "planner/summary.h"
#include "zoo_programs.h"

namespace memplan {
namespace {

using ::testing::IsEmpty;

struct ZooCase {
  ZooModel model;
  int64_t batch;
};

void PrintTo(const ZooCase& c, std::ostream* os) { *os << c.model.name << " at batch " << c.batch; }

std::vector<ZooCase> zoo_cases() {
  std::vector<ZooCase> out;
  for (const ZooModel& m : zoo_models(MEMPLAN_ZOO_DIR))
    for (int64_t batch : {1, 8}) out.push_back({m, batch});
  return out;
}

class ZooPlans : public ::testing::TestWithParam<ZooCase> {};

TEST_P(ZooPlans, EveryPlanIsValidAndCloseToTheBound) {
  const Program program = zoo_program(GetParam().model, GetParam().batch);
  const PlannerSummary s = summarize_planning(program);
  EXPECT_GE(s.best_arena_bytes, s.aligned_lower_bound_bytes);
  EXPECT_LE(static_cast<double>(s.best_arena_bytes), 1.05 * static_cast<double>(s.lower_bound_bytes));
  EXPECT_LE(s.scheduled_lower_bound_bytes, s.lower_bound_bytes);

  const Plan plan = make_plan(program, GetParam().model.name);
  EXPECT_THAT(check_plan(plan), IsEmpty());
  const Plan back = plan_from_json_text(plan_to_json_text(plan));
  EXPECT_EQ(plan_to_json_text(back), plan_to_json_text(plan));
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooPlans, ::testing::ValuesIn(zoo_cases()),
                         [](const ::testing::TestParamInfo<ZooCase>& info) {
                           return info.param.model.name + "_batch" + std::to_string(info.param.batch);
                         });

}  // namespace
}  // namespace memplan
