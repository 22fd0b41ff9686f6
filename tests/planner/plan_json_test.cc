#include "planner/plan_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "program_builder.h"

namespace memplan {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::kInput;
using testing::kOutput;
using testing::kResident;
using testing::ProgramBuilder;

// x (input, 100 B) -> s0 -> a (300 B) -> s1 -> y (output, 100 B); w resident (64 B) read by s0.
Program tiny() {
  ProgramBuilder p;
  const int32_t x = p.buffer("x", 100, kInput);
  const int32_t w = p.buffer("w", 64, kResident);
  const int32_t a = p.buffer("a", 300);
  const int32_t y = p.buffer("y", 100, kOutput);
  p.step("s0", {x, w}, {a});
  p.step("s1", {a}, {y});
  return p.program();
}

TEST(PlanJson, WritesTheDocumentedSchemaInFixedKeyOrder) {
  // Live: s0 x 100 + a 300 = 400; s1 a 300 + y 100 = 400: bound 400.
  // Aligned to 256: x 256, a 512, y 256. Greedy by size: a -> 0; x [0,0] meets a -> 512; y [1,1] meets a
  // -> 512. Arena 768 (every algorithm gives 768, so the first one is kept).
  const Plan plan = make_plan(tiny(), "tiny", 256);
  const std::string expected = R"({
  "schema": "memplan.plan/1",
  "model": "tiny",
  "arena_bytes": 768,
  "lower_bound_bytes": 400,
  "alignment": 256,
  "packing_algorithm": "greedy_by_size",
  "schedule": [
    "s0",
    "s1"
  ],
  "buffers": [
    {
      "tensor": "x",
      "bytes": 100,
      "offset": 512,
      "first": 0,
      "last": 0
    },
    {
      "tensor": "a",
      "bytes": 300,
      "offset": 0,
      "first": 0,
      "last": 1
    },
    {
      "tensor": "y",
      "bytes": 100,
      "offset": 512,
      "first": 1,
      "last": 1
    }
  ],
  "resident": [
    {
      "tensor": "w",
      "bytes": 64
    }
  ]
}
)";
  EXPECT_EQ(plan_to_json_text(plan), expected);
}

TEST(PlanJson, RoundTripsThroughTheReader) {
  const Plan plan = make_plan(tiny(), "tiny", 256);
  const Plan back = plan_from_json_text(plan_to_json_text(plan));
  EXPECT_EQ(plan_to_json_text(back), plan_to_json_text(plan));
  EXPECT_THAT(check_plan(back), IsEmpty());
}

TEST(PlanJson, ReaderRejectsAWrongSchema) {
  nlohmann::json j = nlohmann::json::parse(plan_to_json_text(make_plan(tiny(), "tiny")));
  j["schema"] = "memplan.plan/2";
  try {
    plan_from_json(j);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("memplan.plan/2"));
  }
}

TEST(PlanJson, ReaderRejectsARangeOutsideTheSchedule) {
  nlohmann::json j = nlohmann::json::parse(plan_to_json_text(make_plan(tiny(), "tiny")));
  j["buffers"][1]["last"] = 2;
  try {
    plan_from_json(j);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'a'"));
  }
}

TEST(PlanJson, ReaderRejectsMissingKeysBadTypesAndBadJson) {
  nlohmann::json j = nlohmann::json::parse(plan_to_json_text(make_plan(tiny(), "tiny")));
  nlohmann::json no_arena = j;
  no_arena.erase("arena_bytes");
  EXPECT_THROW(plan_from_json(no_arena), InputError);
  nlohmann::json negative = j;
  negative["buffers"][0]["offset"] = -1;
  EXPECT_THROW(plan_from_json(negative), InputError);
  nlohmann::json text_bytes = j;
  text_bytes["buffers"][0]["bytes"] = "100";
  EXPECT_THROW(plan_from_json(text_bytes), InputError);
  EXPECT_THROW(plan_from_json_text("{\"schema\": "), InputError);
  EXPECT_THROW(plan_from_json_text("[]"), InputError);
}

TEST(PlanJson, RepeatedNamesAreMadeUniqueAndTheReaderRejectsDuplicates) {
  // Three buffers are called "ws" and one "ws#2". The first repeat of "ws" would be "ws#2", which is
  // taken, so it becomes "ws#3"; the next repeat continues from there: "ws#4".
  ProgramBuilder p;
  const int32_t a = p.buffer("ws", 8), b = p.buffer("ws#2", 8), c = p.buffer("ws", 8), d = p.buffer("ws", 8);
  p.step("s0", {}, {a, b, c, d});
  const Plan plan = make_plan(p.program(), "m", 1);
  ASSERT_EQ(plan.buffers.size(), 4u);
  EXPECT_EQ(plan.buffers[0].tensor, "ws");
  EXPECT_EQ(plan.buffers[1].tensor, "ws#2");
  EXPECT_EQ(plan.buffers[2].tensor, "ws#3");
  EXPECT_EQ(plan.buffers[3].tensor, "ws#4");
  nlohmann::json j = plan_to_json(plan);
  j["buffers"][3]["tensor"] = "ws";
  EXPECT_THROW(plan_from_json(j), InputError);
}

TEST(PlanJson, CheckerNamesOverlappingTensorsOfAHandEditedPlan) {
  Plan plan = make_plan(tiny(), "tiny", 256);
  plan.buffers[0].offset = 256;  // x now overlaps a [0,512) at step 0
  const auto v = check_plan(plan);
  ASSERT_FALSE(v.empty());
  EXPECT_THAT(v[0].message, HasSubstr("'x'"));
  EXPECT_THAT(v[0].message, HasSubstr("'a'"));
}

}  // namespace
}  // namespace memplan
