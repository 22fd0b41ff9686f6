// serve --engine vllm: what vLLM's V1 engine prints at start-up for a decoder on a GPU ("GPU KV cache size: N
// tokens", "Maximum concurrency for L tokens per request: X"), with the terms of its budget: the rule is
// cost_models/vllm_engine.h's; this file runs its profile step on the model and formats the answer
// ("memplan.serve.vllm/1", docs/json.md; the formats are report/serve_vllm_format.cc).
//
// The profile step is memplan's inference estimate of the decoder shaped for one step of
// --max-batched-tokens new tokens with nothing cached, on PyTorch's caching allocator (its peak allocated
// bytes), with what vLLM's kernels replace taken out (cost_models/engine_kernels.h): attention runs as a kernel
// (no score matrix), repeat_kv's expanded keys and values and the LM head's logits over every token never exist,
// and the cache's own tensors live in the blocks. The graph's other ops are counted as exported.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cost_models/engine_kernels.h"
#include "cost_models/vllm_engine.h"
#include "cost_models/vllm_expert_parallel.h"
#include "cost_models/vllm_fused_moe.h"
#include "cost_models/vllm_kv_groups.h"
#include "cost_models/vllm_mla.h"
#include "cost_models/vllm_nvfp4.h"
#include "cost_models/mxfp4_experts.h"
#include "onnx_import/errors.h"
#include "cost_models/vllm_weights.h"
#include "report/serve_probe.h"

namespace memplan {

inline constexpr const char* kServeVllmSchema = "memplan.serve.vllm/1";

// The engine's settings as they resolved, each with where its value came from.
struct VllmResolved {
  VllmEngineSettings engine;
  VllmVersion version = VllmVersion::V0_11;
  VllmRule rule = vllm_rule("0.11");  // what the version's rule does differently
  std::string version_text = "0.11";  // as given
  bool version_given = false;         // --engine-version given, else memplan's default release
  VllmUsageContext usage_context = VllmUsageContext::Serve;  // --usage-context: which default step table applies
  VllmPerformanceMode performance_mode = VllmPerformanceMode::Balanced;  // --performance-mode
  bool enforce_eager = false;
  uint64_t cuda_graph_estimate = 0;  // --cuda-graph-memory: vLLM's estimate, subtracted (0.20 on; 0: not given)
  // --flashinfer: FlashInfer usable (vLLM's has_flashinfer, or flashinfer.sampling importable for the sampler);
  // none: auto, memplan's assumption on each path (absent for the sampler, present for NVFP4's GEMM and the MLA
  // backends' import; gpt-oss's MXFP4 on SM100 from 0.12 refused, either layout possible).
  std::optional<bool> flashinfer;
  VllmModelRunner runner = VllmModelRunner::V1;  // resolved with the model (its experts): serve_vllm
  std::string max_model_len_source;           // "--context", or the model's position limit
  bool default_batched_tokens = false, default_num_seqs = false;  // vLLM's defaults for the GPU
  int64_t profile_requests = 0;
  int tp = 1;
  int dp = 1;  // --data-parallel-size: the answer is one rank's (rank 0's experts), each DP rank its own engine
};

// A mixture of experts' sparse blocks run by vLLM's fused MoE kernel (cost_models/vllm_fused_moe.h;
// report/serve_vllm_moe.cc): blocks 0 when the model has none.
struct VllmMoeAnswer {
  int blocks = 0;
  int64_t experts = 0, top_k = 0, intermediate = 0, intermediate_per_rank = 0, hidden = 0;
  uint64_t expert_weight_bytes = 0;  // one rank's w13 and w2 of every sparse layer (in the weights term)
  VllmFusedMoeBytes kernel;          // one call's buffers at the profile step (and the modular kernel's workspace)
  bool modular = false;              // 0.14 on: the modular kernel, its workspace held from the first MoE layer
  uint64_t peak_allocated = 0;       // the forward's allocated bytes at the fullest router plus the kernel's buffers
  // MXFP4 experts (gpt-oss; cost_models/mxfp4_experts.h): the backend's layer and graph bytes they replace.
  bool mxfp4 = false;
  VllmMxfp4Backend mxfp4_backend = VllmMxfp4Backend::Triton;
  Mxfp4ExpertsLayer mxfp4_layer;
  uint64_t graph_expert_bytes = 0;   // the graph's experts (weights and biases, served type) the MXFP4 or NVFP4
                                     // ones replace
  // ModelOpt NVFP4 experts (cost_models/vllm_nvfp4.h; report/serve_vllm_modelopt.cc): Marlin's layer, one rank's.
  bool nvfp4 = false;
  VllmNvfp4Experts nvfp4_layer;
  // --enable-expert-parallel (cost_models/vllm_expert_parallel.h): rank 0's whole experts (expert_weight_bytes) in
  // place of the graph's tensor-parallel share of them (graph_expert_bytes), and every layer's expert_map.
  bool expert_parallel = false;
  VllmExpertParallel ep;
  uint64_t expert_map_bytes = 0;
  // --data-parallel-size D (with expert parallelism; cost_models/vllm_expert_parallel.h): the kernel runs on the
  // tokens of every DP rank (kernel_tokens = D x the step's), gathered by the naive dispatch (dispatch_bytes: hidden
  // states and router logits), and the combine's output (combine_bytes: naive's out-of-place all-reduce over them).
  int data_parallel = 1;
  int64_t kernel_tokens = 0;
  uint64_t dispatch_bytes = 0, combine_bytes = 0;
  uint64_t at_router = 0;            // the forward's allocated bytes at the fullest router step
};

// The MoE's peak on the profile step: at the fullest router, the dispatch's gathered tensors and the larger of the
// kernel's buffers (with `extra`: fp8's quantized activations) and the combine's (the kernel's output kept).
uint64_t vllm_moe_peak(const VllmMoeAnswer& m, uint64_t extra);

// Multi-head latent attention (a deepseek_v3 config.json) as vLLM runs it (cost_models/vllm_mla.h;
// report/serve_vllm_mla.cc): on false for any other model.
struct VllmMlaAnswer {
  bool on = false;
  std::string backend;                // the MLA backend vLLM picks for the GPU (its block size's reason)
  int64_t requested_block_size = 0, block_size = 0;  // --block-size, and the backend's
  VllmMlaShape shape;
  int decompression_layers = 0;       // layers whose decompressed keys and values the profile holds outside
  VllmMlaProfile profile;
  uint64_t peak_allocated = 0;        // the fullest attention step's allocated bytes plus the simulated tensor
  uint64_t router_bias_bytes = 0;     // e_score_correction_bias in float32 beyond the graph's served type
  uint64_t module_workspace_bytes = 0;  // what importing the MLA backends allocates at load (VllmMlaChoice)
  std::string module_workspace;         // whose
};

// A block-wise fp8 checkpoint (quantization_config weight_block_size), or a per-tensor fp8 one with experts
// (block_n 0; cost_models/vllm_fp8_block.h, report/serve_vllm_fp8.cc): on false for any other quantization.
struct VllmFp8BlockAnswer {
  bool on = false;
  int64_t block_n = 0, block_k = 0;   // 0: per-tensor
  bool static_activations = false;    // per-tensor's activation_scheme static
  int routers = 0;                    // the routers left in the model's type (no LinearBase)
  std::set<std::string> router_nodes; // every router's linear layer, quantized by vLLM or not (another engine's
                                      // rule may hold them otherwise: cost_models/sglang_weights.h)
  uint64_t router_bytes = 0;          // their weights, one rank's
  uint64_t expert_weight_bytes = 0;   // every sparse layer's fp8 w13 and w2, one rank's
  uint64_t expert_scale_bytes = 0;    // their float32 weight_scale_inv
  uint64_t graph_expert_bytes = 0;    // the graph's experts (served type) they replace
  uint64_t moe_quant_bytes = 0;       // fused_experts_impl's quantized activations and scales a call
  uint64_t mla_absorbed_bytes = 0;    // MLA's dequantized kv_b_proj (W_UV, W_UK_T), every layer's
  std::string input_quant_node;       // the linear layer whose quantized input sets the dense peak
  uint64_t input_quant_bytes = 0;     // per_token_group_quant_fp8's x_q and x_s there
  uint64_t input_quant_peak = 0;      // that step's allocated bytes plus them (graph's weights)
};

// Which sampler the profile run's warm-up runs (cost_models/vllm_engine.h): V0's, V1's PyTorch sort, V1's Triton
// top-k/top-p kernel (0.17 on, 8 rows or more), FlashInfer's (0.9.0 to 0.11.0 with --flashinfer yes), Model Runner
// V2's Gumbel sampler.
enum class VllmSamplerPath { V0Sort, Sort, Triton, FlashInfer, Gumbel };

// A quantized linear layer's call at the profile run's step (vllm_largest_call_peak): that step's allocated bytes (the
// graph's weights) plus the call's, the layer, and the call's bytes.
struct VllmCallPeak {
  uint64_t peak = 0;
  std::string node;
  uint64_t bytes = 0;
};

struct VllmAnswer {
  std::string model, gpu;           // gpu: the catalog's name, or "" for --memory
  bool non_torch_given = false;     // --reserve given (else VllmNonTorch's default for the rule)
  std::string budget_source;        // how the total was given
  VllmResolved settings;
  std::string kv_cache_dtype;
  bool enable_lora = false;
  int64_t max_loras = 0, max_lora_rank = 0;
  std::string dtype;                // the weights' and activations' type as served: the graph's, or --dtype
  KvCache kv;
  int64_t kv_heads_per_rank = 0;    // 0: not known (tp 1)
  uint64_t kv_bytes_per_token = 0;  // one rank's
  uint64_t block_bytes = 0;         // every layer's block of block_size tokens
  // The window every attention layer slides over (a config.json's, vLLM's SlidingWindowSpec: cost_models/
  // vllm_engine.h VllmSlidingWindow), 0: full attention; the layers (the cache's pairs / 2, keys and values).
  int64_t sliding_window = 0;
  int64_t kv_layers = 0;
  // A hybrid model (some layers windowed, some not: Gemma 2, Gemma 3): vLLM's KV cache groups
  // (cost_models/vllm_kv_groups.h; group_size 0: not hybrid), its windowed layers and one layer's bytes per token.
  VllmKvGrouping grouping;
  int64_t sliding_layer_count = 0;
  uint64_t layer_bytes_per_token = 0;
  // The profile run.
  uint64_t forward_peak_allocated = 0, hidden_states_bytes = 0, sampler_peak_bytes = 0;
  VllmSamplerPath sampler = VllmSamplerPath::Sort;
  int64_t sampler_buffer_rows = 0;  // Triton: its cached buffer's rows
  int sampler_multiprocessors = 0;  // Triton: the GPU's multiprocessors that set them (0: not known, the largest)
  uint64_t kept_workspace_bytes = 0;  // PyTorch's cuBLAS workspace, still allocated while the sampler runs
  uint64_t lora_stacks_bytes = 0;     // --enable-lora: in the weights term, as vLLM counts them
  uint64_t rotary_cache_bytes = 0;    // vLLM's cos_sin_cache, in the weights term (0: the position limit unknown)
  int64_t vocab = 0, padded_vocab = 0;  // the head's vocabulary and vLLM's padded rows (0: no head found)
  uint64_t vocab_padding_bytes = 0;   // the padded rows beyond the graph's, in the weights term (one rank's)
  VllmQuantization quantization;      // method "": none
  std::string quantization_source;    // "--quantization", or the config's quantization_config
  VllmQuantizedLinears quantized;     // the linear layers as vLLM holds them (with --quantization)
  bool sampler_sets_peak = false;
  uint64_t custom_all_reduce_bytes = 0;  // in memory.non_torch beside --reserve (0.6.5 to 0.7, 0.9.1 to 0.10 at
                                         // tp >= 2; with the rank_data tensor for 0.6.x: VllmRule)
  VllmMemory memory;
  VllmKvCapacity capacity;
  int64_t max_concurrent_sequences = 0;  // floor(max_concurrency)
  // What vLLM's kernels replaced in the graph, for the user to see why eager's answer differs.
  std::string lm_head;              // the head's node ("": none found, the logits counted as the graph has them)
  int attention_kernels = 0;        // attention blocks run as a kernel
  std::vector<std::string> repeat_kv;  // repeat_kv's Expand nodes, read in place
  VllmMoeAnswer moe;                   // the experts, run by vLLM's fused MoE kernel
  VllmMlaAnswer mla;                   // deepseek_v3's latent attention
  VllmFp8BlockAnswer fp8_block;        // a block-wise fp8 checkpoint's experts, scales and quantized inputs
  VllmCallPeak nvfp4_call;  // NVFP4 (cost_models/vllm_nvfp4.h): the layer whose call sets the dense peak, and its bytes
  int nvfp4_unquantized_routers = 0;  // NVFP4 experts: the routers vLLM keeps in the model's type (vllm_moe_left_out)
  bool fits() const { return capacity.starts; }
};

// A GPU the quantization method does not run on as memplan models it (the single-GPU answer's InputError; a
// catalog table's row). `vllm_refuses`: vLLM itself refuses the GPU (below the method's get_min_capability), else
// vLLM runs a kernel whose layout memplan does not size (FP8 Marlin).
// The checkpoint's weights as the engines that share this analysis load them: vLLM's weights term less what vLLM's
// own layers and modules add (LoRA stacks, rotary cache, vocabulary padding, MLA's module workspaces).
uint64_t vllm_shared_weights(const VllmAnswer& v);

class VllmGpuRefused : public InputError {
 public:
  VllmGpuRefused(const std::string& message, bool vllm_refuses) : InputError(message), vllm_refuses(vllm_refuses) {}
  bool vllm_refuses;
};

struct VllmTableRow {
  std::string gpu;
  uint64_t memory_bytes = 0, requested_bytes = 0;
  int64_t available_bytes = 0;
  int64_t kv_tokens = 0;
  double max_concurrency = 0;
  bool starts = false;
  std::string not_answered;  // a VllmGpuRefused's message: vLLM refuses this GPU, or memplan does not model it
  bool vllm_refuses = false;
  // A windowed model: the blocks one request holds at most, which the GPU's max_num_batched_tokens sets.
  int64_t max_num_batched_tokens = 0, blocks_per_request = 0;
  // The type vLLM's --dtype auto serves on this GPU (bfloat16 from 8.0) and the cache's bytes in it: said for a row
  // only where they differ from the table's (a float32 checkpoint, or gemma2's float32 below 8.0).
  std::string dtype;
  uint64_t kv_bytes_per_token = 0;
  // deepseek_v3: the MLA backend this GPU runs at the release, and its block size.
  std::string mla_backend;
  int64_t block_size = 0;
};
struct VllmTable {
  std::string model;
  int64_t max_model_len = 0, block_size = 0;
  double gpu_memory_utilization = 0;
  std::string dtype;  // the answered rows' commonest type (catalog order breaks a tie), and its bytes per token
  uint64_t kv_bytes_per_token = 0, non_torch_bytes = 0;  // non_torch_bytes: VllmNonTorch's
  bool non_torch_given = false;                          // --reserve given
  bool non_torch_absolute = false;                       // the version's rule charges every byte outside PyTorch
  uint64_t custom_all_reduce_bytes = 0;  // beside --reserve on every GPU (0.6.5 to 0.7, 0.9.1 to 0.10 at tp >= 2)
  bool custom_all_reduce_rank_data = false;  // with its rank_data tensor (0.6.5 to 0.6.x)
  std::string engine_version;
  bool engine_version_given = false;  // else memplan's default release
  int64_t sliding_window = 0;  // the windowed layers' window (0: full attention)
  int64_t kv_layers = 0, sliding_layer_count = 0;  // a hybrid model's layers and windowed ones (else equal)
  bool mla = false;  // deepseek_v3: each GPU's MLA backend sets its block size (block_size: --block-size)
  std::vector<VllmTableRow> rows;
};

// What memplan does not size under vLLM's V0 engine (cost_models/vllm_engine.h V0_6), each refused with its
// reason (report/serve_vllm_v0.cc): --enable-lora (V0's profile run activates dummy LoRAs), quantization, a
// mixture of experts (`moe`) and --dtype auto on a checkpoint whose type V0 would change.
void vllm_v0_refusals(ServeProbe& probe, const ServeSettings& s, bool moe);
// --gpu-memory-utilization as given, else the default of --engine-version's release (VllmRule).
double vllm_gpu_memory_utilization(const ServeSettings& s);

// The memory outside PyTorch that vLLM's rule charges (VllmMemory::non_torch, beside the custom all-reduce's buffers
// serve_vllm adds): `given` (--reserve) when given. Otherwise what vLLM's rule takes of it that memplan models: the
// absolute rules (0.6.0 to 0.6.4, 0.8 to 0.9.0: VllmRule::absolute_budget) charge every byte outside PyTorch on the
// GPU, the CUDA context first, so the catalog's context reserve (`context_reserve`); the others charge only what
// appears after the snapshot Worker.init_device takes once the context exists (cost_models/vllm_engine.h), so
// nothing: the kernels loaded on first use during the profile run are not modelled (vLLM logs the increase as its
// "non-torch memory"; --reserve charges it). A plain byte count converts to a given one (the other engines' analysis).
struct VllmNonTorch {
  VllmNonTorch(uint64_t given_bytes) : given(given_bytes) {}  // NOLINT(google-explicit-constructor)
  VllmNonTorch(std::optional<uint64_t> given_bytes, uint64_t context_reserve_bytes)
      : given(given_bytes), context_reserve(context_reserve_bytes) {}
  std::optional<uint64_t> given;
  uint64_t context_reserve = 0;
  uint64_t bytes(const VllmRule& rule) const { return given ? *given : rule.absolute_budget ? context_reserve : 0; }
};

// vLLM on one GPU (or a --memory total, `gpu_name` ""), its non-torch memory `non_torch` (above), its compute
// capability `capability` (major x 10 + minor: what vLLM's quantization methods check).
VllmAnswer serve_vllm(ServeProbe& probe, const ServeSettings& settings, int tp, uint64_t total_memory,
                      const std::string& gpu_name, std::string budget_source, const VllmNonTorch& non_torch,
                      int capability);

// report/serve_vllm_moe.cc: on the forward's estimate of the profile step, whose sparse blocks' tensors
// (find_moe_blocks: ServeProbe::kernel_sites) are held outside it (the fused kernel computes in its own buffers), the
// kernel's terms.
// `mxfp4_capability` > 0: the experts are MXFP4 (a gpt-oss checkpoint) on a GPU of that compute capability, held by
// `mxfp4_backend` (vllm_mxfp4_backend_for_gpu's), Marlin's workspace sized by the GPU's `multiprocessors` (0: not
// known).
// `expert_parallel`: vLLM's --enable-expert-parallel over the dp x tp GPUs; refuses MXFP4 and gpt_oss experts.
// `dp`: --data-parallel-size (above 1 only with expert parallelism: refused otherwise).
// `modular`: vLLM 0.14 on, the unquantized kernel (and NVFP4's Marlin experts, vllm_nvfp4_experts_apply; MXFP4's
// Marlin backend from 0.17) in the modular kernel (cost_models/vllm_fused_moe.h): cache13 and cache2 are the
// WorkspaceManager's buffer, which `forward` already holds from the first router on (vllm_hold_moe_workspace);
// refuses MXFP4's other backends.
// `rule`: the version's (VllmRule: fused_experts_impl's chunk, the MXFP4 Marlin kernel's atomic add).
VllmMoeAnswer vllm_fused_moe(const std::vector<MoeBlock>& blocks, const Estimate& forward, int tp, DType served,
                             const std::string& model, int mxfp4_capability, bool expert_parallel, int dp,
                             std::optional<VllmMxfp4Backend> mxfp4_backend, int multiprocessors, bool modular,
                             const VllmRule& rule);

// One rank's expert width for `block` under --tp `tp` and --data-parallel-size `dp`: I / tp, or I whole where
// --enable-expert-parallel (`expert_parallel`) takes effect (tp x dp > 1); throws as vllm_moe_intermediate_per_rank.
int64_t vllm_moe_rank_width(const MoeBlock& block, int tp, int dp, bool expert_parallel, const std::string& model);

// The fused kernel's shape for `m` (its tokens, experts, width a rank, the modular kernel and expert parallelism)
// at the release `rule` names (the chunk, get_default_config's block): the unquantized and fp8 experts' Triton path.
VllmFusedMoeShape vllm_moe_shape(const VllmMoeAnswer& m, const VllmRule& rule);

// The backend vLLM takes for gpt-oss's MXFP4 experts on a GPU of compute capability `capability`
// (cost_models/mxfp4_experts.h vllm_mxfp4_backend, given --mxfp4-backend's `requested` and --flashinfer's
// `flashinfer`); a GPU whose backend memplan does not size throws VllmGpuRefused (that GPU's row of the catalog
// table, exit 2 alone).
VllmMxfp4Backend vllm_mxfp4_backend_for_gpu(int capability, std::optional<VllmMxfp4Backend> requested,
                                            const VllmRule& rule, std::optional<bool> flashinfer,
                                            const std::string& model);

// vLLM 0.14 on: the modular kernel's WorkspaceManager buffer (cost_models/vllm_fused_moe.h) for `blocks` at
// `tokens` a call (the step's, every data-parallel rank's under expert parallelism), `hidden` and `width`, one rank's
// expert width, as the kernel holds them (H and I_p; NVFP4's Marlin width, vllm_nvfp4_marlin_moe_width; MXFP4
// Marlin's H_pad and I_pad), added to `forward`'s allocated bytes from the first router's step on (its allocated_bytes
// the larger of the steps before and those after with it); the bytes added.
uint64_t vllm_hold_moe_workspace(Estimate& forward, const std::vector<MoeBlock>& blocks, int64_t tokens, int64_t hidden,
                                 int64_t width, DType served, const std::string& model);
nlohmann::ordered_json vllm_moe_to_json(const VllmMoeAnswer& m);
std::string vllm_moe_to_text(const VllmMoeAnswer& m);
// "blocks B, scales S[ swizzled and R as loaded[ (the swizzled copies' Hopper padding P)]], float32 biases F" for
// `layers` sparse layers of `l`: the parts vLLM's and SGLang's MXFP4 lines share.
std::string mxfp4_layer_parts_text(const Mxfp4ExpertsLayer& l, uint64_t layers);

// report/serve_vllm_mla.cc. vllm_mla_settings: for a deepseek_v3 config, refuses what is not modelled (another
// engine than vllm, --engine-version 0.8, a --tp that does not divide the heads, an fp8 cache on Triton MLA) and sets the block size the MLA
// backend runs with in `r`; m.on false for any other model. vllm_mla_hold: the decompression the profile run does not
// compute, added to `held_outside`; refuses a graph whose presents do not all lead to it. vllm_mla_place: the
// simulated tensor on the fullest attention step of the forward (`attention_steps`: the fused attentions' names).
VllmMlaAnswer vllm_mla_settings(ServeProbe& probe, const ServeSettings& s, int tp, int capability, VllmResolved& r);
void vllm_mla_hold(const Graph& g, const std::vector<std::string>& presents, VllmMlaAnswer& m,
                   std::vector<std::string>& held_outside, const std::string& model);
void vllm_mla_place(VllmMlaAnswer& m, const Estimate& forward, const std::vector<std::string>& attention_steps,
                    int64_t max_model_len, int64_t max_num_seqs, int64_t block_size, DType served);
nlohmann::ordered_json vllm_mla_to_json(const VllmMlaAnswer& m);
std::string vllm_mla_to_text(const VllmMlaAnswer& m);

// report/serve_vllm_quantization.cc. The quantization vLLM serves with: --quantization, else the checkpoint's
// (vllm/config ModelConfig._verify_quantization: a flag that names another method than the config's is refused), its
// bits and group size from the flags, else the config, else 4 bits and groups of 128; checked against what the
// method's config class accepts (GPTQConfig: 2, 3, 4, 8 bits; AWQConfig: 4), the GPU (get_min_capability: fp8 80,
// gptq 60, awq 75; fp8 below 8.9 runs FP8 Marlin, whose repacked scales are not sized here) and the served type
// (get_supported_act_dtypes: gptq and awq float16, fp8 bfloat16 and float16). `source` gets where the method came
// from. Throws InputError, or VllmGpuRefused for the GPU.
VllmQuantization vllm_quantization(ServeProbe& probe, const ServeSettings& s, const VllmResolved& r, int capability,
                                   int multiprocessors, DType served, std::string& source);

// report/serve_vllm_modelopt.cc, a ModelOpt FP8 checkpoint (onnx_import/hf_modelopt.h reads it).
// vLLM's quantization for the checkpoint: ModelOptFp8LinearMethod's layout (method "fp8", static activations,
// `modelopt`), `source` naming the file. Throws InputError for a --quantization (vLLM's ModelConfig.
// _verify_quantization refuses one that differs from the checkpoint's "modelopt"), a float32 --dtype
// (ModelOptFp8Config.get_supported_act_dtypes: bfloat16, float16) and, for --engine vllm, --kv-cache-dtype auto on
// a checkpoint whose kv_cache_quant_algo is FP8 at --engine-version 0.13 or later (below); VllmGpuRefused below
// compute capability 8.9 (ModelOptFp8Config.get_min_capability 89; modelopt.py at c9a5990).
//
// The KV cache's type under --kv-cache-dtype auto: the model's up to 0.13 (CacheConfig.cache_dtype "auto" is the
// model's dtype; the checkpoint's kv_cache_quant_algo only loads k_scale / v_scale through BaseKVCacheMethod, whose
// process_weights_after_loading copies them into the Attention's own _k_scale / _v_scale and deletes the
// parameters: quantization/kv_cache.py, index id 111208572). vLLM PR #30785 (merged 2025-12-17, after the v0.13.0
// branch of 2025-12-15, which carries PR #29980's same change reverted by #30653: a fork's tags,
// docs/research/vllm-013-marlin-atomic-add.md) resolves auto to fp8_e4m3 from the checkpoint's
// kv_cache_quant_algo in EngineArgs.create_engine_config (vllm/utils/torch_utils.py resolve_kv_cache_dtype_string),
// and issue #34752 (February 2026) reports auto still resolving to the model's type for some ModelOpt checkpoints:
// which releases do what is not settled here, so 0.14 and later are refused without an explicit --kv-cache-dtype.
// `r`: the release's rule and --flashinfer as resolved.
VllmQuantization vllm_modelopt_quantization(const StoredQuantization& stored, const ServeSettings& s,
                                            const VllmResolved& r, int capability, int multiprocessors, DType served,
                                            const std::string& model, std::string& source);

// ModelOpt NVFP4 experts (cost_models/vllm_nvfp4.h). vllm_nvfp4_experts_check, before the profile: throws
// InputError for an --engine-version before 0.11 (VllmRule.nvfp4_marlin_moe: the path not read), VllmGpuRefused
// from compute capability 10.0 (vLLM's CUTLASS or FlashInfer FP4 MoE, not sized); below the release's least
// capability vllm_modelopt_quantization refuses the checkpoint.
// vllm_nvfp4_experts_apply, after vllm_fused_moe and the linear layers: Marlin's layer in place of the graph's
// experts (a.moe's weights; a.quantized's replaced and quantized bytes), its kernel's buffers (fused_marlin_moe's to
// 0.13, MarlinExperts' in the modular kernel from 0.14: a.moe.modular) and the MoE peak.
void vllm_nvfp4_experts_check(const VllmResolved& settings, int capability, const std::string& model);
void vllm_nvfp4_experts_apply(VllmAnswer& a, int multiprocessors, DType served);

// The graph's linear layers of the checkpoint's exclude_modules (each "model.layers.N.self_attn.o_proj" or
// "model.layers.N.mlp.down_proj": the MatMul of the scope "/layers.N/mlp/down_proj/"), which every engine
// keeps in the model's type (UnquantizedLinearMethod; SGLang's get_quant_method returns None; TensorRT-LLM's
// exclude_modules). Throws std::logic_error if one is not in the graph (the config's layers are).
std::set<std::string> modelopt_excluded_nodes(const Graph& g, const StoredQuantization& stored,
                                              const std::string& model);

// The largest of the profile's steps at each quantized linear layer (`calls`: its node and what its call allocates
// beside its output), with what that call adds: the steps' allocated bytes (the graph's weights) plus the call's.
// Layers whose output is held outside the profile step, or fused into another step, are not placed.
VllmCallPeak vllm_largest_call_peak(const Graph& g, const Estimate& forward, const std::vector<std::string>& held_outside,
                                    const std::vector<std::pair<std::string, uint64_t>>& calls, const std::string& model);

// report/serve_vllm_fp8.cc, a block-wise fp8 checkpoint (a.quantization.block on) or per-tensor fp8 with experts.
// vllm_fp8_block_check_gpu: refuses (VllmGpuRefused) a GPU whose block-wise kernels are not the sized ones (compute
// capability other than 8.9 and 9.0). vllm_moe_left_out (fp8 and ModelOpt NVFP4 experts): the MatMul nodes of
// `blocks` that vLLM does not quantize as linear layers (every expert projection: FusedMoE's own; each router where
// `stored.moe_router` says it is unquantized or the config lists it; qwen2_moe's shared_expert_gate; refuses a
// model_type whose router is not read, and a config listing some routers only; `router_nodes`: every router's
// node). vllm_fp8_block_apply, on the forward's estimate: the experts as
// Fp8MoEMethod holds them (a.moe's weights, kernel block size and peak; per-tensor ones refused on ROCm's 9.4 and
// 9.5, VllmGpuRefused), MLA's dequantized kv_b_proj, and the fullest block-quantized linear step with its quantized
// input (skipping the nodes whose output is in `held_outside`).
void vllm_fp8_block_check_gpu(const VllmQuantization& q, int capability);
std::set<std::string> vllm_moe_left_out(const Graph& g, const std::vector<MoeBlock>& blocks,
                                        const StoredQuantization& stored, int& routers,
                                        std::set<std::string>& router_nodes, const std::string& model);
void vllm_fp8_block_apply(VllmAnswer& a, const Graph& g, const Estimate& forward, const std::vector<MoeBlock>& blocks,
                          const std::vector<std::string>& held_outside, int capability, DType served);
nlohmann::ordered_json vllm_fp8_block_to_json(const VllmFp8BlockAnswer& f);
std::string vllm_fp8_block_to_text(const VllmFp8BlockAnswer& f);

nlohmann::ordered_json vllm_to_json(const VllmAnswer& a);
std::string vllm_to_text(const VllmAnswer& a);
// The table's type and bytes per token: the answered rows' commonest (catalog order breaks a tie); the rows that
// differ say theirs.
void vllm_table_common_type(VllmTable& t);
nlohmann::ordered_json vllm_table_to_json(const VllmTable& t);
std::string vllm_table_to_text(const VllmTable& t);
std::string vllm_table_to_markdown(const VllmTable& t);

}  // namespace memplan
