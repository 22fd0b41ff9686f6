// Every subcommand's flags, made from the one option schema (report/options.h): add_options adds the rows of a
// command to its CLI11 subcommand, each storing into the command's CommandArgs. No flag is written anywhere else.
#pragma once

#include <CLI/CLI.hpp>

#include "report/files.h"
#include "report/options.h"

namespace memplan::cli {

// Adds every row of `command` to `cmd`, storing into `args` (which must outlive parsing). Training rows go
// into their own --help group.
void add_options(CLI::App* cmd, CommandArgs& args, Command command);

// settle_options (the --recipe, then validate_options) with the rows whose flags the user gave (each value checked once, a default value given
// included): what each action runs before it calls the library. Throws InputError (exit 2).
void check_options(const CLI::App* cmd, CommandArgs& args, Command command);

enum class Format { Table, Json, Markdown };
// --json, else --format (plan: its own --format).
Format output_format(const CommandArgs& args, Command command);

}  // namespace memplan::cli
