// Each subcommand registers itself on the CLI11 app; main() only dispatches and maps errors to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace memplan::cli {

// A registered subcommand's action; returns the process exit code.
using Action = std::function<int()>;

// Each adds its subcommand to `app` and returns the action to run when it was chosen.
Action add_inspect_command(CLI::App& app);
Action add_estimate_command(CLI::App& app);
Action add_plan_command(CLI::App& app);
Action add_fit_command(CLI::App& app);
Action add_check_command(CLI::App& app);
Action add_timeline_command(CLI::App& app);
Action add_serve_command(CLI::App& app);
Action add_export_command(CLI::App& app);
Action add_options_command(CLI::App& app);
Action add_recipes_command(CLI::App& app);

}  // namespace memplan::cli
