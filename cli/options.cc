#include "cli/options.h"

#include <fmt/format.h>

#include <type_traits>

#include "report/option_checks.h"
#include "report/option_choices.h"

namespace memplan::cli {

void add_options(CLI::App* cmd, CommandArgs& args, Command command) {
  for (const OptionSpec& row : option_schema()) {
    if (!row.applies_to(command)) continue;
    CLI::Option* o = std::visit(
        [&](auto get) -> CLI::Option* {
          auto& field = get(args);
          if constexpr (std::is_same_v<std::decay_t<decltype(field)>, bool>)
            return cmd->add_flag(row.flag, field, row.help);
          else
            return cmd->add_option(row.flag, field, row.help);
        },
        row.field);
    // Values are checked by validate_options (report/option_checks.h), as for Python: one rule, one message.
    if (row.kind == OptionKind::Choice) o->type_name("{" + fmt::format("{}", fmt::join(row.choices, ",")) + "}");
    if (!row.type_name.empty()) o->type_name(row.type_name);
    if (row.show_default) o->capture_default_str();
    if (row.required) o->required();
    if (row.scope == Scope::Train) o->group("Training (--mode train)");
    if (!row.engines.empty()) o->group(fmt::format("Options of --engine {}", fmt::join(row.engines, ", ")));
  }
}

void check_options(const CLI::App* cmd, CommandArgs& args, Command command) {
  std::vector<const OptionSpec*> given;
  for (const OptionSpec& row : option_schema()) {
    if (!row.applies_to(command) || row.kind == OptionKind::Model) continue;
    const CLI::Option* o = cmd->get_option_no_throw("--" + row.long_name());
    if (o && o->count() > 0) given.push_back(&row);
  }
  settle_options(args, command, given);
}

Format output_format(const CommandArgs& args, Command command) {
  if (args.json) return Format::Json;
  const std::string& f = command == kPlan ? args.plan_format : args.format;
  return static_cast<Format>(kFormatChoices.parse(f, "--format"));
}

}  // namespace memplan::cli
