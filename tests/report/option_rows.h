// What the report tests of options and recipes share: the estimate command's option row by its flag, and the
// arguments of a training estimate under a recipe.
#pragma once

#include <string>

#include "report/options.h"

namespace memplan::testing {

// estimate's row of `flag` ("--precision"), or nullptr.
inline const OptionSpec* row_of(const std::string& flag) {
  for (const OptionSpec& r : option_schema())
    if (r.applies_to(kEstimate) && r.message_name() == flag) return &r;
  return nullptr;
}

// `memplan estimate MODEL --mode train --recipe RECIPE`, nothing else given.
inline CommandArgs recipe_training(const std::string& recipe, const std::string& model) {
  CommandArgs a;
  a.estimate.model.path = model;
  a.estimate.mode = "train";
  a.estimate.recipe = recipe;
  return a;
}

}  // namespace memplan::testing
