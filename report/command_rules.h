// The commands' own rules: two options that exclude each other, or one a command needs (report/command_rules.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/options.h"

namespace memplan {

// A rule of a command's own options (not of the estimate's features): two options that exclude each other, or
// one the command needs. Each is written once here and reached by the CLI and Python alike (validate_options).
struct CommandRule {
  uint32_t commands = 0;  // Command bits
  std::string rule;       // as docs/options.md states it
  std::string (*broken)(const CommandArgs&) = nullptr;  // the message when `args` break it, else ""
};
const std::vector<CommandRule>& command_rules();

}  // namespace memplan
