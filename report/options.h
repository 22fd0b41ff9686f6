// The one option schema: a row per option of every command (flag, Python keyword, kind, choices, the commands and
// the mode it applies to, help, the field it sets). The CLI's flags (cli/schema_options.cc), the Python module's
// keywords (python/bindings.cc), the configuration line (describe_configuration, report/estimate_config.h: made
// from the rows' describe parts), `memplan options` and
// docs/options.md are all generated from these rows; nothing else lists option names. A new option is one row
// here, its field in the struct that owns it (with its default, written once there), and the code that uses it.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "onnx_import/graph.h"
#include "report/check.h"
#include "report/estimate_config.h"
#include "report/fit.h"
#include "report/plan.h"
#include "report/serve.h"

namespace memplan {

// The commands that take options, as bits of OptionSpec::commands.
enum Command : uint32_t {
  kInspect = 1u << 0,
  kEstimate = 1u << 1,
  kTimeline = 1u << 2,
  kFit = 1u << 3,
  kCheck = 1u << 4,
  kServe = 1u << 5,
  kPlan = 1u << 6,
  kExport = 1u << 7,
};
const char* command_name(Command c);
// Every command, in the order `memplan --help` lists them.
const std::vector<Command>& all_commands();

// Every command's arguments as given: what the rows set. Each field is held once; its default is written in
// the struct that owns it (EstimateArgs, FitSettings, ServeSettings, CheckArgs) or named here from there.
struct CommandArgs {
  EstimateArgs estimate;             // the model, its bindings, the estimate's options
  FitSettings fit;
  ServeSettings serve;
  std::string memory;                // fit, serve: --memory SIZE
  std::string baseline, write_baseline;                            // check
  double max_increase_percent = CheckArgs{}.max_increase_percent;  // check
  std::string metric = CheckArgs{}.metric;                         // check
  uint64_t alignment = kDefaultAlignment;                          // plan
  std::string output;                // plan, timeline, export: -o FILE
  std::string format = "table";      // --format (the CLI's output; Python returns the JSON's dictionary)
  std::string plan_format = "json";  // plan's --format: what goes to standard output without -o
  bool json = false;                 // --json
};
FitArgs fit_args(const CommandArgs& a);
ServeArgs serve_args(const CommandArgs& a);
CheckArgs check_args(const CommandArgs& a);

enum class OptionKind {
  Model,   // the positional MODEL
  Text,    // free text (a path, a regular expression, a size such as 24GiB)
  Choice,  // one of OptionSpec::choices
  Int,     // an integer >= OptionSpec::min
  Real,    // a number in [min, max]
  Flag,    // present or not
  List,    // repeatable NAME=VALUE (Python: a mapping)
};
// Which mode an option belongs to: Train options are refused with --mode inference, Inference ones with --mode
// train (validate_options).
enum class Scope { Any, Inference, Train };

// The field a row sets, as an accessor on CommandArgs.
using FieldRef = std::variant<std::string& (*)(CommandArgs&), int& (*)(CommandArgs&), int64_t& (*)(CommandArgs&),
                              uint64_t& (*)(CommandArgs&), double& (*)(CommandArgs&), bool& (*)(CommandArgs&),
                              std::vector<std::string>& (*)(CommandArgs&)>;

struct OptionSpec {
  std::string flag;     // "--grad-accum" ("-o,--output": CLI11's names; "MODEL": the positional)
  std::string keyword;  // the Python keyword when it is not the flag in snake_case; "-": none (--format, --json)
  OptionKind kind = OptionKind::Text;
  uint32_t commands = 0;  // Command bits
  Scope scope = Scope::Any;
  std::string help;
  FieldRef field;
  // serve: the --engine values whose option this is (--engine all takes it when one of its rows' engines does);
  // given under another engine it is refused, naming these. Empty: every engine's.
  std::vector<std::string> engines;
  std::vector<std::string> choices;  // Choice: the names (report/option_choices.h)
  double min = 0, max = 0;           // Int: min (max unused); Real: [min, max], or [min, max) with max_exclusive
  bool max_exclusive = false;
  bool show_default = false;         // --help and the docs say the default
  bool required = false;             // the CLI refuses the command without it
  std::string type_name;             // --help's placeholder for List ("NAME=VALUE")
  // The option's part of the configuration line ("" when it adds nothing), or nullptr: never described.
  std::string (*describe)(const EstimateArgs&) = nullptr;

  // The flag's long name without dashes ("output" for "-o,--output").
  std::string long_name() const;
  // The Python keyword: `keyword`, else the long name in snake_case; "" for a CLI-only row (keyword "-").
  std::string python_keyword() const;
  // The flag as messages name it: "--output" for "-o,--output".
  std::string message_name() const { return kind == OptionKind::Model ? flag : "--" + long_name(); }
  bool applies_to(Command c) const { return (commands & c) != 0; }
};

// Every row, in the order --help and the docs list them (and the configuration line reads).
const std::vector<OptionSpec>& option_schema();

// The value of a row's field in `args`, as text (a default: on a default-constructed CommandArgs).
std::string field_text(const OptionSpec& row, const CommandArgs& args);
// Sets a row's field from text as the command line writes it ("true" for a flag); InputError on a malformed number.
void set_field_text(const OptionSpec& row, CommandArgs& args, const std::string& text);

// docs/options.md: every option of every command and the combination matrix's refusals, as Markdown
// (`memplan options` prints it; report/options_doc.cc).
std::string options_markdown();
// `text` for a Markdown table cell: each | escaped (options_markdown, recipes_markdown).
std::string markdown_cell(const std::string& text);

}  // namespace memplan
