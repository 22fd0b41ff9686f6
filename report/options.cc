#include "report/options.h"

#include <fmt/format.h>

#include "onnx_import/errors.h"
#include "report/option_choices.h"

namespace memplan {

const char* command_name(Command c) {
  switch (c) {
    case kInspect: return "inspect";
    case kEstimate: return "estimate";
    case kTimeline: return "timeline";
    case kFit: return "fit";
    case kCheck: return "check";
    case kServe: return "serve";
    case kPlan: return "plan";
    case kExport: return "export";
  }
  return "?";
}

const std::vector<Command>& all_commands() {
  static const std::vector<Command> commands = {kInspect, kEstimate, kPlan, kFit, kCheck, kTimeline, kServe, kExport};
  return commands;
}

std::string OptionSpec::long_name() const {
  // The first long name: "-o,--output" -> output; "--context,--max-model-len" (an alias after it) -> context.
  const size_t dashes = flag.find("--");
  if (dashes == std::string::npos) return flag;
  const size_t comma = flag.find(',', dashes);
  return flag.substr(dashes + 2, comma == std::string::npos ? std::string::npos : comma - dashes - 2);
}

std::string OptionSpec::python_keyword() const {
  if (keyword == "-") return "";
  if (!keyword.empty()) return keyword;
  std::string k = long_name();
  for (char& c : k)
    if (c == '-') c = '_';
  return k;
}

std::string field_text(const OptionSpec& row, const CommandArgs& args) {
  CommandArgs& a = const_cast<CommandArgs&>(args);  // the accessors take a mutable struct; nothing is written
  return std::visit(
      [&](auto get) -> std::string {
        const auto& v = get(a);
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return fmt::format("{}", v);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string s;
          for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
          return s;
        } else {
          return std::to_string(v);
        }
      },
      row.field);
}

void set_field_text(const OptionSpec& row, CommandArgs& args, const std::string& text) {
  std::visit(
      [&](auto get) {
        auto& v = get(args);
        using T = std::decay_t<decltype(v)>;
        try {
          if constexpr (std::is_same_v<T, std::string>) {
            v = text;
          } else if constexpr (std::is_same_v<T, bool>) {
            v = text == "true";
          } else if constexpr (std::is_same_v<T, double>) {
            v = std::stod(text);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            v = {text};
          } else {
            v = static_cast<T>(std::stoll(text));
          }
        } catch (const std::logic_error&) {
          throw InputError(row.message_name() + " " + text + ": not a number");
        }
      },
      row.field);
}

std::string describe_configuration(const EstimateArgs& a, const Graph& graph) {
  const bool train = a.mode == mode_name(Mode::Training);
  std::string s;
  for (const OptionSpec& row : option_schema()) {
    if (!row.describe || (row.scope == Scope::Train && !train) || (row.scope == Scope::Inference && train)) continue;
    s += row.describe(a);
  }
  // The model's rows come before --mode, whose word opens the line: how the experts run is said after the options.
  if (!a.model.experts.empty()) s += ", " + a.model.experts + " experts";
  for (const auto& [name, value] : graph.bound_dims) s += ", " + name + "=" + std::to_string(value);
  std::vector<std::string> values = a.model.values;
  std::sort(values.begin(), values.end());
  for (const std::string& v : values) s += ", value " + v;
  return s;
}

FitArgs fit_args(const CommandArgs& a) { return FitArgs{a.estimate, a.fit, a.memory}; }
ServeArgs serve_args(const CommandArgs& a) { return ServeArgs{a.estimate, a.serve, a.memory}; }
CheckArgs check_args(const CommandArgs& a) {
  return CheckArgs{a.estimate, a.baseline, a.max_increase_percent, a.write_baseline, a.metric};
}

}  // namespace memplan
