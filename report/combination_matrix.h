// The combination matrix: every feature of an estimate (a value of one option that changes what is modelled) and
// the pairs of features that are not modelled, each with its reason. validate_options (report/option_checks.h)
// refuses a refused pair naming both flags; tests/report/combinations_test.cc runs every other pair.
#pragma once

#include <string>
#include <vector>

#include "report/options.h"

namespace memplan {

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
// Whether the feature named `name` is on in `args` (false for a name that is no feature).
bool feature_on(const std::string& name, const EstimateArgs& args);

}  // namespace memplan
