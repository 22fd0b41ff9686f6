// --recipe (report/recipes.h): a recipe fills only the options the user did not give, refuses a flag that would
// make it another recipe, names a source for every value, and sets only options that exist.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "onnx_import/errors.h"
#include "report/option_checks.h"
#include "report/recipes.h"

namespace memplan {
namespace {

const OptionSpec* row_of(const std::string& flag) {
  for (const OptionSpec& r : option_schema())
    if (r.applies_to(kEstimate) && r.message_name() == flag) return &r;
  return nullptr;
}

CommandArgs training(const std::string& recipe) {
  CommandArgs a;
  a.estimate.mode = "train";
  a.estimate.recipe = recipe;
  return a;
}

TEST(Recipes, FillOnlyWhatIsNotGiven) {
  CommandArgs a = training("hf-peft");
  a.estimate.lora_rank = 16;  // the user's --lora-rank 16
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--lora-rank")});
  EXPECT_EQ(a.estimate.lora_rank, 16);
  EXPECT_EQ(a.estimate.lora_targets, "q_proj|v_proj");  // LoraConfig's llama default
  EXPECT_EQ(a.estimate.upcast, "rmsnorm,softmax,loss");
  EXPECT_TRUE(a.estimate.free_output);
  EXPECT_EQ(a.estimate.attention, "sdpa");
  EXPECT_EQ(a.estimate.optimizer_impl, "fused");
}

TEST(Recipes, AGivenFlagOverridesTheRecipesValue) {
  CommandArgs a = training("hf-trainer");
  a.estimate.upcast = "none";
  a.estimate.attention = "eager";
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--upcast"), row_of("--attention")});
  EXPECT_EQ(a.estimate.upcast, "none");
  EXPECT_EQ(a.estimate.attention, "eager");
  EXPECT_TRUE(a.estimate.free_output);
}

TEST(Recipes, AContradictingFlagIsRefusedNamingBoth) {
  CommandArgs a = training("hf-peft");
  a.estimate.lora_rank = 0;
  try {
    settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--lora-rank")});
    FAIL() << "--recipe hf-peft --lora-rank 0 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--recipe hf-peft"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("--lora-rank 0"), std::string::npos);
  }
}

TEST(Recipes, QloraQuantizesPreparesAndCheckpoints) {
  CommandArgs a = training("hf-peft-qlora");
  a.estimate.precision = "bf16";
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision")});
  EXPECT_EQ(a.estimate.frozen_dtype, "nf4");
  EXPECT_TRUE(a.estimate.kbit_prep);
  EXPECT_EQ(a.estimate.checkpoint, "layers");
  EXPECT_EQ(a.estimate.lora_rank, 8);
  // A bitsandbytes optimizer is one kernel: the recipe's fused torch AdamW does not apply to it.
  CommandArgs bnb = training("hf-peft-qlora");
  bnb.estimate.precision = "bf16";
  bnb.estimate.optimizer = "paged-adamw8bit";
  settle_options(bnb, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision"), row_of("--optimizer")});
  EXPECT_EQ(bnb.estimate.optimizer_impl, "");
  // Another storage is another recipe.
  CommandArgs int8 = training("hf-peft-qlora");
  int8.estimate.precision = "bf16";
  int8.estimate.frozen_dtype = "int8";
  EXPECT_THROW(settle_options(int8, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--precision"),
                                                row_of("--frozen-dtype")}),
               InputError);
}

// The Trainer offers AdamW, not Adam: an optimizer the framework has no name for is refused, naming both.
TEST(Recipes, AnOptimizerTheFrameworkDoesNotOfferIsRefused) {
  CommandArgs a = training("hf-trainer");
  a.estimate.optimizer = "adam";
  try {
    settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--optimizer")});
    FAIL() << "--recipe hf-trainer --optimizer adam was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--recipe hf-trainer --optimizer adam"), std::string::npos);
  }
  CommandArgs sgd = training("hf-trainer");
  sgd.estimate.optimizer = "momentum";
  EXPECT_NO_THROW(settle_options(sgd, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--optimizer")}));
}

// Under FSDP the Trainer wraps a PEFT model with PEFT's policy: each adapter weight its own unit; without FSDP the
// recipe leaves --fsdp-wrap alone (it would be refused there).
TEST(Recipes, PeftWrapsEachAdapterUnderFsdpOnly) {
  CommandArgs a = training("hf-peft");
  a.estimate.gpus = 2;
  a.estimate.shard = "fsdp";
  settle_options(a, kEstimate, {row_of("--recipe"), row_of("--mode"), row_of("--gpus"), row_of("--shard")});
  EXPECT_EQ(a.estimate.fsdp_wrap, R"(^(.*lora_[AB].*|.*?\.[0-9]+\.))");
  CommandArgs one = training("hf-peft");
  settle_options(one, kEstimate, {row_of("--recipe"), row_of("--mode")});
  EXPECT_EQ(one.estimate.fsdp_wrap, "");
}

TEST(Recipes, NeedTrainingAndAKnownName) {
  CommandArgs inference = training("hf-trainer");
  inference.estimate.mode = "inference";
  EXPECT_THROW(settle_options(inference, kEstimate, {row_of("--recipe")}), InputError);
  CommandArgs unknown = training("deepspeed-chat");
  EXPECT_THROW(settle_options(unknown, kEstimate, {row_of("--recipe"), row_of("--mode")}), InputError);
}

// Every setting names an option of the training commands and a source; the listing shows each.
TEST(Recipes, EverySettingIsAnOptionWithASource) {
  const std::string md = recipes_markdown();
  for (const Recipe& r : recipes()) {
    EXPECT_NE(md.find("## " + r.name), std::string::npos);
    for (const RecipeSetting& s : r.settings) {
      EXPECT_NE(row_of(s.flag), nullptr) << r.name << " sets " << s.flag;
      EXPECT_FALSE(s.source.empty()) << r.name << " " << s.flag;
    }
  }
}

}  // namespace
}  // namespace memplan
