// SGLang: how it sizes its token pool (the KV cache) at start-up, rule by rule, each from the SGLang source it
// follows (sgl-project/sglang, python/sglang/srt; the 0.5 series after PR #10975 "General heuristics for
// --mem-fraction-static": server_args.py ServerArgs._handle_gpu_memory_settings as at 037c398, and
// model_executor/model_runner_kv_cache_mixin.py at 001ccef, ModelRunnerKVCacheMixin.profile_max_num_token and
// init_memory):
//
//   total     = the GPU's free memory when the model runner starts (after the CUDA context and NCCL, before the
//               weights), GiB as a float             (model_runner.py init_torch_distributed: min_per_gpu_memory)
//   available = the free memory after the weights are loaded, GiB             (profile_max_num_token:
//               get_available_gpu_memory, which empties PyTorch's cache first: only what is allocated counts)
//   rest      = available - total x (1 - mem_fraction_static)
//   max_total_num_tokens = int(rest x 2^30) // cell_size, cell_size = KV bytes of one token over every layer
//               (get_cell_size_per_token: kv heads per tp rank x (head_dim + v_head_dim) x layers x element size)
//   then min(--max-total-tokens) and rounded down to whole pages of --page-size        (init_memory)
//
// So SGLang runs no profile forward: mem_fraction_static is a guess of what the weights and the pool may take
// of the memory that was free, and the activations and CUDA graphs live in the rest. Its default
// (_handle_gpu_memory_settings, gpu_mem the GPU's total MiB as nvidia-smi reports it) reserves
//   reserved_mem = 512 + max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp x pp / 8 x 1024 MiB,
//   at least 10 GiB on a GPU of more than 60 GiB, and mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3).
// Speculative decoding, DP attention and multimodal adjustments (which add to the reserve) are not modelled.
// Multi-head latent attention's pool, backend and weights: cost_models/sglang_mla.h.
#pragma once

#include <cstdint>
#include <string>

namespace memplan {

// SGLang's defaults for one GPU (_handle_gpu_memory_settings, by gpu_mem in MiB, CUDA GPUs): chunked_prefill_size
// 2048 below 35 GiB, 4096 below 60 GiB, 8192 below 160 GiB, else 16384; cuda_graph_max_bs 8 below 20 GiB, below
// 35 GiB 24 (80 at tp >= 4), below 60 GiB 32 (160), below 160 GiB 256 (512), else 512.
struct SglangGpuDefaults {
  int64_t chunked_prefill_size = 0;
  int64_t cuda_graph_max_bs = 0;
};
SglangGpuDefaults sglang_gpu_defaults(double gpu_mem_mib, int tp);

// The reserve (MiB) and the default mem_fraction_static it gives (above), pp = 1, no speculative decoding, no DP
// attention. `chunked_prefill_size`: the one in effect (--chunked-prefill-size, else the GPU's default).
struct SglangMemFraction {
  double reserved_mib = 0;
  double mem_fraction_static = 0;
};
SglangMemFraction sglang_default_mem_fraction(double gpu_mem_mib, int64_t chunked_prefill_size,
                                              int64_t cuda_graph_max_bs, int tp);

// The token pool (profile_max_num_token, init_memory). `free_before_weights`: the free bytes when the runner
// starts (the GPU's total less the memory outside PyTorch: CUDA context, NCCL); `weights`: what loading the model
// allocated (one tensor-parallel rank's); `cell_size`: one token's KV bytes over every layer, one rank's;
// `max_total_tokens` 0: not given; `context_len`: the served context (for max_running_requests).
struct SglangTokenPool {
  double total_gib = 0, available_gib = 0, rest_gib = 0;
  int64_t profiled_tokens = 0;        // int(rest x 2^30) // cell_size
  int64_t max_total_num_tokens = 0;   // after --max-total-tokens and the page rounding
  // init_memory's request pool (ReqToTokenPool size) without --max-running-requests:
  // min(max(int(profiled tokens / context_len x 512), 2048), 4096); and the max_running_requests the scheduler logs,
  // min(max_total_num_tokens // 2, that pool) (model_runner.py ModelRunner.initialize: "Init max running requests";
  // the scheduler's attention-backend limit, get_max_running_reqests, is not modelled).
  int64_t req_to_token_pool_size = 0;
  int64_t max_running_requests = 0;
  bool starts = false;                // SGLang raises "Not enough memory" when no token is left
  std::string refusal;
};
SglangTokenPool sglang_token_pool(uint64_t free_before_weights, uint64_t weights, double mem_fraction_static,
                                  uint64_t cell_size, int64_t max_total_tokens, int64_t page_size, int64_t context_len);

}  // namespace memplan
