// vLLM's weights as it loads them, where they differ from the exported graph's initializers (the weights term of
// cost_models/vllm_engine.h's budget).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cost_models/vllm_fp8_block.h"
#include "cost_models/vllm_nvfp4.h"
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

// vLLM's quantized linear layers (--quantization, or the checkpoint's quantization_config): what each of the
// decoder's linear layers (every MatMul/Gemm on a weight but the LM head, which these methods leave in the model's
// type: Fp8Config.get_quant_method and AWQConfig.get_quant_method return a method for LinearBase only,
// GPTQConfig's for ParallelLMHead only with lm_head_quantized) holds once loaded, one tensor-parallel rank's
// (in_p: its input features, out_p: its output features, input_size: the whole layer's input):
//  - fp8 (vllm/model_executor/layers/quantization/fp8.py at 1436674, Fp8LinearMethod.create_weights and
//    process_weights_after_loading, the per-tensor path of compute capability 8.9 and up): weight float8_e4m3fn
//    [out_p, in_p], 1 byte an element; one float32 weight_scale per vLLM module (the logical shards' scales are
//    requantized to their max: process_fp8_weight_tensor_strategy), and with activation_scheme static one float32
//    input_scale per module. A bfloat16 checkpoint quantized at load (scaled_fp8_quant) ends the same. With the
//    checkpoint's weight_block_size: the weight and a float32 weight_scale_inv grid per module
//    (cost_models/vllm_fp8_block.h), refused where validate_fp8_block_shape refuses the shards.
//  - gptq (gptq.py at e5dd90b, GPTQLinearMethod.create_weights and process_weights_after_loading): qweight int32
//    [in_p x bits / 32, out_p]; scales in the model's type and qzeros int32 [S, out_p x bits / 32] with
//    S = input_size / group_size, or in_p / group_size for a row-parallel layer without desc_act (group_size -1:
//    one group, S = 1); g_idx int32 [in_p] kept with desc_act (argsort), else replaced by an empty tensor.
//  - awq (awq.py at 000796a, AWQLinearMethod.create_weights and apply): qweight int32 [in_p, out_p / 8], qzeros int32
//    [in_p / group_size, out_p / 8], scales [in_p / group_size, out_p] in the model's type (4 bits only). Its
//    apply dequantizes the whole weight to [in_p, out_p] in the model's type (ops.awq_dequantize) when a step
//    has 256 tokens or more (FP16_MATMUL_HEURISTIC_CONDITION): that transient is counted on the forward's peak.
// The gptq and awq layouts are cost_models/packed_int_weights.h's, shared with --frozen-dtype gptq-int4 / awq-int4.
// vLLM fuses the projections that read one input into one module (QKVParallelLinear, MergedColumnParallelLinear):
// the graph's MatMuls on one activation are one module here (one scale, one g_idx).
struct VllmQuantization {
  std::string method;      // "fp8", "gptq", "awq"; "": none
  int bits = 4;            // gptq: 2, 3, 4, 8; awq: 4
  int64_t group_size = 128;  // gptq, awq; -1 (gptq): one group over the input
  bool desc_act = false;   // gptq's act-order
  bool static_activations = false;  // fp8's activation_scheme static
  VllmFp8Block block;               // fp8's weight_block_size (the checkpoint's only; off: per-tensor)
  // A ModelOpt FP8 checkpoint (onnx_import/hf_modelopt.h): vLLM's ModelOptFp8LinearMethod (quantization/modelopt.py
  // at c9a5990, create_weights and process_weights_after_loading) makes weight float8_e4m3fn [out_p, in_p] and
  // weight_scale and input_scale float32 [shards], then keeps weight_scale's max (the shards requantized to it:
  // requantize_with_max_scale) and input_scale's max: one float each a module, fp8's static per-tensor layout above
  // (method "fp8", static_activations), sized by the same rule.
  bool modelopt = false;
  bool modelopt_kv_fp8 = false;  // its kv_cache_quant_algo FP8
  // The GPU's compute capability (major x 10 + minor), on which the kernels' layouts and scratch depend: block-wise
  // fp8's input padding on 9.0, nvfp4's kernel (cost_models/vllm_nvfp4.h: Marlin's layout below 10.0, the FP4
  // GEMM's from it); and its multiprocessors (nvfp4 Marlin's workspace and c_tmp).
  int capability = 0;
  int multiprocessors = 0;
  // nvfp4 from 10.0: FlashInfer usable, so ModelOptNvFp4LinearMethod's backend is flashinfer-cutlass (FlashInfer's
  // mm_fp4 and its cached workspace, kFlashInferGemmWorkspaceBytes); else "cutlass" (cutlass_scaled_fp4_mm, no
  // workspace of its own).
  bool flashinfer_gemm = true;
  bool nvfp4_marlin() const { return vllm_nvfp4_marlin(capability); }
};

// Per-tensor fp8's float32 scales a module once loaded (Fp8LinearMethod, ModelOptFp8LinearMethod): weight_scale, and
// input_scale with static activations.
uint64_t vllm_fp8_tensor_scale_bytes(bool static_activations);

// One vLLM linear module as vllm_quantized_linears groups them (the graph's linear layers that read one activation),
// one rank's sizes: what another engine's layout of the same modules is sized from (cost_models/sglang_weights.h).
struct VllmLinearModule {
  std::vector<std::string> nodes;  // the graph's layers in it, in the graph's order
  int64_t in_p = 0, input_size = 0;  // one rank's input features, and the whole layer's
  int64_t out_p = 0, output_size = 0;  // one rank's output features (the shards summed), and every rank's
  std::vector<int64_t> shards;     // each logical shard's outputs on one rank (output_partition_sizes)
};

struct VllmQuantizedLinears {
  int layers = 0, modules = 0;        // the graph's linear layers quantized, and the vLLM modules they form
  uint64_t dense_bytes = 0;           // what the graph counts for their weights (one rank's, in `dtype`)
  uint64_t quantized_bytes = 0;       // what vLLM holds for them instead
  uint64_t dequantized_bytes = 0;     // awq at 256 tokens or more: the largest layer's dequantized weight
  uint64_t workspace_bytes = 0;       // nvfp4's FP4 GEMM: FlashInfer's mm_fp4 workspace, cached by the first call
  // Block-wise fp8 and nvfp4: each quantized layer's node, in the graph's order, and what its call allocates beside
  // its output at the step's tokens (fp8: per_token_group_quant_fp8's quantized input; nvfp4: vllm_nvfp4_call_bytes).
  std::vector<std::pair<std::string, uint64_t>> call_bytes;
  std::vector<VllmLinearModule> module_shapes;  // the modules, in the graph's order of first reads
  uint64_t linear_bytes = 0;  // what vLLM holds for the modules alone (quantized_bytes before any experts are added)
};

// Throws InputError naming the model and the layer when vLLM's create_weights would refuse the shape (an input
// not a multiple of group_size, an output not a multiple of the packing, a block-wise fp8 shard off the blocks).
// `left_out`: MatMul nodes that are no LinearBase of vLLM's (a mixture of experts' routers and experts: FusedMoE's
// own weights), neither counted nor quantized here.
VllmQuantizedLinears vllm_quantized_linears(const Graph& g, const std::string& lm_head, int tp, bool replicate_kv_heads,
                                            const VllmQuantization& q, int64_t step_tokens, DType dtype,
                                            const std::string& model, const std::set<std::string>& left_out = {});

}  // namespace memplan
