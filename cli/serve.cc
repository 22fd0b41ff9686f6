// memplan serve: a decoder with a KV cache served by vLLM (its KV cache size and maximum concurrency) or by PyTorch
// eager (how many sequences fit at once, and the longest single sequence).
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
      "Serving a decoder with a KV cache. --engine vllm (the default): what vLLM prints at start-up,\n"
      "\"GPU KV cache size: N tokens\" and \"Maximum concurrency for L tokens per request: X\", from vLLM's own\n"
      "budget (total x --gpu-memory-utilization - weights - its profile run's activation peak - non-torch memory)\n"
      "with attention, repeat_kv and the LM head run as vLLM's kernels run them. --engine eager: PyTorch eager running\n"
      "the exported graph, its prefill and decode steps, how many sequences of --context tokens fit at once with\n"
      "the cache paged in blocks of --block-size tokens, and the longest single sequence. The past/present inputs\n"
      "and outputs are found by their shapes. Without --gpu or --memory, a table over the built-in GPU catalog.\n"
      "--engine sglang and --engine trtllm: SGLang's token pool (mem_fraction_static of the free memory) and\n"
      "TensorRT-LLM's KV cache (free_gpu_memory_fraction of what its profiling run leaves), each over the same\n"
      "analysis; --engine all: a row an engine for one GPU.\n"
      "  memplan serve llama.onnx --gpu H100-80GB --context 8192 --dtype bf16\n"
      "  memplan serve Llama-3.1-8B/config.json --graph decode --gpu L40S --tp 2 --kv-cache-dtype fp8\n"
      "  memplan serve Llama-3.1-8B/config.json --graph decode --gpu H100-80GB --engine all --context 8192\n"
      "  memplan serve llama.onnx --engine eager --memory 24GiB --context 8192 --max-batched-tokens 2048 --json");
  add_options(cmd, *args, kServe);

  return [args, cmd]() -> int {
    check_options(cmd, *args, kServe);
    const ServeOutcome out = serve_model(serve_args(*args));
    const Format format = output_format(*args, kServe);
    if (out.engines) {
      const EngineTable& t = *out.engines;
      std::cout << (format == Format::Json       ? json_text(engines_table_to_json(t))
                    : format == Format::Markdown ? engines_table_to_markdown(t)
                                                 : engines_table_to_text(t));
    } else if (out.engine) {
      const std::string text = engine_to_text(*out.engine);
      std::cout << (format == Format::Json       ? json_text(engine_to_json(*out.engine))
                    : format == Format::Markdown ? "```\n" + text + "```\n"
                                                 : text);
    } else if (out.vllm_table) {
      const VllmTable& t = *out.vllm_table;
      std::cout << (format == Format::Json       ? json_text(vllm_table_to_json(t))
                    : format == Format::Markdown ? vllm_table_to_markdown(t)
                                                 : vllm_table_to_text(t));
    } else if (out.vllm) {
      const std::string text = vllm_to_text(*out.vllm);
      std::cout << (format == Format::Json       ? json_text(vllm_to_json(*out.vllm))
                    : format == Format::Markdown ? "```\n" + text + "```\n"
                                                 : text);
    } else if (out.table) {
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
