// memplan serve: how many sequences of a decoder with a KV cache a GPU serves at once (paged as vLLM pages it),
// and the longest single sequence.
#include <iostream>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "cli/estimate_options.h"
#include "onnx_import/errors.h"
#include "report/json_text.h"
#include "report/serve.h"

namespace memplan::cli {

Action add_serve_command(CLI::App& app) {
  struct State {
    ServeArgs serve;
    FormatArgs format;
  };
  auto state = std::make_shared<State>();
  ServeArgs* s = &state->serve;
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serving a decoder with a KV cache: the KV bytes per token, the weights, the activation peaks of a prefill\n"
      "and of a decode step, how many sequences of --context tokens fit at once with the cache paged in blocks\n"
      "of --block-size tokens (as vLLM allocates it: what the weights and the largest step leave of the budget),\n"
      "and the longest single sequence. The past/present inputs and outputs are found by their shapes.\n"
      "Without --gpu or --memory, a table over the built-in GPU catalog.\n"
      "  memplan serve llama.onnx --gpu H100-80GB --context 4096 --dtype fp16\n"
      "  memplan serve llama.onnx --memory 24GiB --context 8192 --max-batched-tokens 2048 --json");
  add_estimate_options(cmd, s->estimate);
  // serve estimates inference steps and binds the batch itself: the training flags, --mode, --batch and --top
  // do not apply.
  std::vector<CLI::Option*> drop;
  for (CLI::Option* o : cmd->get_options())
    if (o->get_group() == "Training (--mode train)" || o->check_name("--mode") || o->check_name("--batch") ||
        o->check_name("--top"))
      drop.push_back(o);
  for (CLI::Option* o : drop) cmd->remove_option(o);
  auto* mem = cmd->add_option("--memory", s->memory, "The budget exactly as given, e.g. 24GiB (= 24 x 2^30), 24GB (= 24 x 10^9)");
  cmd->get_option("--gpu")->excludes(mem);
  cmd->add_option("--context", s->settings.context, "Tokens of one sequence, prompt and generated (vLLM's max_model_len)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-batched-tokens", s->settings.max_batched_tokens,
                  "Tokens of the largest prefill step, one sequence (vLLM's max_num_batched_tokens); default: --context")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", s->settings.block_size, "Tokens per KV cache block (vLLM's --block-size)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--kv-dim", s->settings.kv_dim,
                  "The symbolic dimension that counts cached tokens, when several qualify (e.g. past_sequence_length)");
  cmd->add_option("--headroom", s->settings.headroom_percent,
                  "Keep this percent of the budget free (10 = vLLM's default gpu_memory_utilization 0.9)")
      ->check(CLI::Range(0.0, 99.0))
      ->capture_default_str();
  cmd->add_option("--reserve", s->reserve, "Memory outside the allocator per GPU (CUDA context); default: the catalog's");
  add_format_options(cmd, state->format);

  return [state]() -> int {
    const ServeOutcome out = serve_model(state->serve);
    const Format format = state->format.resolve();
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
