// Recipes (--recipe NAME, listed by `memplan recipes`): how a fine-tuning framework runs a training step, as a
// named bundle of option values, each one a mechanism memplan models with its own flag, pinned to the framework
// source it follows. A recipe is never a branch in a cost model: it only fills the options the user did not give
// (an explicit flag overrides the recipe's choice), and refuses a flag that would make it another recipe.
#pragma once

#include <string>
#include <vector>

#include "report/options.h"

namespace memplan {

struct RecipeSetting {
  std::string flag;    // "--upcast"
  std::string value;   // as on the command line ("true" for a flag)
  std::string source;  // the framework file and function whose behaviour it is
  // When the setting applies, on the options as given and the recipe's settings before it (nullptr: always): fused
  // AdamW only where the optimizer is torch's AdamW (the Trainer's adamw_bnb_8bit is one bitsandbytes kernel).
  bool (*applies)(const CommandArgs& args) = nullptr;
  std::string when = "";  // `applies` in words, for the listing ("" when always)
};

struct Recipe {
  std::string name;     // "hf-peft"
  std::string follows;  // the framework and the version of its source the settings follow
  std::string summary;
  std::vector<RecipeSetting> settings;
  // A flag the user gave that the recipe cannot take ("" when `args` keep to it): the message names both.
  std::string (*contradiction)(const CommandArgs& args) = nullptr;
  std::string not_modelled;  // what of the framework the recipe does not model yet ("" when nothing)
  // The --optimizer values the framework offers (empty: every one), and where it lists them.
  std::vector<std::string> optimizers;
  std::string optimizers_source;
};

// --fsdp-wrap with each LoRA weight (lora_A, lora_B) a unit of its own, besides each repeated block <prefix>.<N>.
extern const char kLoraUnitsWrap[];

// `applies` predicates more than one recipe's file reads: --gpus N > 1; --lora-rank above 0 (0, no adapters, picks
// torchtune's and litgpt's full fine-tunes); --optimizer is torch's AdamW (the Trainer's fused default
// adamw_torch_fused, torchtune's torch.optim.AdamW), not a bitsandbytes optimizer or SGD; a checkpoint is taken.
bool multi_gpu(const CommandArgs& a);
bool lora_adapters(const CommandArgs& a);
bool torch_adamw(const CommandArgs& a);
// --checkpoint other than none and torchtitan's selective modes (which are always non-reentrant).
bool checkpointed(const CommandArgs& a);

const std::vector<Recipe>& recipes();
// One framework's recipes, each in its own file (recipes.cc lists them all).
Recipe torchtune_recipe();  // report/recipes_torchtune.cc
Recipe litgpt_recipe();     // report/recipes_litgpt.cc
Recipe torchtitan_recipe();  // report/recipes_torchtitan.cc
std::vector<std::string> recipe_names();

// The recipe --recipe names: for each of its settings whose flag is not in `given`, the field set to the recipe's
// value (and the row added to `given`, so it is checked as a flag given); a contradicting flag is an InputError.
// Nothing when args.estimate.recipe is empty.
void apply_recipe(CommandArgs& args, Command command, std::vector<const OptionSpec*>& given);

// `memplan recipes`: every recipe, its settings and sources, as Markdown (docs/recipes.md is this output).
std::string recipes_markdown();

}  // namespace memplan
