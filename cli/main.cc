// memplan: static GPU memory planning for ONNX models. A thin entry: parse, dispatch, map errors to exit codes.
#include <cstdio>
#include <exception>
#include <iostream>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/utf8_output.h"
#include "onnx_import/errors.h"

#ifdef MEMPLAN_MIMALLOC
#include <mimalloc.h>
#endif

int main(int argc, char** argv) {
#ifdef MEMPLAN_MIMALLOC
  // 2 MiB pages for mimalloc's segments (mi_option_large_os_pages, include/mimalloc.h; on Linux a
  // madvise(MADV_HUGEPAGE) that transparent huge pages honour in their default "madvise" mode): a 128-expert
  // config's half a gigabyte of graph otherwise costs 218,000 page faults, now 6,700 (bench/import/README.md).
  mi_option_enable(mi_option_large_os_pages);
#endif
  const memplan::cli::Utf8Output utf8_output;  // all output, help and errors included, is valid UTF-8
  CLI::App app{
      "memplan: how much GPU memory an ONNX model needs, and why, before you rent or launch anything.\n"
      "Exit codes: 0 ok; 1 a budget or regression limit is broken (check, fit, serve); 2 bad usage or bad input;\n"
      "3 internal error (a bug: please report it). See docs/exit-codes.md; `memplan COMMAND --help` explains\n"
      "each command, with examples.",
      "memplan"};
  app.set_version_flag("--version", std::string("memplan ") + MEMPLAN_VERSION);
  app.require_subcommand(1);
  app.fallthrough();

  std::vector<std::pair<CLI::App*, memplan::cli::Action>> commands;
  auto add = [&](memplan::cli::Action (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    memplan::cli::Action action = adder(app);
    auto subs = app.get_subcommands({});
    if (subs.size() > before) commands.emplace_back(subs.back(), std::move(action));
  };
  add(memplan::cli::add_inspect_command);
  add(memplan::cli::add_estimate_command);
  add(memplan::cli::add_plan_command);
  add(memplan::cli::add_fit_command);
  add(memplan::cli::add_check_command);
  add(memplan::cli::add_timeline_command);
  add(memplan::cli::add_serve_command);
  add(memplan::cli::add_export_command);
  add(memplan::cli::add_options_command);
  add(memplan::cli::add_recipes_command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version to stdout, usage errors to stderr
    return rc == 0 ? memplan::kExitOk : memplan::kExitBadInput;
  }
  try {
    for (auto& [sub, action] : commands)
      if (sub->parsed()) return action();
  } catch (const memplan::Error& e) {
    std::cerr << "memplan: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::cerr << "memplan: error: out of memory\n";
    return memplan::kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "memplan: internal error: " << e.what() << "\n";
    return memplan::kExitInternal;
  }
  return memplan::kExitBadInput;
}
