// The tiny qwen3_moe config.json the grouped-experts tests build their graphs from (hidden 16, 2 layers, 4 heads of
// 4 and 2 KV heads, vocab 64, 4 experts of 8, top-2, float32): one text, which each test's hand counts are worked
// out against.
#pragma once

namespace memplan::testing {

inline constexpr const char* kTinyQwen3MoeConfig =
    R"({"model_type": "qwen3_moe", "hidden_size": 16, "intermediate_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "vocab_size": 64,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": false,
      "torch_dtype": "float32", "hidden_act": "silu", "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 8, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
      "output_router_logits": false, "router_aux_loss_coef": 0.001, "attention_bias": false})";

}  // namespace memplan::testing
