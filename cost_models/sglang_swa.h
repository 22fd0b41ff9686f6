// SGLang's hybrid sliding-window pool (SWAKVPool): how the token budget is split between the full-attention layers
// and the sliding-window ones, rule by rule from the SGLang source it follows (sgl-project/sglang, python/sglang/srt):
//
// Which models get it: configs/model_config.py (at 8b5e1bb) ModelConfig._derive_hybrid_model sets is_hybrid_swa =
// is_hybrid_swa_model(architectures) and not --disable-hybrid-swa-memory, and is_hybrid_swa_model holds a fixed set
// of architectures: Llama4ForConditionalGeneration, GptOssForCausalLM, MiMoV2FlashForCausalLM, MiMoV2MTP,
// Step3p5ForCausalLM, Step3p5MTP. Of the models memplan reads, gpt_oss alone; its windowed and full layers are
// layer_types' "sliding_attention" and "full_attention" (get_hybrid_layer_ids). Every other windowed model
// (Gemma2ForCausalLM, Gemma3ForCausalLM, Mistral's sliding_window) is served with one MHATokenToKVPool of
// max_total_num_tokens over every layer, as a model without a window: the window only masks attention.
//
// The split (model_executor/model_runner_kv_cache_mixin.py at 001ccef, ModelRunnerKVCacheMixin.init_memory and
// set_num_tokens_hybrid_swa): profile_max_num_token first sizes max_total_num_tokens with cell_size = F x n_full +
// S x n_swa (get_cell_size_per_token: a token in every layer), --max-total-tokens and the page rounding apply, then
//   total_memory = max_total_num_tokens x (F x n_full + S x n_swa)                  (a Python int, exact)
//   full_layer_tokens = int(total_memory / (F x n_full + r x S x n_swa))   r = --swa-full-tokens-ratio, default 0.8
//   swa_layer_tokens  = int(full_layer_tokens x r)                        (server_args.py ServerArgs)
//   each rounded down to whole pages, and max_total_num_tokens becomes full_layer_tokens;
//   with no full layer: swa_layer_tokens = max_total_num_tokens, full_layer_tokens = 0.
// F and S: one token's K and V bytes in one full / windowed layer (KV heads a rank x (head_dim + v_head_dim) x the
// element size). SWAKVPool (mem_cache/swa_memory_pool.py at 00381c0) then holds two MHATokenToKVPools of those sizes.
// SWATokenToKVPoolAllocator's full_to_swa_index_mapping ((full_layer_tokens + page_size + 1) int64 entries) is
// allocated after the pool, in the memory mem_fraction_static leaves, as the request pool is: not in the budget.
#pragma once

#include <cstdint>
#include <string>

#include "cost_models/sglang_engine.h"

namespace memplan {

inline constexpr double kSglangDefaultSwaFullTokensRatio = 0.8;  // server_args.py ServerArgs.swa_full_tokens_ratio

// model_config.py is_hybrid_swa_model, by the model_type memplan reads: gpt_oss (GptOssForCausalLM) alone.
inline bool sglang_hybrid_swa_model(const std::string& model_type) { return model_type == "gpt_oss"; }

struct SglangSwaSplit {
  int64_t full_layer_tokens = 0, swa_layer_tokens = 0;
  uint64_t total_memory = 0;   // max_total_num_tokens x cell_size
  double denominator = 0;      // F x n_full + r x S x n_swa
  uint64_t index_mapping_bytes = 0;  // full_to_swa_index_mapping: (full_layer_tokens + page_size + 1) x 8 B
};

// `max_total_num_tokens`: after --max-total-tokens and the page rounding; `full_per_token` / `swa_per_token`: one
// token's bytes in one layer of each kind. Throws std::logic_error without a windowed layer (SGLang asserts one).
SglangSwaSplit sglang_swa_split(int64_t max_total_num_tokens, uint64_t full_per_token, int64_t full_layers,
                                uint64_t swa_per_token, int64_t swa_layers, double swa_full_tokens_ratio,
                                int64_t page_size);

// The split applied to SGLang's pool (init_memory): max_total_num_tokens becomes full_layer_tokens (swa_layer_tokens
// with no full layer) before the "Not enough memory" check, and ModelRunner.initialize's max_running_requests =
// min(max_total_num_tokens // 2, the request pool, which was sized from the tokens before the split) reads it.
SglangSwaSplit sglang_hybrid_swa_pool(SglangTokenPool& pool, uint64_t per_layer_per_token, int64_t full_layers,
                                      int64_t swa_layers, double swa_full_tokens_ratio, int64_t page_size);

// Requests of `context` tokens the two pools hold at once. A request holds all its tokens in the full layers' pool,
// and in the windowed layers' pool too where the context is within the window (nothing falls behind it to free).
// Past the window SGLang frees the windowed tokens behind it as the request runs (managers/schedule_batch.py
// ScheduleBatch._evict_swa: those before pre_len - sliding_window - page_size, at intervals), which is not modelled
// to the token: the bound is then the full pool's, the windowed pool taken not to bind.
struct SglangSwaConcurrency {
  double requests = 0;
  int64_t whole_requests = 0;
};
SglangSwaConcurrency sglang_swa_concurrency(const SglangSwaSplit& split, int64_t full_layers, int64_t context,
                                            int64_t sliding_window, int64_t page_size);

// SGLang's start-up line for the split (set_num_tokens_hybrid_swa's logger.info).
std::string sglang_swa_print(const SglangSwaSplit& split, int64_t full_layers);

// SWAKVPool's two MHATokenToKVPools: per_layer x (full_layer_tokens x full layers + swa_layer_tokens x windowed ones).
uint64_t sglang_swa_pool_bytes(const SglangSwaSplit& split, uint64_t per_layer_per_token, int64_t full_layers,
                               int64_t swa_layers);

}  // namespace memplan
