// memplan serve: how many sequences of a decoder with a KV cache a GPU serves at once (paged as vLLM pages it),
// and the longest single sequence.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "onnx_import/errors.h"
#include "report/json_text.h"
#include "report/serve.h"

namespace memplan::cli {

Action add_serve_command(CLI::App& app) {
  auto args = std::make_shared<CommandArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serving a decoder with a KV cache: the KV bytes per token, the weights, the activation peaks of a prefill\n"
      "and of a decode step, how many sequences of --context tokens fit at once with the cache paged in blocks\n"
      "of --block-size tokens (as vLLM allocates it: what the weights and the largest step leave of the budget),\n"
      "and the longest single sequence. The past/present inputs and outputs are found by their shapes.\n"
      "Without --gpu or --memory, a table over the built-in GPU catalog.\n"
      "  memplan serve llama.onnx --gpu H100-80GB --context 4096 --dtype fp16\n"
      "  memplan serve llama.onnx --memory 24GiB --context 8192 --max-batched-tokens 2048 --json");
  add_options(cmd, *args, kServe);

  return [args, cmd]() -> int {
    check_options(cmd, *args, kServe);
    const ServeOutcome out = serve_model(serve_args(*args));
    const Format format = output_format(*args, kServe);
    if (out.table) {
      const ServeTable& t = *out.table;
      std::cout << (format == Format::Json       ? json_text(serve_table_to_json(t))
                    : format == Format::Markdown ? serve_table_to_markdown(t)
                                                 : serve_table_to_text(t));
    } else {
      const ServeAnswer& a = *out.answer;
      std::cout << (format == Format::Json       ? json_text(serve_to_json(a))
                    : format == Format::Markdown ? serve_to_markdown(a)
                                                 : serve_to_text(a));
    }
    return out.limit_broken() ? kExitLimitExceeded : kExitOk;
  };
}

}  // namespace memplan::cli
