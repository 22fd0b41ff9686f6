// Every check of options that does not need the model, once: each value against its schema row
// (report/options.h), each option against --mode, the options that need another, and every pair of features
// against the combination matrix. The CLI, the Python module and every library entry (to_estimate_options) reach
// the same checks, so an option is refused with the same message wherever it is given. Checks that need the model
// (a regular expression that matches no parameter, a --tp that does not divide the heads) stay with the code that
// reads the model.
#pragma once

#include <string>
#include <vector>

#include "report/options.h"

namespace memplan {

// The rows of `command` (each value the user changed from its default: in range, one of its choices), then
// validate_estimate_args. Throws InputError naming the flag.
void validate_options(const CommandArgs& args, Command command);
// The estimate's rows, each option's mode, the requirements and the combination matrix.
void validate_estimate_args(const EstimateArgs& args);
// One row's value against its kind (a choice, an integer's minimum, a number's range), given or not: what the
// front ends run for every option the user gave, a default value included (--lora-rank 0).
void check_value(const OptionSpec& row, const CommandArgs& args);

// A feature of an estimate: a value of one option that changes what is modelled.
struct Feature {
  std::string name;    // "fsdp"
  std::string option;  // the flag it is a value of, as messages name it: "--shard"
  std::string value;   // how messages say it: "--shard fsdp"
  Scope scope = Scope::Any;  // Train: implies --mode train; Inference: only with --mode inference
  bool (*active)(const EstimateArgs&) = nullptr;
};
// Every feature, in the matrix's order.
const std::vector<Feature>& features();

// A pair of features that is not modelled, and why. Every pair of features of different options, within one
// mode, that is not listed here is modelled (tests/report/combinations_test.cc runs every pair).
struct Refusal {
  std::string a, b;    // feature names
  std::string reason;  // what the user can do instead, or what is missing
};
const std::vector<Refusal>& refused_pairs();
// The refusal of the pair (either order), or nullptr when the pair is modelled.
const Refusal* refusal(const std::string& a, const std::string& b);

}  // namespace memplan
