// The memplan-validate command: exit codes 0 / 1 / 2 / 3, both tensors named, deterministic JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "plan_builder.h"
#include "validate/devices.h"

namespace memplan::validate {
namespace {

using ::testing::HasSubstr;
using testing::plans_dir;

struct CommandRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

CommandRun run_validate(const std::string& args) {
  const std::string command = testing::validate_binary() + " " + args + " 2>&1";
  CommandRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) run.output.append(buf.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(ValidateCliTest, ValidPlanExitsZero) {
  const CommandRun run = run_validate(plans_dir() + "/valid.json --device cpu");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("arena: predicted 5120 B"));
  EXPECT_THAT(run.output, HasSubstr("malloc: predicted 4864 B"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("OVERLAP")));
}

TEST(ValidateCliTest, OverlapExitsOneAndNamesBothTensors) {
  const CommandRun run = run_validate(plans_dir() + "/overlap.json --device cpu --mode arena");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("'x' was overwritten by 'y'"));
}

TEST(ValidateCliTest, JsonReportsTheOverlapAndIsDeterministic) {
  const std::string args = plans_dir() + "/overlap.json --device cpu --json";
  const CommandRun first = run_validate(args), second = run_validate(args);
  ASSERT_EQ(first.exit_code, 1) << first.output;
  EXPECT_EQ(first.output, second.output);
  const auto doc = nlohmann::json::parse(first.output);
  EXPECT_EQ(doc["schema"], "memplan.validate/1");
  EXPECT_EQ(doc["ok"], false);
  ASSERT_EQ(doc["modes"].size(), 2u);  // arena and malloc; the pool needs CUDA
  EXPECT_EQ(doc["modes"][0]["mode"], "arena");
  EXPECT_EQ(doc["modes"][0]["overlaps"][0]["victim"], "x");
  EXPECT_EQ(doc["modes"][0]["overlaps"][0]["culprit"], "y");
  EXPECT_TRUE(doc["modes"][1]["overlaps"].empty());
  EXPECT_EQ(doc["plan_check"]["computed_lower_bound_bytes"], 512);  // x 256 + y 256 at steps 1-2
}

TEST(ValidateCliTest, MalformedPlansExitTwoWithTheReason) {
  struct Case {
    std::string args, message;
  } cases[] = {
      {plans_dir() + "/out_of_arena.json --device cpu",
       "buffers[0] ('big'): offset 256 + bytes 300 = 556 exceeds arena_bytes 512"},
      {plans_dir() + "/truncated.json --device cpu", "not valid JSON"},
      {plans_dir() + "/no-such-plan.json --device cpu", "cannot open the plan file"},
      {plans_dir() + "/valid.json --device cpu --mode pool", "mode pool is not available on the cpu device"},
      {plans_dir() + "/valid.json --device tpu", "--device"},
      {"", "plan is required"},
  };
  for (const Case& c : cases) {
    const CommandRun run = run_validate(c.args);
    EXPECT_EQ(run.exit_code, 2) << c.args << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr(c.message)) << c.args;
    EXPECT_THAT(run.output, ::testing::Not(HasSubstr("terminate called"))) << c.args;
  }
}

TEST(ValidateCliTest, CudaWithoutAGpuFailsCleanly) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present; cuda_test.cc covers it";
  const CommandRun run = run_validate(plans_dir() + "/valid.json --device cuda");
  // Without the CUDA backend the request is bad usage (2); with it but no device, a device failure (3).
  EXPECT_EQ(run.exit_code, cuda_backend_built() ? 3 : 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("memplan-validate: error:"));
}

}  // namespace
}  // namespace memplan::validate
