// memplan._core's keywords (keywords.cc): what moves a command's Python arguments into the CommandArgs the CLI's
// flags fill, by the rows of the one option schema (report/options.h). bindings.cc's commands call these first.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "report/options.h"

namespace memplan::python {

// The model argument as a path: a str or an os.PathLike (InputError otherwise).
std::string model_path(pybind11::handle model);

// Applies every keyword of `command`'s rows (report/options.h) to `args`, converted by its field's type; an unknown
// one is refused with the command's keywords listed (`name`: the command). Then the same checks as the CLI's
// (settle_options), the keywords' rows as the flags given. Throws InputError.
void apply_keywords(CommandArgs& args, const pybind11::kwargs& kwargs, Command command, const std::string& name);

}  // namespace memplan::python
