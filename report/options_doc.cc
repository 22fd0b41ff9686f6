// docs/options.md, made from the schema's rows and the combination matrix: `memplan options` prints it, and
// tests/cli/test_options.py fails when the committed file differs.
#include <fmt/format.h>

#include "report/option_checks.h"
#include "report/options.h"

namespace memplan {
namespace {

std::string value_text(const OptionSpec& row) {
  switch (row.kind) {
    case OptionKind::Model: return "path";
    case OptionKind::Choice: return fmt::format("{}", fmt::join(row.choices, " \\| "));
    case OptionKind::Int: return fmt::format("integer >= {}", row.min);
    case OptionKind::Real:
      return row.max >= 1e300 ? fmt::format("number >= {}", row.min)
                              : fmt::format("number in [{}, {}{}", row.min, row.max, row.max_exclusive ? ")" : "]");
    case OptionKind::Flag: return "flag";
    case OptionKind::List: return "`" + row.type_name + "`, repeatable";
    case OptionKind::Text: return "text";
  }
  return "";
}

std::string commands_text(const OptionSpec& row) {
  std::vector<std::string> names;
  for (Command c : all_commands())
    if (row.applies_to(c)) names.push_back(command_name(c));
  return names.size() == all_commands().size() ? "all" : fmt::format("{}", fmt::join(names, ", "));
}

// What a row does; an engine's own option (serve) says whose first.
std::string what_it_does(const OptionSpec& row) {
  return row.engines.empty()
             ? markdown_cell(row.help)
             : fmt::format("(--engine {}) {}", fmt::join(row.engines, ", "), markdown_cell(row.help));
}

}  // namespace

std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string options_markdown() {
  std::string out =
      "# Options\n\n"
      "Every option of every command, made from the one option schema (`report/option_schema.cc`, serve's rows in\n"
      "`report/option_rows_serve.cc`) by `memplan options`;\n"
      "a test fails when this file differs from that output. The Python module takes the same options as keywords\n"
      "(`docs/python.md`); a keyword marked - is the command line's only. An option of mode *train* is refused with\n"
      "`--mode inference`, one of mode *inference* with `--mode train`.\n\n"
      "| option | Python | value | default | mode | commands | what it does |\n"
      "|---|---|---|---|---|---|---|\n";
  const CommandArgs defaults;
  for (const OptionSpec& row : option_schema()) {
    const std::string keyword = row.python_keyword().empty() ? "-" : "`" + row.python_keyword() + "`";
    const std::string def = row.show_default ? "`" + field_text(row, defaults) + "`" : "";
    const char* mode = row.scope == Scope::Train ? "train" : row.scope == Scope::Inference ? "inference" : "";
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} |\n", row.flag, keyword, value_text(row),
                       markdown_cell(def), mode, commands_text(row), what_it_does(row));
  }
  out +=
      "\n## Combinations\n\n"
      "Each feature below is a value of one option. Every pair of features of different options is modelled, except\n"
      "the pairs listed after the table, which are refused (exit 2) with one message naming both; a feature of one\n"
      "mode is refused in the other. `tests/report/combinations_test.cc` runs every pair on a tiny Llama.\n\n"
      "| feature | as given | mode |\n|---|---|---|\n";
  for (const Feature& f : features()) {
    const char* mode = f.scope == Scope::Train ? "train" : f.scope == Scope::Inference ? "inference" : "";
    out += fmt::format("| {} | `{}` | {} |\n", f.name, f.value, mode);
  }
  out += "\n| refused pair | why |\n|---|---|\n";
  for (const Refusal& r : refused_pairs())
    out += fmt::format("| {} x {} | {} |\n", r.a, r.b, markdown_cell(r.reason));
  out +=
      "\n## Rules of a command's own options\n\n"
      "Refused (exit 2) by the CLI and the Python module alike, with one message.\n\n"
      "| commands | rule |\n|---|---|\n";
  for (const CommandRule& r : command_rules()) {
    std::vector<std::string> names;
    for (Command c : all_commands())
      if ((r.commands & c) != 0) names.push_back(command_name(c));
    out += fmt::format("| {} | {} |\n", fmt::join(names, ", "), markdown_cell(r.rule));
  }
  return out;
}

}  // namespace memplan
