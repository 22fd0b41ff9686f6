// A Hugging Face config.json as a model: the config is read, checked and turned into the ONNX graph that
// torch.onnx.export of the architecture would write (onnx_import/llama_graph.h), weight-less as the zoo's big
// models are, and that graph goes through the normal import path, so every rule applies to it as to a file.
//
// Supported: model_type llama, mistral, qwen2, qwen3 (dense decoders of transformers' modeling_llama.py,
// modeling_mistral.py, modeling_qwen2.py, modeling_qwen3.py), gemma2, gemma3_text and phi3 (modeling_gemma2.py,
// modeling_gemma3.py's text model, modeling_phi3.py; onnx_import/hf_arch_layers.cc; their decoders with a window
// below the position limit for serve --engine vllm only, as read_config_model says), and
// gpt_oss (modeling_gpt_oss.py: attention sinks, yarn, layer_types' windows, its biased router and clamped experts;
// onnx_import/hf_gpt_oss.h; its windowed decoders for serve --engine vllm only, as gemma's), and
// the mixtures of experts mixtral, qwen2_moe and qwen3_moe (modeling_mixtral.py, modeling_qwen2_moe.py,
// modeling_qwen3_moe.py; onnx_import/hf_moe.h, which states the two routing rules of --moe-routing: balanced, the
// (token, slot) pairs dealt to the experts in turn, expert e receiving ceil((tokens·k − e) / experts), and worst, k
// experts receiving every token), and deepseek_v3 (modeling_deepseek_v3.py: multi-head latent attention and
// DeepseekV3MoE; onnx_import/hf_deepseek.h, which states how the routing rules meet its group-limited router) and
// deepseek_v2 (modeling_deepseek_v2.py: the same attention, its complex rotary, DeepseekV2MoEGate; hf_deepseek.h);
// --graph train (the training export: input_ids -> logits, as
// tests/models/export_llama.py writes *_train.onnx), decode and prefill (optimum's decoder with and without
// past, as tests/models/export_llama_kv.py writes llama_tiny_kv.onnx and llama_tiny_kv_prefill.onnx). Anything
// else is refused with one message naming the file and the key or value (InputError, exit 2): memplan never
// guesses what an unread key does to memory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace memplan {

struct ReadModel;

// A checkpoint's quantization_config (transformers' GPTQConfig / AwqConfig / FP8 configs as written to config.json):
// `method` is quant_method ("fp8", "gptq", "awq"), `bits` bits (gptq, awq), `group_size` group_size (gptq, awq; -1:
// one group over the input), `desc_act` gptq's act-order, `static_activations` fp8's activation_scheme "static".
struct StoredQuantization {
  std::string method;
  int bits = 0;
  int64_t group_size = 0;
  bool desc_act = false, static_activations = false;
  int64_t block_n = 0, block_k = 0;  // fp8's weight_block_size (0: per-tensor scales)
  // fp8: the "...mlp.gate" and "...block_sparse_moe.gate" entries of ignored_layers / modules_to_not_convert;
  // ModelOpt: those of exclude_modules (ignore)
  int ignored_routers = 0;
  // ModelOpt: exclude_modules (ignore) lists "model.layers.*.mlp.gate" (or block_sparse_moe.gate): every router, as
  // vLLM's fnmatch reads it (ModelOptQuantConfigBase.is_layer_excluded).
  bool all_routers_ignored = false;
  // fp8 on a mixture of experts: how vLLM builds this model_type's router (onnx_import/hf_quantization.cc
  // vllm_moe_router, set for every config.json). "unquantized": mixtral's, qwen2_moe's (a ReplicatedLinear with
  // quant_config None), deepseek_v3's and deepseek_v2's (DeepSeekV2Gate asserts quant_config None); "quantized":
  // qwen3_moe's gate is a ReplicatedLinear given the model's quant_config, kept unquantized only where the config
  // lists it; "": not read (refused with fp8 experts).
  std::string moe_router;
  // A ModelOpt checkpoint (onnx_import/hf_modelopt.h): quant_algo FP8 or NVFP4, read from hf_quant_config.json
  // beside the config or from a config.json quantization_config whose quant_method is "modelopt". NVFP4: `method`
  // "nvfp4", group_size 16 (cost_models/vllm_nvfp4.h). FP8: `method` is then "fp8" with
  // static activations (the engines' ModelOpt linear methods hold vLLM's per-tensor fp8 layout, a float32
  // input_scale kept: cost_models/vllm_weights.h, sglang_weights.h, trtllm_engine.h).
  bool modelopt = false;
  // quant_algo as the checkpoint names it: "NVFP4" for method "nvfp4", else "FP8".
  const char* modelopt_algo() const { return method == "nvfp4" ? "NVFP4" : "FP8"; }
  bool modelopt_file = false;      // read from hf_quant_config.json (what TensorRT-LLM 1.0 reads)
  bool modelopt_kv_fp8 = false;    // kv_cache_quant_algo "FP8" (config.json: kv_cache_scheme float, 8 bits)
  std::string modelopt_path;       // the file the ModelOpt settings were read from
  // exclude_modules as the graph's modules: each "model.layers.N.self_attn.o_proj" or "model.layers.N.mlp.down_proj"
  // entry (lm_head, never quantized by the engines' ModelOpt methods at the versions read, is dropped).
  std::vector<std::string> excluded_modules;
};

// Multi-head latent attention as a deepseek_v3 config.json states it: what vLLM's MLA cache and kernels read
// (vllm/model_executor/layers/attention/mla_attention.py get_mla_dims at 90b0a26), with the sparse layers' router
// bias and the rotary table's rows vLLM builds. kv_lora_rank 0: not MLA (every other source).
struct MlaDims {
  int64_t kv_lora_rank = 0, qk_rope_head_dim = 0, qk_nope_head_dim = 0, v_head_dim = 0;
  int64_t heads = 0, layers = 0;
  int64_t router_bias_elements = 0;  // e_score_correction_bias: n_routed_experts x the sparse layers
  int64_t rotary_rows = 0;           // yarn: original_max_position_embeddings x factor (rounded up), else the limit
};

// A KV cache as its builder states it: each past input holds its cached tokens at `axis`, counted by `cached_dim`,
// and its present output is that input grown by `new_dim` tokens along the same axis.
struct StatedKvCache {
  std::string cached_dim, new_dim;
  int axis = 0;
  std::vector<std::pair<std::string, std::string>> pairs;  // (past input, present output), in input order
};

// The graph a config becomes (--graph).
enum class ConfigGraph { Train, Decode, Prefill };

// What the graph depends on, as the config names it (transformers' LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config).
struct DecoderConfig {
  std::string model_type;
  int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, num_attention_heads = 0;
  int64_t num_key_value_heads = 0, head_dim = 0, vocab_size = 0, max_position_embeddings = 0;
  double rms_norm_eps = 0, rope_theta = 0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v projection biases (qwen2: always; llama: attention_bias)
  bool o_bias = false;    // o_proj bias (llama's attention_bias; qwen2 and mistral have none)
  bool mlp_bias = false;  // gate/up/down biases (llama's mlp_bias)
  bool qk_norm = false;   // q_norm and k_norm: RMSNorm over head_dim on q and k before rotary (qwen3)
  int64_t sliding_window = 0;  // the window in force (mistral; qwen2 with use_sliding_window); 0: none
  std::string torch_dtype;  // as the config says ("bfloat16", ...); the graph is float32 as the zoo's exports
  int64_t rotary_dim = 0;      // the rotated part of head_dim (phi3's partial_rotary_factor); head_dim otherwise
  double rope_factor = 1.0;    // linear rope_scaling's factor (gemma3_text's full-attention layers)
  StoredQuantization quantization;  // quantization_config (read only where vllm_serve: serve --engine vllm, sglang)
  // mistral's sliding_window as the config states it, below the position limit or not (vLLM's
  // ModelConfig.get_sliding_window reads the key as it is); 0: null or absent.
  int64_t stated_window = 0;

  // gemma2, gemma3_text and phi3 (transformers models/gemma2/modeling_gemma2.py, gemma3/modeling_gemma3.py,
  // phi3/modeling_phi3.py), built as tests/models/hf_archs.py traces them (onnx_import/hf_arch_layers.cc).
  bool hf_arch = false;
  bool gemma = false;            // RMSNorm by (1 + weight), four norms a layer, embedding times sqrt(hidden_size)
  bool gelu_tanh = false;        // MLP activation gelu_pytorch_tanh (Gemma); silu otherwise
  bool fused = false;            // Phi-3's qkv_proj and gate_up_proj
  bool qk_norm_after_transpose = false;  // Gemma 3's q_norm / k_norm (Qwen 3's come before the transpose)
  double attn_multiplier = 0;    // scores * this (query_pre_attn_scalar^-0.5; Phi-3 head_dim^-0.5)
  double attn_softcap = 0;       // Gemma 2's attn_logit_softcapping (0: none)
  double final_softcap = 0;      // final_logit_softcapping (0: none)
  std::vector<bool> sliding_layers;  // per layer: masked to the window (the mask is built into the graph)
  int64_t mask_window = 0;       // that window (config key sliding_window)
  double rope_local_theta = 0;   // gemma3_text: rope_local_base_freq, the sliding layers' rotary base

  // Mixture of experts (mixtral, qwen2_moe, qwen3_moe: onnx_import/hf_moe.h); num_experts 0 for a dense model.
  int64_t num_experts = 0, experts_per_token = 0;
  bool worst_routing = false;                   // --moe-routing worst (else balanced)
  int64_t expert_intermediate_size = 0;         // one expert's width (Mixtral: intermediate_size)
  int64_t shared_expert_intermediate_size = 0;  // qwen2_moe's shared expert (0: none)
  bool norm_topk_prob = false;                  // the top-k weights divided by their sum (Mixtral: always)
  std::vector<bool> moe_layers;                 // per layer: a sparse block (else the dense MLP, intermediate_size)
  bool grouped_experts = false;                 // --experts-implementation grouped_mm (hf_moe_grouped.h)
  bool engine_experts = false;                  // serve's fused-MoE engines: the experts as they read them (hf_moe.h)
  int64_t expert_parallel = 1;                  // --ep N: rank 0's experts and rows (hf_moe_grouped.h)

  // deepseek_v3 (transformers models/deepseek_v3/modeling_deepseek_v3.py; onnx_import/hf_deepseek.h): multi-head
  // latent attention and DeepseekV3MoE. head_dim and rotary_dim are qk_rope_head_dim, num_key_value_heads the heads.
  bool mla = false;
  int64_t q_lora_rank = 0;  // 0: q_proj (q_lora_rank null)
  int64_t kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = true;
  double attention_scale = 0;           // DeepseekV3Attention.scaling (yarn's mscale included)
  double rope_attention_scaling = 1.0;  // DeepseekV3RotaryEmbedding.attention_scaling (cos and sin times it)
  std::vector<float> inv_freq;          // the rotary inv_freq (yarn's when rope_scaling is yarn)
  int64_t n_shared_experts = 0, n_group = 0, topk_group = 0;
  double routed_scaling_factor = 1.0;
  // deepseek_v2 (models/deepseek_v2/modeling_deepseek_v2.py; hf_deepseek.h): the same attention with the complex
  // rotary and no mscale in its scaling, DeepseekV2MoEGate's softmax router without a bias; greedy (false) or
  // group_limited_greedy (true) top-k.
  bool deepseek_v2 = false;
  bool group_limited = false;
  // gpt_oss (transformers models/gpt_oss/modeling_gpt_oss.py; onnx_import/hf_gpt_oss.h): attention sinks, q/k/v/o
  // biases, layer_types' windows (sliding_layers / mask_window above), half-width rotary with yarn's inv_freq and
  // attention_factor, the router with a bias and softmax after top-k, the clamped SwiGLU experts with biases.
  bool gpt_oss = false;
  double swiglu_limit = 0;        // swiglu_limit: the experts' clamp
  double rope_attention = 1.0;    // yarn's attention_factor (get_mscale(factor)); 1 without scaling
  double yarn_factor = 0, yarn_beta_fast = 0, yarn_beta_slow = 0;  // rope_scaling yarn (factor 0: none)
  int64_t yarn_original = 0;      // rope_scaling original_max_position_embeddings
  bool yarn_truncate = true;
};

// True when `path` names a config rather than an ONNX file: its name ends in ".json". One place decides.
bool is_config_path(const std::string& path);

// Parses `text` (the contents of `path`, named in messages). Throws InputError on malformed JSON, a missing or
// mistyped key, an unknown model_type, an unsupported key or value, or sizes out of range.
DecoderConfig parse_decoder_config(const std::string& path, const std::string& text);

// The config at `path`'s torch_dtype (or dtype): "float32", "float16", "bfloat16", or "" when it states none. Reads
// and checks the whole config as parse_decoder_config does, without building a graph. Throws InputError as it does.
std::string config_torch_dtype(const std::string& path);

// The names --graph takes, in ConfigGraph's order: train, decode, prefill.
std::vector<std::string> config_graph_names();

// "train" | "decode" | "prefill" -> ConfigGraph; "" when a config was given without --graph is an error naming
// the file. Throws InputError.
ConfigGraph config_graph_from_name(const std::string& path, const std::string& name);

// The names --moe-routing takes: balanced (the default, also ""), worst (onnx_import/hf_moe.h states both rules).
std::vector<std::string> moe_routing_names();

// The names --experts-implementation takes: eager (the default, also ""), grouped_mm (transformers'
// experts_implementation names, src/transformers/modeling_utils.py get_correct_experts_implementation).
std::vector<std::string> experts_implementation_names();

// A config.json's model_type, or "" when the file cannot be read or parsed (the reader then says why): what the
// Hugging Face recipes read to set --experts-implementation only where memplan models it.
std::string config_model_type(const std::string& path);

// Reads the config at `path` and builds its graph, a mixture of experts' tokens routed by `moe_routing`. Throws
// InputError (unreadable file, the above, a --moe-routing for a model without experts).
// `vllm_serve`: read for serve --engine vllm (and sglang, the same analysis), which (1) carries a
// quantization_config (it sizes vLLM's and SGLang's quantized layers; elsewhere it is refused, since the graph holds
// the unquantized weights) and (2) builds a mistral
// gemma2, gemma3_text or phi3 decoder whose sliding_window is below its position limit (elsewhere refused:
// transformers' cache keeps the last sliding_window - 1 tokens of each windowed layer, cache_utils.py
// DynamicSlidingWindowLayer.update, a cache memplan's decoder does not build). Mistral's decoder is built as without
// the window (vLLM's attention kernel takes the window as an argument and builds no mask), the others' with their
// windows' masks (hf_archs.DecoderWithCache, every token kept); ReadModel::sliding_window and sliding_layers carry
// the window and its layers for vLLM's SlidingWindowSpec: every layer of mistral and phi3 (vLLM's llama.py, which
// serves both, gives no per-layer window without layer_types, so Attention takes the model's,
// CacheConfig.sliding_window = ModelConfig.get_sliding_window()), gemma's windowed layers (vLLM's gemma2.py and
// gemma3.py window the layers transformers windows).
// `experts`: --experts-implementation, eager ("" too) or grouped_mm (onnx_import/hf_moe_grouped.h); either is
// refused (InputError) for a model without experts. Under grouped_mm the routing changes no tensor, so deepseek's
// check of --moe-routing balanced against its group-limited router (check_deepseek_read) is not made (but under --ep,
// whose received rows follow the routing).
// `expert_parallel`: --ep N (onnx_import/hf_moe_grouped.h), the graph of rank 0 of N expert-parallel GPUs; 1: none.
ReadModel read_config_model(const std::string& path, const std::string& graph, const std::string& moe_routing = {},
                            bool vllm_serve = false, const std::string& experts = {}, int expert_parallel = 1);

// The one entry for a model path: a config (is_config_path) is built as read_config_model; anything else is read
// as ONNX (read_model_file), where a --graph or --moe-routing is refused, since a file is one graph already.
ReadModel read_model_source(const std::string& path, const std::string& graph, const std::string& moe_routing = {},
                            bool vllm_serve = false, const std::string& experts = {}, int expert_parallel = 1);

}  // namespace memplan
