// vLLM's weights as it loads them, where they differ from the exported graph's initializers (the weights term of
// cost_models/vllm_engine.h's budget).
#pragma once

#include <cstdint>
#include <string>

#include "onnx_import/graph.h"

namespace memplan {

// vLLM pads the vocabulary of its embedding and LM head (vllm/model_executor/layers/vocab_parallel_embedding.py
// at 00db011, DEFAULT_VOCAB_PADDING_SIZE = 64 and pad_vocab_size: ((v + 63) // 64) x 64). VocabParallelEmbedding.
// __init__ creates the weight of num_embeddings_padded / tp rows (divide(num_embeddings_padded, tp_size): the
// padding comes before the split, and the split must be exact), zero rows beyond the vocabulary included;
// ParallelLMHead is that class with the same weight. Llama's head uses the default padding (vllm/model_executor/
// models/llama.py at e06c9ba, LlamaForCausalLM.__init__: ParallelLMHead(config.vocab_size, hidden_size)), and a
// tied head is the embedding's own weight (tie_weights).
inline constexpr int64_t kVllmVocabPaddingSize = 64;  // DEFAULT_VOCAB_PADDING_SIZE
int64_t vllm_padded_vocab(int64_t vocab);

struct VllmVocabPadding {
  int64_t vocab = 0;         // the head's logits width (the model's vocab_size)
  int64_t padded_vocab = 0;  // pad_vocab_size(vocab): the width of the logits vLLM computes
  int tables = 0;            // padded tables: the token embedding and the head, one when tied (0: no head found)
  uint64_t bytes = 0;        // one rank's padding rows beyond the graph's (tensor-parallel) rows, in `dtype`
};

// The padding rows of `g`'s token embedding (a Gather of a rank-2 weight by a graph input, with `vocab` rows) and of
// its LM head's weight (node `lm_head`, logits of width `vocab`), counted once when the head is tied to the
// embedding (`tied_by_shape`: the tie the estimate holds, cost_models/graph_facts.h held_tied_copies). Each
// rank holds padded_vocab / tp rows where the graph's tensor-parallel plan (`tp`, `replicate_kv_heads`) holds
// ceil(vocab / tp). Throws InputError naming the model when tp does not divide padded_vocab (vLLM's divide fails).
VllmVocabPadding vllm_vocab_padding(const Graph& g, const std::string& lm_head, int64_t vocab, int tp,
                                    bool replicate_kv_heads, bool tied_by_shape, DType dtype, const std::string& model);

}  // namespace memplan
