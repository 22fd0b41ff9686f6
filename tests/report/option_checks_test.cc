// validate_options (report/option_checks.h): each value checked once by its schema row, each rule of a command's own
// options written once (command_rules) and reached by every command it names, and the combination matrix's
// features reading the choice tables (report/option_choices.h), so that a renamed choice cannot leave a feature
// that no value turns on.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "onnx_import/errors.h"
#include "report/estimate_config.h"
#include "report/option_checks.h"

namespace memplan {
namespace {

const OptionSpec& row_of(const std::string& flag, Command command) {
  for (const OptionSpec& r : option_schema())
    if (r.applies_to(command) && r.message_name() == flag) return r;
  throw std::runtime_error("no row " + flag);
}

std::string refusal_for(const CommandArgs& args, Command command, const std::vector<const OptionSpec*>& given = {}) {
  try {
    validate_options(args, command, given);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A value given at its default (--micro-batches 0) is checked; a changed one is checked whether given or not; an
// untouched default is not; and none twice, though the CLI names it as given and it differs from its default.
TEST(OptionChecks, EachGivenOrChangedValueIsCheckedOnce) {
  CommandArgs a;
  a.estimate.mode = "train";
  a.estimate.grad_accum = 4;
  const OptionSpec& rank = row_of("--micro-batches", kEstimate);
  const OptionSpec& accum = row_of("--grad-accum", kEstimate);
  const OptionSpec& mode = row_of("--mode", kEstimate);
  const std::vector<const OptionSpec*> rows = rows_to_check(a, kEstimate, {&rank, &accum, &mode});
  std::set<const OptionSpec*> seen;
  for (const OptionSpec* r : rows) EXPECT_TRUE(seen.insert(r).second) << r->flag << " is checked twice";
  EXPECT_EQ(seen, (std::set<const OptionSpec*>{&rank, &accum, &mode}));
  // Not given: the changed values only (what a library caller's CommandArgs shows).
  EXPECT_EQ(rows_to_check(a, kEstimate), (std::vector<const OptionSpec*>{&mode, &accum}));

  EXPECT_EQ(refusal_for(a, kEstimate, {&rank}), "--micro-batches 0: must be at least 1");
  EXPECT_EQ(refusal_for(a, kEstimate), "");
}

// fit's and serve's ranges are their rows' (0 <= headroom <= 99, integers >= 1), said by the row's message.
TEST(OptionChecks, FitAndServeRangesAreTheRows) {
  struct Case {
    Command command;
    void (*set)(CommandArgs&);
    std::string message;
  };
  const std::vector<Case> cases = {
      {kFit, [](CommandArgs& a) { a.fit.headroom_percent = 150; }, "--headroom 150: expected a number in [0, 99]"},
      {kFit, [](CommandArgs& a) { a.fit.global_batch = -1; }, "--global-batch -1: must be at least 1"},
      {kFit, [](CommandArgs& a) { a.fit.max_value = 0; }, "--max 0: must be at least 1"},
      {kServe, [](CommandArgs& a) { a.serve.context = 8, a.serve.block_size = 0; }, "--block-size 0: must be at least 1"},
      {kServe, [](CommandArgs& a) { a.serve.context = 8, a.serve.max_batched_tokens = -1; },
       "--max-batched-tokens -1: must be at least 1"},
      {kServe, [](CommandArgs& a) { a.serve.context = 8, a.serve.headroom_percent = -1; },
       "--headroom -1: expected a number in [0, 99]"},
      {kServe, [](CommandArgs& a) { a.serve.context = -3; }, "--context -3: must be at least 1"},
      {kServe, [](CommandArgs& a) { a.serve.engine = "eager"; },
       "serve --engine eager needs --context N: the tokens of one sequence (prompt and generated)"},
      {kServe, [](CommandArgs&) {}, ""},  // vllm: the model's position limit, or an error naming the model
      {kServe, [](CommandArgs& a) { a.serve.gpu_memory_utilization = 1.5; },
       "--gpu-memory-utilization 1.5: expected a number in [0, 1]"},
      {kServe, [](CommandArgs& a) { a.serve.gpu_memory_utilization = 0; },
       "--gpu-memory-utilization 0: vLLM needs more than 0 (at most 1)"},
      {kServe, [](CommandArgs& a) { a.serve.max_num_seqs = -1; }, "--max-num-seqs -1: must be at least 1"},
      {kCheck, [](CommandArgs& a) { a.max_increase_percent = -1; }, "--max-increase -1: must be at least 0"},
      {kCheck, [](CommandArgs& a) { a.metric = "peak"; }, "--metric peak: expected one of total|allocated|reserved|device"},
      {kCheck, [](CommandArgs& a) { a.metric = "device"; },
       "--metric device chooses what --baseline compares and --write-baseline records: give one"},
      {kCheck, [](CommandArgs& a) { a.metric = "allocated", a.baseline = "b.json", a.estimate.runtime = "ideal"; },
       "--metric allocated with --runtime ideal: the ideal runtime has no allocator and reports total only "
       "(--runtime pytorch or onnxruntime reports allocated, reserved and device)"},
      {kCheck, [](CommandArgs& a) { a.metric = "reserved", a.write_baseline = "b.json"; }, ""},
  };
  for (const Case& c : cases) {
    CommandArgs a;
    c.set(a);
    EXPECT_EQ(refusal_for(a, c.command), c.message);
  }
}

// One rule, reached by fit and serve (and so by both front ends), and by no command without --memory.
TEST(OptionChecks, GpuAndMemoryExcludeEachOtherInFitAndServe) {
  CommandArgs a;
  a.estimate.gpu = "T4";
  a.memory = "1GiB";
  a.serve.context = 8;
  for (Command c : {kFit, kServe}) EXPECT_EQ(refusal_for(a, c), "--gpu and --memory exclude each other: give one budget");
  EXPECT_EQ(refusal_for(a, kEstimate), "");  // estimate has no --memory: its rows never set it
  int rules = 0;
  for (const CommandRule& r : command_rules())
    if (r.rule.find("--gpu and --memory") != std::string::npos) {
      ++rules;
      EXPECT_EQ(r.commands, uint32_t{kFit | kServe});
    }
  EXPECT_EQ(rules, 1);
  a.memory.clear();
  EXPECT_EQ(refusal_for(a, kFit), "");
  a.estimate.gpu.clear();
  a.estimate.arch = "sm80";
  for (Command c : {kFit, kServe})
    EXPECT_NE(refusal_for(a, c).find("--arch sm80: the catalog table uses each GPU's own architecture"), std::string::npos);
  a.memory = "1GiB";
  EXPECT_EQ(refusal_for(a, kFit), "");
}

// Every feature of a Choice option is turned on by some choice of its row and off by the default, and the value its
// messages say ("--shard fsdp", "--dtype fp16/bf16") names choices of that row: the features read the tables.
TEST(OptionChecks, FeaturesOfChoicesNameTheRowsChoices) {
  int checked = 0;
  for (const Feature& f : features()) {
    const OptionSpec* row = nullptr;
    for (const OptionSpec& r : option_schema())
      if (r.applies_to(kEstimate) && r.message_name() == f.option) row = &r;
    ASSERT_TRUE(row) << f.option;
    if (row->kind != OptionKind::Choice) continue;
    ++checked;
    EXPECT_FALSE(f.active(EstimateArgs{})) << f.name << " is on by default";
    std::vector<std::string> on;
    for (const std::string& choice : row->choices) {
      CommandArgs a;
      std::get<std::string& (*)(CommandArgs&)>(row->field)(a) = choice;
      if (f.active(a.estimate)) on.push_back(choice);
    }
    EXPECT_FALSE(on.empty()) << f.name << ": no choice of " << f.option << " turns it on";
    // The value is the flag, a space, and the choices that turn it on, joined by "/".
    std::string said = f.value.substr(f.option.size() + 1);
    std::vector<std::string> named;
    for (size_t at = 0; at <= said.size();) {
      const size_t slash = std::min(said.find('/', at), said.size());
      named.push_back(said.substr(at, slash - at));
      at = slash + 1;
    }
    for (const std::string& n : named)
      EXPECT_NE(std::find(on.begin(), on.end(), n), on.end()) << f.value << ": " << n << " does not turn it on";
  }
  EXPECT_GE(checked, 15);
}

// --loss chunked-ce:N is a choice that carries a count: the row accepts NAME:<integer >= 1> and refuses anything
// else after the colon with one message, and the count reaches the training options.
TEST(OptionChecks, ACountedChoiceTakesAnIntegerOfAtLeastOne) {
  auto refusal = [](const std::string& loss) {
    CommandArgs a;
    a.estimate.mode = "train";
    a.estimate.loss = loss;
    return refusal_for(a, kEstimate);
  };
  EXPECT_EQ(refusal("chunked-ce:8"), "");
  EXPECT_EQ(refusal("fused-linear-ce"), "");
  for (const char* bad : {"chunked-ce:0", "chunked-ce:N", "chunked-ce:", "chunked-ce:3x", "chunked-ce:-2"})
    EXPECT_EQ(refusal(bad), std::string("--loss ") + bad + ": expected chunked-ce:N with N an integer >= 1");
  EXPECT_EQ(refusal("chunked-ce-tokens:128"), "");
  EXPECT_EQ(refusal("chunked-ce-tokens:0"), "--loss chunked-ce-tokens:0: expected chunked-ce-tokens:N with N an integer >= 1");
  EXPECT_EQ(refusal("chunked"),
            "--loss chunked: expected one of none|cross-entropy|mse|chunked-ce:N|chunked-ce-tokens:N|chunked-ce-rows:N|"
            "fused-linear-ce");
  EstimateArgs args;
  args.mode = "train";
  args.loss = "chunked-ce:8";
  const EstimateOptions o = to_estimate_options(args);
  EXPECT_EQ(o.training.loss, LossKind::ChunkedCrossEntropy);
  EXPECT_EQ(o.training.loss_chunks, 8);
  args.loss = "chunked-ce-tokens:128";
  const EstimateOptions t = to_estimate_options(args);
  EXPECT_EQ(t.training.loss, LossKind::ChunkedCrossEntropyTokens);
  EXPECT_EQ(t.training.loss_chunks, 128);
  args.loss = "chunked-ce-tokens:N";
  EXPECT_THROW(to_estimate_options(args), InputError);
  // litgpt's loss on a whole head (finetune/full.py): chunks of N rows.
  EXPECT_EQ(refusal("chunked-ce-rows:128"), "");
  EXPECT_EQ(refusal("chunked-ce-rows:0"), "--loss chunked-ce-rows:0: expected chunked-ce-rows:N with N an integer >= 1");
  args.loss = "chunked-ce-rows:128";
  const EstimateOptions r = to_estimate_options(args);
  EXPECT_EQ(r.training.loss, LossKind::ChunkedCrossEntropyRows);
  EXPECT_EQ(r.training.loss_chunks, 128);
  args.loss = "chunked-ce-rows:N";
  try {
    to_estimate_options(args);
    ADD_FAILURE() << "chunked-ce-rows:N was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--loss chunked-ce-rows:N: expected chunked-ce-rows:N with N an integer >= 1");
  }
}

// grouped_mm's experts are one GPU's (the rule in check_requirements): a library caller's validate_estimate_args
// meets the same refusal the CLI does, and eager experts under --tp are not refused by it.
TEST(OptionChecks, GroupedMmExpertsUnderTensorParallelismAreRefusedForEveryCaller) {
  EstimateArgs a;
  a.model.experts = "grouped_mm";
  a.tp = 2;
  try {
    validate_estimate_args(a);
    ADD_FAILURE() << "grouped_mm with --tp 2 was not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--experts-implementation grouped_mm with --tp 2: not modelled"),
              std::string::npos)
        << e.what();
  }
  a.model.experts = "eager";
  EXPECT_NO_THROW(validate_estimate_args(a));
}

}  // namespace
}  // namespace memplan
