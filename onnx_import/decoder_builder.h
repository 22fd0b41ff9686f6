// The builder behind onnx_import/llama_graph.h: one config.json decoder traced node by node as torch.onnx.export
// writes tests/models/llama.py's modules (llama, mistral, qwen2, qwen3: llama_graph.cc) and tests/models/hf_archs.py's
// (gemma2, gemma3_text, phi3: hf_arch_layers.cc), from the shared pieces of decoder_ops.cc. Internal to onnx_import.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "onnx_import/graph_emitter.h"
#include "onnx_import/hf_config.h"

namespace memplan {

class LlamaBuilder {
 public:
  LlamaBuilder(const DecoderConfig& c, ConfigGraph kind, onnx::GraphProto& g)
      : c_(c), kind_(kind), g_(g), e_(g.GetArena()) {}

  void build();
  // The graph outputs' placeholders and names: logits, then present.{i}.key / .value.
  const std::map<std::string, std::string>& outputs() { outputs_[logits_] = "logits"; return outputs_; }
  GraphEmitter& emitter() { return e_; }
  int64_t initializers() const { return g_.initializer_size(); }

 private:
  // llama_graph.cc: parameters, projections, rotary tables, masks, RMSNorm, the Llama-family layer.
  std::string param(const std::string& name, const std::vector<int64_t>& dims);
  std::string transpose_weight(const std::string& weight);
  std::string linear(const std::string& scope, const std::string& prefix, const std::string& x, int64_t in,
                     int64_t out, bool bias);
  std::string inverse_frequencies(double theta, int64_t dim, double factor);
  std::string scaled(const std::string& table);
  std::string half_or_full(const std::string& freqs);
  void rotary_and_mask(const std::string& seq);
  void rotary_from_positions();
  void cache_mask();
  // `dim`, `eps`: a norm of another width and epsilon (DeepSeek's q_a_layernorm / kv_a_layernorm); 0: the model's.
  std::string rms_norm(const std::string& scope, const std::string& weight, const std::string& x,
                       bool declared = false, int64_t dim = 0, double eps = 0);
  std::string rotary(const std::string& x, const std::string& cos, const std::string& sin, int64_t half);
  std::string expand_kv(const std::string& x, const std::string& total);
  std::string reshape(const std::string& x, const std::string& shape);
  std::string transpose(const std::string& x, std::vector<int64_t> perm);
  std::string attention(const std::string& layer, const std::string& x);
  std::string layer(int64_t l, const std::string& x);

  // hf_arch_layers.cc: gemma2, gemma3_text, phi3 (DecoderConfig::hf_arch).
  std::string slice_last(const std::string& x, int64_t axis, int64_t start, int64_t end);
  std::string arch_rotary(const std::string& x, bool sliding);
  std::string arch_attention(int64_t l, const std::string& x);
  std::string arch_mlp(const std::string& scope, const std::string& prefix, const std::string& y);
  std::string arch_layer(int64_t l, const std::string& x);
  std::string soft_cap(const std::string& x, double cap);

  // hf_moe.cc: mixtral, qwen2_moe, qwen3_moe's sparse block.
  std::string moe_block(int64_t l, const std::string& x);
  std::string moe_expert(const std::string& scope, const std::string& prefix, const std::string& x, int64_t f,
                         bool mixtral);
  std::string weight_matmul(const std::string& scope, const std::string& weight, const std::string& x);
  std::string index_add(const std::string& acc, const std::string& index, const std::string& source);
  std::string strided(const std::string& x, int64_t start, int64_t step, int64_t end);
  std::string moe_router(const std::string& m, const std::string& p, const std::string& hidden,
                         std::string* indices);
  // The model's router on the (N, h) tokens (gpt_oss's, deepseek's, or moe_router): the top-k weights; `indices`,
  // when given, gets the top-k expert indices.
  std::string route(const std::string& m, const std::string& p, const std::string& hidden, std::string* indices);
  // DeepseekV3MoE's tail: the routed output `acc` viewed as x, plus shared_experts(x).
  std::string add_deepseek_shared(const std::string& m, const std::string& p, const std::string& x,
                                  const std::string& acc);
  // acc + sigmoid(shared_expert_gate(hidden)) * shared_expert(hidden): Qwen2MoeSparseMoeBlock's shared expert.
  std::string add_shared_expert(const std::string& m, const std::string& p, const std::string& hidden, int64_t h,
                                const std::string& acc);
  // hf_moe_grouped.cc: the same block under --experts-implementation grouped_mm.
  std::string grouped_moe_block(int64_t l, const std::string& x);
  std::string grouped_swiglu(const std::string& gate_up);
  // hf_moe_ep.cc: --ep N, torchtitan's dispatch of the sorted rows, rank 0's experts, and the combine.
  std::string expert_parallel_rows(const std::string& px, const std::string& rows, const std::string& counts);

  // hf_deepseek.cc: deepseek_v3's multi-head latent attention and router; x.expand(sizes) (decoder_ops.cc).
  std::string mla_attention(const std::string& layer, const std::string& x);
  std::string mla_rotary(const std::string& x, int64_t heads);
  std::string deepseek_router(const std::string& scope, const std::string& prefix, const std::string& hidden,
                              std::string* indices);
  std::string float32_gate_logits(const std::string& scope, const std::string& weight, const std::string& hidden);
  void topk(const std::string& x, int64_t n, bool sorted);
  std::string group_masked(const std::string& group_scores, const std::string& scores);
  // hf_deepseek_v2.cc: deepseek_v2's rotary (apply_rotary_emb in real arithmetic); hf_deepseek_router.cc the routers.
  std::string mla_complex_rotary(const std::string& x, int64_t heads);
  std::string deepseek_v2_router(const std::string& scope, const std::string& prefix, const std::string& hidden,
                                 std::string* indices);
  std::string expand_to(const std::string& x, const std::vector<std::string>& sizes);
  // hf_gpt_oss.cc: gpt_oss's rotary, attention sinks, layer, router and experts.
  std::string gpt_oss_inv_freq();
  void gpt_oss_table(const std::string& freqs, std::string& cos, std::string& sin);
  std::string gpt_oss_rotary(const std::string& x, const std::string& cos, const std::string& sin);
  std::string sink_softmax(const std::string& sinks, const std::string& masked);
  std::string gpt_oss_layer(int64_t l, const std::string& x);
  std::string gpt_oss_router(const std::string& m, const std::string& p, const std::string& hidden,
                             std::string* indices);
  std::string gpt_oss_expert(const std::string& s, const std::string& p, int64_t e, const std::string& x);
  std::string gpt_oss_gate(const std::string& gate_up);
  std::string pooled_double(double value);
  std::string clamp(const std::string& x, bool lower, double limit);

  const DecoderConfig& c_;
  const ConfigGraph kind_;
  onnx::GraphProto& g_;
  std::map<std::string, std::string> outputs_;
  GraphEmitter e_;
  std::string cos_, sin_, mask_, b_, s_, logits_;
  std::string rope_key_list_;  // deepseek_v3: the rope key's (b, 1, s, rope) list, built twice (mla_attention)
  std::string local_cos_, local_sin_, window_mask_;  // gemma3_text's sliding layers' rotary; the window's mask
  std::map<double, std::string> pooled_doubles_;       // pooled_double's Constants
};

}  // namespace memplan
