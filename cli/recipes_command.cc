// memplan recipes: each --recipe, the options it sets and the framework source of each (docs/recipes.md).
#include <iostream>

#include "cli/commands.h"
#include "onnx_import/errors.h"
#include "report/recipes.h"

namespace memplan::cli {

Action add_recipes_command(CLI::App& app) {
  app.add_subcommand("recipes",
                     "Each fine-tuning recipe (--recipe NAME): the options it sets, their values and the framework "
                     "source each follows, as Markdown: docs/recipes.md is this output.\n"
                     "  memplan estimate model.onnx --mode train --precision bf16 --recipe hf-peft");
  return [] {
    std::cout << recipes_markdown();
    return kExitOk;
  };
}

}  // namespace memplan::cli
