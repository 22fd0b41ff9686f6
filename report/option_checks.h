// Every check of options that does not need the model, once: each value against its schema row
// (report/options.h), each option against --mode, the options that need another, and every pair of features
// against the combination matrix. The CLI, the Python module and every library entry (to_estimate_options) reach
// the same checks, so an option is refused with the same message wherever it is given. Checks that need the model
// (a regular expression that matches no parameter, a --tp that does not divide the heads) stay with the code that
// reads the model.
#pragma once

#include <string>
#include <vector>

#include "report/combination_matrix.h"
#include "report/command_rules.h"
#include "report/options.h"

namespace memplan {

// The rows of `command` whose values validate_options checks, each once, in the schema's order: the rows in
// `given` (what the user gave, a default value included: --lora-rank 0) and every row whose value differs from
// its default (a library caller's CommandArgs says nothing of what was given).
std::vector<const OptionSpec*> rows_to_check(const CommandArgs& args, Command command,
                                             const std::vector<const OptionSpec*>& given = {});
// Each value of rows_to_check against its row (a choice, an integer's minimum, a number's range), the command's
// rules (command_rules), then, for a command that estimates, the estimate's modes, requirements and combination
// matrix (validate_estimate_args without its rows). Throws InputError naming the flag. The CLI passes the rows
// whose flags were given, Python the rows of its keywords.
void validate_options(const CommandArgs& args, Command command, const std::vector<const OptionSpec*>& given = {});
// What the front ends run on what the user gave: --mode train when not given and --recipe is,
// the --recipe's values for the options not given (report/recipes.h), a config.json's --graph where the command
// can mean one graph only (decode for serve, train for a training step), then validate_options with those rows
// counted as given.
void settle_options(CommandArgs& args, Command command, std::vector<const OptionSpec*> given);
// The estimate's rows (each value that differs from its default), each option's mode, the requirements and the
// combination matrix: what a library caller that builds EstimateArgs runs before to_estimate_options.
void validate_estimate_args(const EstimateArgs& args);

}  // namespace memplan
