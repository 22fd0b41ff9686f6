// serve --engine vllm on a mixture of experts (report/serve_vllm.h VllmMoeAnswer): the exported sparse blocks'
// per-expert gather, MLP and scatter are held outside the profile step, and vLLM's fused MoE kernel
// (cost_models/vllm_fused_moe.h) allocates its buffers while the block runs: at the router's step of the forward,
// on top of what PyTorch holds allocated there (the residual stream, the block's input, the router's logits).
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "report/serve_vllm.h"
#include "report/sizes.h"

namespace memplan {

VllmMoeAnswer vllm_fused_moe(const std::vector<MoeBlock>& blocks, const Estimate& forward, int tp, DType served,
                             const std::string& model, int mxfp4_capability, bool expert_parallel, int dp,
                             std::optional<VllmMxfp4Backend> mxfp4_backend, int multiprocessors, bool modular,
                             const VllmRule& rule) {
  VllmMoeAnswer m;
  if (blocks.empty()) return m;
  if ((mxfp4_capability > 0) != mxfp4_backend.has_value())
    throw std::logic_error("vllm_fused_moe: MXFP4 experts come with their backend");
  if (modular && mxfp4_backend && *mxfp4_backend != VllmMxfp4Backend::Marlin)
    throw std::logic_error("vllm_fused_moe: the modular kernel is sized for Triton experts (unquantized, fp8) and "
                           "Marlin's");
  m.modular = modular;
  if (dp < 1) throw std::logic_error("vllm_fused_moe: dp must be positive");
  const MoeBlock& first = blocks.front();
  for (const MoeBlock& b : blocks)  // a config's sparse layers are alike (hf_moe.cc builds them from one config)
    if (b.experts != first.experts || b.top_k != first.top_k || b.hidden != first.hidden ||
        b.expert_intermediate != first.expert_intermediate || b.tokens != first.tokens)
      throw InputError("serve --engine vllm: the sparse blocks of " + model + " differ (" + first.topk + ", " +
                       b.topk + "): vLLM's fused MoE kernel is sized per block alike");
  // 3 projections an expert (gate, up, down), or 2 (gpt_oss: gate_up_proj holds gate and up, find_moe_blocks halves
  // its width): w13 and w2 either way.
  if (first.expert_linears != 3 * first.experts && first.expert_linears != 2 * first.experts)
    throw InputError("serve --engine vllm: " + model + "'s sparse block " + first.topk + " has " +
                     std::to_string(first.expert_linears) + " expert projections, not 3 (or 2) per expert for " +
                     std::to_string(first.experts) + " experts (vLLM's FusedMoE w13 and w2)");
  m.blocks = static_cast<int>(blocks.size());
  m.experts = first.experts;
  m.top_k = first.top_k;
  m.hidden = first.hidden;
  m.intermediate = first.expert_intermediate;
  // --enable-expert-parallel (cost_models/vllm_expert_parallel.h): on only where tp x dp > 1 (FusedMoEParallelConfig.
  // make's use_ep), as vLLM, which takes the flag on one GPU and runs without it.
  m.expert_parallel = expert_parallel && tp * dp > 1;
  m.data_parallel = dp;
  if (dp > 1 && !m.expert_parallel)
    throw InputError("--data-parallel-size " + std::to_string(dp) + " on " + model + "'s experts without "
                     "--enable-expert-parallel: vLLM then splits each expert's width over the " + std::to_string(dp * tp) +
                     " GPUs of every data-parallel rank (FusedMoEParallelConfig.make's flattened tp), which memplan does "
                     "not size; give --enable-expert-parallel");
  if (m.expert_parallel && (mxfp4_capability > 0 || first.expert_linears != 3 * first.experts))
    throw InputError("--enable-expert-parallel with " + model + "'s " +
                     (mxfp4_capability > 0 ? "MXFP4 experts" : "gpt_oss experts (gate_up_proj and biases)") +
                     ": memplan sizes vLLM's expert parallelism for the unquantized fused_experts kernel of three "
                     "projections an expert only (vLLM's Triton MXFP4 kernel, triton_kernel_moe_forward at 04bec4c, "
                     "routes over every expert and does not read expert_map)");
  m.ep = vllm_expert_parallel(first.experts, m.expert_parallel ? tp * dp : 1);
  // With expert parallelism FusedMoE's tp_size is 1: each expert whole (I_p = I), E_local of them.
  m.intermediate_per_rank = vllm_moe_rank_width(first, tp, dp, expert_parallel, model);
  // UnquantizedFusedMoEMethod.create_weights: w13_weight [E_local, 2·I_p, H] and w2_weight [E_local, H, I_p] in the
  // served type (E_local = E without expert parallelism).
  const uint64_t d = static_cast<uint64_t>(dtype_bits(served)) / 8;
  auto experts_bytes = [&](int64_t experts, int64_t width) {  // every sparse layer's w13 and w2
    const uint64_t per_layer = checked_mul(
        checked_mul(checked_mul(static_cast<uint64_t>(experts), 3, "expert bytes"), static_cast<uint64_t>(m.hidden),
                    "expert bytes"),
        checked_mul(static_cast<uint64_t>(width), d, "expert bytes"), "expert bytes");
    return checked_mul(per_layer, static_cast<uint64_t>(m.blocks), "expert bytes");
  };
  m.expert_weight_bytes = experts_bytes(m.ep.local_experts, m.intermediate_per_rank);
  if (m.expert_parallel) {
    // What the estimate counted for them: the graph's tensor-parallel plan splits each expert's gate and up by
    // columns and its down by rows (cost_models/tensor_parallel.h), which needs tp to divide I (the plan refuses
    // the graph otherwise): E x 3 x H x I / tp on a rank.
    if (first.expert_intermediate % tp != 0)
      throw std::logic_error("serve --engine vllm: the tensor-parallel plan of " + model + " split experts " +
                             std::to_string(first.expert_intermediate) + " wide over " + std::to_string(tp) + " GPUs");
    m.graph_expert_bytes = experts_bytes(m.experts, first.expert_intermediate / tp);
    m.expert_map_bytes = checked_mul(m.ep.expert_map_bytes, static_cast<uint64_t>(m.blocks), "expert map bytes");
  }
  // At dp > 1 every DP rank's step of tokens reaches the kernel (cost_models/vllm_expert_parallel.h): the gathered
  // hidden states and router logits (both in the served type: the gate is a linear layer of the model's type).
  if (first.tokens > std::numeric_limits<int64_t>::max() / dp)
    throw std::logic_error("vllm_fused_moe: the gathered tokens overflow (serve_vllm refuses that step first)");
  m.kernel_tokens = first.tokens * dp;
  m.dispatch_bytes = vllm_dp_dispatch_bytes(first.tokens, dp, first.hidden, first.experts, d);
  m.kernel = vllm_fused_moe_bytes(vllm_moe_shape(m, rule), served);
  // naive's combine: get_dp_group().all_reduce of the kernel's output [D·T, H], out of place (a new tensor of its
  // size), while the output is held; allgather_reducescatter's reduce_scatterv output [T, H] is smaller.
  m.combine_bytes = dp > 1 ? m.kernel.output_bytes : 0;
  if (mxfp4_capability > 0) {  // gpt-oss's MXFP4 experts: Mxfp4MoEMethod (cost_models/mxfp4_experts.h)
    if (first.expert_linears != 2 * first.experts || served != DType::BFloat16)
      throw InputError("serve --engine vllm: " + model + "'s MXFP4 experts are sized for gpt_oss in bfloat16 "
                       "(Mxfp4Config's only activation type)");
    m.mxfp4 = true;
    m.mxfp4_backend = *mxfp4_backend;
    const bool marlin = m.mxfp4_backend == VllmMxfp4Backend::Marlin;
    const bool flashinfer_backend = m.mxfp4_backend == VllmMxfp4Backend::FlashInfer;
    // Each rank's FusedMoE at I_p = I / tp, padded by the backend, its w2_bias whole.
    m.mxfp4_layer =
        marlin ? vllm_mxfp4_marlin_layer(m.experts, m.hidden, m.intermediate_per_rank, multiprocessors, model)
        : flashinfer_backend ? vllm_mxfp4_flashinfer_layer(m.experts, m.hidden, m.intermediate_per_rank, model)
                             : vllm_mxfp4_layer(m.experts, m.hidden, m.intermediate_per_rank, mxfp4_capability, model);
    m.expert_weight_bytes = checked_mul(m.mxfp4_layer.total(), static_cast<uint64_t>(m.blocks), "expert bytes");
    // What they replace: the graph's GptOssExperts (hf_gpt_oss.cc) on one rank of its tensor-parallel plan
    // (cost_models/tensor_parallel.h): gate_up_proj [E, H, 2I] and its bias split by columns, down_proj [E, I, H] by
    // rows, down_proj_bias [E, H] whole (added after the reduction): E x (3 x H x I_p + 2 x I_p + H) a layer in the
    // served type.
    const uint64_t e = static_cast<uint64_t>(m.experts), h = static_cast<uint64_t>(m.hidden);
    const uint64_t ip = static_cast<uint64_t>(m.intermediate_per_rank);
    m.graph_expert_bytes = checked_mul(checked_mul(e * (3 * h * ip + 2 * ip + h), d, "expert bytes"),
                                       static_cast<uint64_t>(m.blocks), "expert bytes");
    if (marlin) {
      const bool reduces = vllm_marlin_moe_reduces(mxfp4_capability, served, rule.marlin_moe_atomic_add);
      if (multiprocessors <= 0 && reduces)
        throw InputError(fmt::format("serve --engine vllm: {}'s MXFP4 experts on Marlin at compute capability {}.{}: "
                                     "its GEMMs reduce in a float32 buffer sized by the GPU's multiprocessors, which "
                                     "--memory does not say: give --gpu NAME",
                                     model, mxfp4_capability / 10, mxfp4_capability % 10));
      m.kernel = vllm_mxfp4_marlin_kernel_bytes(first.tokens, first.top_k, m.experts, m.mxfp4_layer, reduces,
                                                multiprocessors, modular);
    } else if (flashinfer_backend) {
      m.kernel = vllm_mxfp4_flashinfer_kernel_bytes(first.tokens, first.top_k, m.experts, m.mxfp4_layer);
    } else {
      m.kernel = VllmFusedMoeBytes{};
      m.kernel.chunk_tokens = first.tokens;
      m.kernel.output_bytes = checked_mul(checked_mul(static_cast<uint64_t>(first.tokens), h, "kernel"), d, "kernel");
      m.kernel.cache2_bytes =  // intermediate_cache [T·k, I_pad]
          vllm_mxfp4_kernel_bytes(first.tokens, first.hidden, first.top_k, m.mxfp4_layer.intermediate_padded) -
          m.kernel.output_bytes;
    }
  }
  // The kernel runs once the router's logits exist: its buffers on top of what is allocated at the router's step.
  for (const MoeBlock& b : blocks) {
    const auto it = std::find(forward.step_names.begin(), forward.step_names.end(), b.topk);
    if (it == forward.step_names.end()) continue;  // the router folded into another step: not placed
    const size_t step = static_cast<size_t>(it - forward.step_names.begin());
    if (step >= forward.allocated_per_step.size())
      throw std::logic_error("serve --engine vllm: no allocated bytes at " + b.topk);
    m.at_router = std::max(m.at_router, forward.allocated_per_step[step]);
    m.peak_allocated = vllm_moe_peak(m, 0);
  }
  if (m.peak_allocated == 0)
    throw std::logic_error("serve --engine vllm: the routers of " + model + " are not steps of the profile run");
  return m;
}

uint64_t vllm_hold_moe_workspace(Estimate& forward, const std::vector<MoeBlock>& blocks, int64_t tokens, int64_t hidden,
                                 int64_t width, DType served, const std::string& model) {
  if (blocks.empty()) return 0;
  const MoeBlock& first = blocks.front();
  const uint64_t bytes = vllm_modular_moe_workspace_bytes(tokens, first.top_k, hidden, width, served);
  size_t from = forward.allocated_per_step.size();
  for (const MoeBlock& b : blocks) {
    const auto it = std::find(forward.step_names.begin(), forward.step_names.end(), b.topk);
    if (it != forward.step_names.end()) from = std::min(from, static_cast<size_t>(it - forward.step_names.begin()));
  }
  if (from == forward.allocated_per_step.size())
    throw std::logic_error("serve --engine vllm: the routers of " + model + " are not steps of the profile run");
  uint64_t before = 0, after = 0;
  for (size_t i = 0; i < forward.allocated_per_step.size(); ++i) {
    uint64_t& step = forward.allocated_per_step[i];
    if (i < from) {
      before = std::max(before, step);
      continue;
    }
    step = checked_add(step, bytes, "profile bytes");
    after = std::max(after, step);
  }
  // The estimate's peak is its steps' largest (the allocator replay's): where it came after the first router, the
  // workspace is on it.
  // workspace is on it; a peak inside a step the steps do not show is taken to be after it (most of the run is).
  forward.allocated_bytes = forward.allocated_bytes > std::max(before, after - bytes)
                                ? checked_add(forward.allocated_bytes, bytes, "profile bytes")
                                : std::max(before, after);
  return bytes;
}

int64_t vllm_moe_rank_width(const MoeBlock& block, int tp, int dp, bool expert_parallel, const std::string& model) {
  // Expert parallelism is on only where tp x dp > 1 (FusedMoEParallelConfig.make's use_ep); then the layer's tp_size
  // is 1 and each expert whole.
  return expert_parallel && tp * dp > 1 ? block.expert_intermediate
                                        : vllm_moe_intermediate_per_rank(block.expert_intermediate, tp, model);
}

VllmFusedMoeShape vllm_moe_shape(const VllmMoeAnswer& m, const VllmRule& rule) {
  VllmFusedMoeShape shape{m.kernel_tokens, m.hidden, m.experts, m.top_k, m.intermediate_per_rank, m.ep.local_experts};
  shape.modular = m.modular;
  shape.chunk_size = vllm_fused_moe_chunk_size(rule.fused_moe_chunk_16k);
  shape.block_by_batch = rule.triton_moe_block_by_batch;
  shape.remaps_expert_ids = m.modular && m.expert_parallel;
  return shape;
}

VllmMxfp4Backend vllm_mxfp4_backend_for_gpu(int capability, std::optional<VllmMxfp4Backend> requested,
                                            const VllmRule& rule, std::optional<bool> flashinfer,
                                            const std::string& model) {
  try {
    return vllm_mxfp4_backend(capability, requested, rule, flashinfer, model);
  } catch (const InputError& e) {
    throw VllmGpuRefused(e.what(), false);
  }
}

uint64_t vllm_moe_peak(const VllmMoeAnswer& m, uint64_t extra) {
  const uint64_t kernel = checked_add(m.kernel.total(), extra, "profile bytes");
  const uint64_t combine = checked_add(m.kernel.output_bytes, m.combine_bytes, "profile bytes");
  return checked_add(checked_add(m.at_router, m.dispatch_bytes, "profile bytes"), std::max(kernel, combine),
                     "profile bytes");
}

namespace {

// How the answer names each MXFP4 backend: as vLLM's log does, the library whose kernel runs, and that kernel.
struct Mxfp4BackendNames {
  const char* backend;
  const char* library;
  const char* kernel;
};
Mxfp4BackendNames mxfp4_backend_names(VllmMxfp4Backend b) {
  switch (b) {
    case VllmMxfp4Backend::Marlin: return {"Marlin", "vllm", "fused_marlin_moe"};
    case VllmMxfp4Backend::FlashInfer: return {"FlashInfer (SM100_FI_MXFP4_BF16)", "flashinfer", "trtllm_fp4_block_scale_moe"};
    case VllmMxfp4Backend::Triton: break;
  }
  return {"Triton", "vllm", "triton_kernel_moe_forward"};
}

}  // namespace

nlohmann::ordered_json vllm_moe_to_json(const VllmMoeAnswer& m) {
  if (m.blocks == 0) return nullptr;
  const Mxfp4BackendNames mxfp4 = mxfp4_backend_names(m.mxfp4_backend);
  const std::string quantized = m.nvfp4 ? " (nvfp4)" : m.mxfp4 ? " (mxfp4)" : "";
  return {{"kernel", m.modular ? fmt::format("vllm modular {}{}", m.nvfp4 || m.mxfp4 ? "MarlinExperts" : "TritonExperts",
                                             quantized)
                     : m.nvfp4 ? std::string("vllm fused_marlin_moe (nvfp4)")
                     : m.mxfp4 ? fmt::format("{} {} (mxfp4)", mxfp4.library, mxfp4.kernel)
                               : std::string("vllm fused_experts")},
          {"sparse_layers", m.blocks},
          {"experts", m.experts},
          {"top_k", m.top_k},
          {"expert_intermediate_size", m.intermediate},
          {"expert_intermediate_size_per_rank", m.intermediate_per_rank},
          {"expert_weight_bytes", m.expert_weight_bytes},
          {"expert_parallel_size", m.ep.ep_size},
          {"local_experts", m.ep.local_experts},
          {"expert_map_bytes", m.expert_map_bytes},
          {"data_parallel_size", m.data_parallel},
          {"kernel_tokens", m.kernel_tokens},
          {"dp_dispatch_bytes", m.dispatch_bytes},
          {"dp_combine_bytes", m.combine_bytes},
          {"chunk_tokens", m.kernel.chunk_tokens},
          {"block_size_m", m.kernel.block_size_m},
          {"topk_bytes", m.kernel.topk_bytes},
          {"align_bytes", m.kernel.align_bytes},
          {"cache13_bytes", m.kernel.cache13_bytes},
          {"cache2_bytes", m.kernel.cache2_bytes},
          {"output_bytes", m.kernel.output_bytes},
          {"padded_input_bytes", m.kernel.padded_input_bytes},
          {"reduce_bytes", m.kernel.reduce_bytes},
          {"lock_bytes", m.kernel.lock_bytes},
          {"workspace_bytes", m.kernel.workspace_bytes},
          {"kernel_bytes", m.kernel.total()},
          {"peak_allocated_bytes", m.peak_allocated}};
}

namespace {

// Marlin's float32 reduction buffer, where the GEMMs run without atomic add (cost_models/vllm_fused_moe.h).
std::string marlin_reduce_text(const VllmFusedMoeBytes& k) {
  return k.reduce_bytes > 0 ? fmt::format(", float32 reduction buffer {} (its GEMMs without atomic add)",
                                          format_bytes(k.reduce_bytes))
                            : std::string();
}

}  // namespace

std::string mxfp4_layer_parts_text(const Mxfp4ExpertsLayer& l, uint64_t layers) {
  std::string scales = format_bytes(l.scales_bytes * layers);
  if (l.retained_scales_bytes > 0)
    scales += fmt::format(" swizzled and {} as loaded{}", format_bytes(l.retained_scales_bytes * layers),
                          l.swizzle_padding_bytes > 0
                              ? fmt::format(" (the swizzled copies' Hopper padding {})",
                                            format_bytes(l.swizzle_padding_bytes * layers))
                              : std::string());
  return fmt::format("blocks {}, scales {}, {} biases {}{}{}", format_bytes(l.blocks_bytes * layers), scales,
                     l.bias_float32 ? "float32" : "bfloat16", format_bytes(l.bias_bytes * layers),
                     l.workspace_bytes > 0 ? fmt::format(", workspaces {}", format_bytes(l.workspace_bytes * layers))
                                           : std::string(),
                     l.index_cache_bytes > 0
                         ? fmt::format(", permute indices {}, gemm1 constants {}",
                                       format_bytes(l.index_cache_bytes * layers), format_bytes(l.constants_bytes * layers))
                         : std::string());
}

std::string vllm_moe_to_text(const VllmMoeAnswer& m) {
  if (m.blocks == 0) return "";
  if (m.nvfp4) {
    const std::string width =
        m.intermediate_per_rank != m.intermediate ? fmt::format(" ({} a rank)", m.intermediate_per_rank) : "";
    if (m.modular)
      return fmt::format("; the NVFP4 experts of {} sparse layers by vLLM's Marlin MoE in its modular kernel "
                         "(MarlinExperts: {} experts, top-{}, {} wide{}; {} of expert weights for the graph's {}; its "
                         "WorkspaceManager buffer {}, one for every layer, held from the first; per call {}: output "
                         "{}, lock workspace {}, top-k and alignment {}{})",
                         m.blocks, m.experts, m.top_k, m.intermediate, width, format_bytes(m.expert_weight_bytes),
                         format_bytes(m.graph_expert_bytes), format_bytes(m.kernel.workspace_bytes),
                         format_bytes(m.kernel.total()), format_bytes(m.kernel.output_bytes),
                         format_bytes(m.kernel.lock_bytes), format_bytes(m.kernel.topk_bytes + m.kernel.align_bytes),
                         marlin_reduce_text(m.kernel));
    return fmt::format("; the NVFP4 experts of {} sparse layers by vLLM's Marlin MoE (fused_marlin_moe: {} experts, "
                       "top-{}, {} wide{}; {} of expert weights for the graph's {}; per call {}: cache13 {}, "
                       "cache2 {}, output {}, top-k and alignment {}{})",
                       m.blocks, m.experts, m.top_k, m.intermediate, width, format_bytes(m.expert_weight_bytes),
                       format_bytes(m.graph_expert_bytes), format_bytes(m.kernel.total()),
                       format_bytes(m.kernel.cache13_bytes), format_bytes(m.kernel.cache2_bytes),
                       format_bytes(m.kernel.output_bytes), format_bytes(m.kernel.topk_bytes + m.kernel.align_bytes),
                       marlin_reduce_text(m.kernel));
  }
  if (m.mxfp4) {
    const bool marlin = m.mxfp4_backend == VllmMxfp4Backend::Marlin;
    const bool flashinfer = m.mxfp4_backend == VllmMxfp4Backend::FlashInfer;
    const Mxfp4BackendNames names = mxfp4_backend_names(m.mxfp4_backend);
    const std::string padded =
        marlin || flashinfer ? fmt::format("{} and the hidden size to {}", m.mxfp4_layer.intermediate_padded,
                                           m.mxfp4_layer.hidden_padded)
                             : fmt::format("{}", m.mxfp4_layer.intermediate_padded);
    const std::string per_call =
        marlin && m.modular
            ? fmt::format("output {}, padded input {}, lock workspace {}{}; cache13 and cache2 in its modular "
                          "kernel's WorkspaceManager buffer, {}, one for every layer, held from the first",
                          format_bytes(m.kernel.output_bytes), format_bytes(m.kernel.padded_input_bytes),
                          format_bytes(m.kernel.lock_bytes), marlin_reduce_text(m.kernel),
                          format_bytes(m.kernel.workspace_bytes))
        : marlin ? fmt::format("cache13 {}, cache2 {}, output {}, padded input {}{}",
                               format_bytes(m.kernel.cache13_bytes), format_bytes(m.kernel.cache2_bytes),
                               format_bytes(m.kernel.output_bytes),
                               format_bytes(m.kernel.padded_input_bytes), marlin_reduce_text(m.kernel))
        : flashinfer ? fmt::format("gemm1 output {}, gemm2 output {}, output {}, padded input {}, top-k and routing {} "
                                   "(tile {})",
                                   format_bytes(m.kernel.cache13_bytes), format_bytes(m.kernel.cache2_bytes),
                                   format_bytes(m.kernel.output_bytes), format_bytes(m.kernel.padded_input_bytes),
                                   format_bytes(m.kernel.topk_bytes + m.kernel.align_bytes), m.kernel.block_size_m)
                     : fmt::format("intermediate {}, output {}", format_bytes(m.kernel.cache2_bytes),
                                   format_bytes(m.kernel.output_bytes));
    return fmt::format("; the MXFP4 experts of {} sparse layers by vLLM's {} MXFP4 MoE ({}: {} experts, top-{}, {} "
                       "wide{}, padded to {}; {} of expert weights for the graph's {}: {}; per call {}: {})",
                       m.blocks, names.backend, m.modular ? "MarlinExperts in its modular kernel" : names.kernel,
                       m.experts, m.top_k, m.intermediate,
                       m.intermediate_per_rank != m.intermediate ? fmt::format(" ({} a rank)", m.intermediate_per_rank) : "",
                       padded, format_bytes(m.expert_weight_bytes), format_bytes(m.graph_expert_bytes),
                       mxfp4_layer_parts_text(m.mxfp4_layer, static_cast<uint64_t>(m.blocks)),
                       format_bytes(m.kernel.total()), per_call);
  }
  const std::string ep =
      m.expert_parallel
          ? fmt::format(", expert-parallel over {} GPUs: {} of the {} experts whole on rank 0, where tensor "
                        "parallelism holds {} of slices of all of them; expert maps {}",
                        m.ep.ep_size, m.ep.local_experts, m.experts, format_bytes(m.graph_expert_bytes),
                        format_bytes(m.expert_map_bytes)) +
                (m.data_parallel > 1
                     ? fmt::format(" ({} data-parallel ranks x --tp {}); the kernel runs on the {} tokens of every "
                                   "data-parallel rank, gathered by the dispatch ({} of hidden states and router "
                                   "logits; the combine's all-reduce {})",
                                   m.data_parallel, m.ep.ep_size / m.data_parallel, m.kernel_tokens,
                                   format_bytes(m.dispatch_bytes), format_bytes(m.combine_bytes))
                     : std::string())
          : "";
  if (m.modular)
    return fmt::format("; the experts of {} sparse layers by vLLM's modular MoE kernel (TritonExperts: {} experts, "
                       "top-{}, {} wide, {} a rank; {} of expert weights a rank{}; its WorkspaceManager buffer {}, one "
                       "for every layer, held from the first; per call {}: output {}, top-k and alignment {})",
                       m.blocks, m.experts, m.top_k, m.intermediate, m.intermediate_per_rank,
                       format_bytes(m.expert_weight_bytes), ep, format_bytes(m.kernel.workspace_bytes),
                       format_bytes(m.kernel.total()), format_bytes(m.kernel.output_bytes),
                       format_bytes(m.kernel.topk_bytes + m.kernel.align_bytes));
  return fmt::format("; the experts of {} sparse layers by vLLM's fused MoE kernel (fused_experts: {} experts, "
                     "top-{}, {} wide, {} a rank; {} of expert weights a rank{}; per call {}: cache13 {}, cache2 {}, "
                     "output {}, top-k and alignment {})",
                     m.blocks, m.experts, m.top_k, m.intermediate, m.intermediate_per_rank,
                     format_bytes(m.expert_weight_bytes), ep, format_bytes(m.kernel.total()),
                     format_bytes(m.kernel.cache13_bytes), format_bytes(m.kernel.cache2_bytes),
                     format_bytes(m.kernel.output_bytes),
                     format_bytes(m.kernel.topk_bytes + m.kernel.align_bytes));
}

}  // namespace memplan
