// memplan-validate PLAN.json [--device cuda|cpu] [--mode arena|malloc|pool|all] [--json]
// Replays an arena plan on real memory: checks that no two live tensors overlap, and measures what each
// allocation strategy uses against the plan's prediction. Exit codes: 0 ok, 1 overlap found, 2 bad plan or
// usage, 3 device failure. See docs/validate.md.
#include <CLI/CLI.hpp>

#include <iostream>
#include <new>

#include "validate/devices.h"
#include "validate/plan.h"
#include "validate/replay.h"
#include "validate/report.h"

namespace {

using namespace memplan::validate;

struct Options {
  std::string plan_path;
  std::string device = "cuda";
  std::string mode = "all";
  bool json = false;
};

std::vector<Mode> modes_for(const std::string& mode, const Device& device) {
  if (mode == "arena") return {Mode::kArena};
  if (mode == "malloc") return {Mode::kMalloc};
  if (mode == "pool") return {Mode::kPool};
  std::vector<Mode> all;
  for (Mode m : {Mode::kArena, Mode::kMalloc, Mode::kPool})
    if (device.supports(m)) all.push_back(m);
  return all;
}

int run(const Options& options) {
  const Plan plan = load_plan(options.plan_path);
  auto device = make_device(options.device);
  Report report;
  report.plan = &plan;
  report.device_kind = device->kind();
  report.device_info = device->describe();
  for (Mode mode : modes_for(options.mode, *device)) report.modes.push_back(replay(plan, mode, *device));
  if (options.json) std::cout << to_json(report).dump(2) << "\n";
  else std::cout << to_text(report);
  return report.has_overlap() ? memplan::kExitLimitExceeded : memplan::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replays a memplan arena plan on a GPU or on host memory: overlap check and measured usage"};
  Options options;
  app.add_option("plan", options.plan_path, "plan.json written by `memplan plan`")->required();
  app.add_option("--device", options.device, "where to replay")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--mode", options.mode, "allocation strategy; all = every mode the device supports")
      ->check(CLI::IsMember({"arena", "malloc", "pool", "all"}));
  app.add_flag("--json", options.json, "machine-readable output (schema memplan.validate/1)");
  app.set_version_flag("--version", MEMPLAN_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : memplan::kExitBadInput;
  }
  try {
    return run(options);
  } catch (const memplan::Error& e) {
    std::cerr << "memplan-validate: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::cerr << "memplan-validate: error: out of host memory\n";
    return memplan::kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "memplan-validate: internal error: " << e.what() << "\n";
    return memplan::kExitInternal;
  }
}
