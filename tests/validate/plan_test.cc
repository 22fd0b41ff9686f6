// Reading and checking plan.json: what a well-formed plan yields, and one clear InputError per defect.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "onnx_import/errors.h"
#include "plan_builder.h"
#include "validate/plan.h"

namespace memplan::validate {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json base_plan() {
  return json::parse(R"({
    "schema": "memplan.plan/1", "model": "m", "arena_bytes": 1024, "lower_bound_bytes": 768, "alignment": 64,
    "schedule": ["s0", "s1", "s2", "s3"],
    "buffers": [
      {"tensor": "x", "bytes": 256, "offset": 0,   "first": 0, "last": 1},
      {"tensor": "y", "bytes": 512, "offset": 256, "first": 1, "last": 2},
      {"tensor": "z", "bytes": 250, "offset": 0,   "first": 2, "last": 3}],
    "resident": [{"tensor": "w", "bytes": 4096}]})");
}

TEST(PlanTest, ReadsEveryField) {
  const Plan plan = parse_plan(base_plan(), "p.json");
  EXPECT_EQ(plan.model, "m");
  EXPECT_EQ(plan.arena_bytes, 1024u);
  EXPECT_EQ(plan.alignment, 64u);
  ASSERT_EQ(plan.buffers.size(), 3u);
  EXPECT_EQ(plan.buffers[1].tensor, "y");
  EXPECT_EQ(plan.buffers[1].offset, 256u);
  EXPECT_EQ(plan.buffers[1].first, 1u);
  EXPECT_EQ(plan.buffers[1].last, 2u);
  EXPECT_EQ(resident_bytes(plan), 4096u);
}

TEST(PlanTest, LowerBoundIsPeakOfInclusiveLiveBytes) {
  // By hand: step 0 {x} 256; step 1 {x, y} 768; step 2 {y, z} 762; step 3 {z} 250. Peak 768.
  EXPECT_EQ(live_bytes_lower_bound(parse_plan(base_plan(), "p.json")), 768u);
}

TEST(PlanTest, LowerBoundCountsABufferOnItsLastStep) {
  // a lives [0, 1], b [1, 1]: at step 1 both are live (inclusive), 100 + 30 = 130.
  json doc = base_plan();
  doc["schedule"] = {"s0", "s1"};
  doc["buffers"] = json::parse(R"([{"tensor": "a", "bytes": 100, "offset": 0, "first": 0, "last": 1},
                                   {"tensor": "b", "bytes": 30, "offset": 128, "first": 1, "last": 1}])");
  EXPECT_EQ(live_bytes_lower_bound(parse_plan(doc, "p.json")), 130u);
}

TEST(PlanTest, ResidentAndModelAndAlignmentAreOptional) {
  json doc = base_plan();
  doc.erase("resident");
  doc.erase("model");
  doc.erase("alignment");
  const Plan plan = parse_plan(doc, "p.json");
  EXPECT_EQ(resident_bytes(plan), 0u);
  EXPECT_EQ(plan.alignment, 0u);
}

struct Defect {
  const char* name;
  const char* json_pointer;  // where to change the base plan
  const char* new_value;     // JSON text; "REMOVE" deletes the member
  const char* message;       // what the error must say
  friend void PrintTo(const Defect& d, std::ostream* os) { *os << d.name; }
};

class PlanDefectTest : public ::testing::TestWithParam<Defect> {};

TEST_P(PlanDefectTest, IsRejectedWithAClearMessage) {
  const Defect& d = GetParam();
  json doc = base_plan();
  const json::json_pointer ptr(d.json_pointer);
  if (std::string(d.new_value) == "REMOVE") doc[ptr.parent_pointer()].erase(ptr.back());
  else doc[ptr] = json::parse(d.new_value);
  try {
    parse_plan(doc, "p.json");
    FAIL() << "accepted a plan with " << d.name;
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("p.json: "));
    EXPECT_THAT(e.what(), HasSubstr(d.message));
    EXPECT_EQ(e.exit_code(), 2);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Defects, PlanDefectTest,
    ::testing::Values(
        Defect{"wrong_schema", "/schema", R"("memplan.plan/2")", "this harness reads \"memplan.plan/1\""},
        Defect{"no_arena", "/arena_bytes", "REMOVE", "has no \"arena_bytes\""},
        Defect{"negative_bytes", "/buffers/0/bytes", "-4", "buffers[0] ('x').bytes must be a non-negative integer"},
        Defect{"fractional_offset", "/buffers/1/offset", "2.5", "buffers[1] ('y').offset must be a non-negative"},
        Defect{"first_after_last", "/buffers/1/first", "3", "buffers[1] ('y'): first step 3 is after last step 2"},
        Defect{"step_out_of_range", "/buffers/2/last", "4",
               "buffers[2] ('z'): last step 4 is outside the schedule of 4"},
        Defect{"beyond_arena", "/buffers/1/offset", "768", "768 + bytes 512 = 1280 exceeds arena_bytes 1024"},
        Defect{"offset_overflow", "/buffers/1/offset", "18446744073709551615", "offset + bytes overflows 64 bits"},
        Defect{"misaligned", "/buffers/1/offset", "260", "offset 260 is not a multiple of the plan's alignment 64"},
        Defect{"tensor_not_string", "/buffers/0/tensor", "7", "buffers[0].tensor must be a string"},
        Defect{"schedule_not_array", "/schedule", R"("s0")", "schedule must be an array"},
        Defect{"buffer_not_object", "/buffers/0", "[1, 2]", "buffers[0] must be an object"},
        Defect{"resident_without_bytes", "/resident/0/bytes", "REMOVE", "resident[0] ('w') has no \"bytes\""}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PlanTest, RepeatedTensorNamesAreAllowed) {
  // docs/plan-json.md: names are not unique (workspaces share made-up names); indices are the identity.
  json doc = base_plan();
  doc["buffers"][2]["tensor"] = "x";
  EXPECT_EQ(parse_plan(doc, "p.json").buffers[2].tensor, "x");
}

TEST(PlanTest, UnreadableAndInvalidFilesAreInputErrors) {
  EXPECT_THROW(load_plan(testing::plans_dir() + "/does-not-exist.json"), InputError);
  try {
    load_plan(testing::plans_dir() + "/truncated.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("truncated.json: not valid JSON"));
  }
}

}  // namespace
}  // namespace memplan::validate
