// serve --engine vllm on a block-wise fp8 checkpoint, or a per-tensor fp8 one with experts (report/serve_vllm.h
// VllmFp8BlockAnswer; the rules are cost_models/vllm_fp8_block.h's): the linear layers are cost_models/
// vllm_weights.h's, with the routers left out; this file sizes the experts as Fp8MoEMethod holds them and its Triton
// kernel's quantized activations, MLA's dequantized kv_b_proj, and places each linear layer's block-quantized input
// on its step of the profile run.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "cost_models/graph_facts.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "onnx_import/name_index.h"
#include "report/serve_vllm.h"
#include "report/sizes.h"

namespace memplan {

void vllm_fp8_block_check_gpu(const VllmQuantization& q, int capability) {
  if (q.method != "fp8" || !q.block.on() || capability == 89 || capability == 90) return;
  throw VllmGpuRefused(
      fmt::format("the checkpoint's block-wise fp8 on compute capability {}.{}: vLLM runs it there with kernels "
                  "whose layouts and buffers memplan does not size (FP8 Marlin below 8.9, ROCm's AITER and fnuz "
                  "scales, DeepGEMM's E8M0 scales and CUTLASS grouped GEMM on 10.0); it sizes 8.9 and 9.0",
                  capability / 10, capability % 10),
      false);
}

std::set<std::string> vllm_moe_left_out(const Graph& g, const std::vector<MoeBlock>& blocks,
                                        const StoredQuantization& stored, int& routers,
                                        std::set<std::string>& router_nodes, const std::string& model) {
  std::set<std::string> out;
  routers = 0;
  router_nodes.clear();
  if (blocks.empty()) return out;
  if (stored.moe_router.empty())
    throw InputError("serve --engine vllm: the " + stored.method + " experts of " + model +
                     ": whether vLLM quantizes this model's router is not read (memplan reads mixtral's, "
                     "qwen2_moe's, qwen3_moe's, deepseek_v2's and deepseek_v3's from a config.json)");
  const int sparse = static_cast<int>(blocks.size());
  // Listing deepseek_v3's gates changes nothing (they are never quantized); some of qwen3_moe's is not modelled.
  if (stored.moe_router == "quantized" && stored.ignored_routers != 0 && stored.ignored_routers != sparse)
    throw InputError("serve --engine vllm: " + model + "'s quantization_config leaves " +
                     std::to_string(stored.ignored_routers) + " routers (mlp.gate) of " + std::to_string(sparse) +
                     " sparse layers unquantized: some but not all is not modelled");
  // qwen3_moe's gate takes the quant_config unless the config lists it: then it is one more fp8 linear layer.
  const bool routers_unquantized =
      stored.moe_router == "unquantized" || stored.ignored_routers == sparse || stored.all_routers_ignored;
  std::unordered_map<std::string_view, int32_t> topk_node;  // each block's TopK, found in one pass
  for (const MoeBlock& b : blocks) topk_node.emplace(b.topk, -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (const auto it = topk_node.find(g.nodes[i].name); it != topk_node.end()) it->second = static_cast<int32_t>(i);
  auto is_linear = [&](const Node& n) {
    return (n.op_type == "MatMul" || n.op_type == "Gemm") && n.inputs.size() >= 2 && matmul_weight(g, n.inputs[1]) >= 0;
  };
  // The router of each block: the first linear layer behind its TopK (find_moe_blocks' gate).
  std::set<int32_t> router_inputs;
  for (const MoeBlock& b : blocks) {
    if (topk_node.at(b.topk) < 0) throw std::logic_error("serve --engine vllm: no node " + b.topk);
    std::vector<int32_t> stack{topk_node.at(b.topk)};
    std::set<int32_t> seen;
    bool found = false;
    while (!stack.empty() && !found) {
      const Node& n = g.nodes[stack.back()];
      stack.pop_back();
      for (int32_t in : n.inputs) {
        if (in < 0 || g.tensors[in].producer < 0 || !seen.insert(g.tensors[in].producer).second) continue;
        const Node& p = g.nodes[g.tensors[in].producer];
        if (is_linear(p)) {
          router_nodes.insert(p.name);
          if (routers_unquantized) out.insert(p.name);
          router_inputs.insert(p.inputs[0]);
          found = true;
          break;
        }
        stack.push_back(g.tensors[in].producer);
      }
    }
    if (!found) throw std::logic_error("serve --engine vllm: no router behind " + b.topk);
    if (routers_unquantized) ++routers;
  }
  // One pass over the graph (not one per block: a 61-layer DeepSeek-V3 has 58 of them over ~400,000 nodes): every
  // expert projection, a MatMul on a weight whose output the fused kernel replaces, and the shared experts' gates.
  // qwen2_moe's shared_expert_gate, a linear layer on a router's input with one output feature into a Sigmoid, is a
  // torch.nn.Linear (Qwen2MoeSparseMoeBlock.__init__, qwen2_moe.py at 8bbabf0 line 143), no LinearBase: never
  // quantized.
  NameIndex held;
  for (const MoeBlock& b : blocks)
    for (const std::string& t : b.tensors) held.emplace(t, 0);
  std::set<int32_t> into_sigmoid;
  for (const Node& n : g.nodes)
    if (n.op_type == "Sigmoid" && !n.inputs.empty()) into_sigmoid.insert(n.inputs[0]);
  for (const Node& n : g.nodes) {
    if (!is_linear(n) || n.outputs.empty() || n.outputs[0] < 0) continue;
    const Tensor& y = g.tensors[n.outputs[0]];
    const bool expert = held.contains(y.name);
    const bool shared_gate = router_inputs.count(n.inputs[0]) && !y.shape.empty() && y.shape.back() == 1 &&
                             into_sigmoid.count(n.outputs[0]);
    if (expert || shared_gate) out.insert(n.name);
  }
  return out;
}

void vllm_fp8_block_apply(VllmAnswer& a, const Graph& g, const Estimate& forward, const std::vector<MoeBlock>& blocks,
                          const std::vector<std::string>& held_outside, int capability, DType served) {
  VllmFp8BlockAnswer& f = a.fp8_block;
  const VllmFp8Block& block = a.quantization.block;
  const bool statics = a.quantization.static_activations;
  // Per-tensor experts on ROCm (PyTorch reports gfx942 and gfx950 as 9.4 and 9.5): normalize_e4m3fn_to_e4m3fnuz's
  // new weights and doubled scales, AITER's shuffled copies; not sized.
  if (!block.on() && rocm_compute_capability(capability))
    throw VllmGpuRefused(fmt::format("the per-tensor fp8 experts of {} on compute capability {}.{} (ROCm): vLLM's "
                                     "fnuz rescale and AITER MoE layouts are not sized (memplan sizes CUDA's Triton "
                                     "fused_experts, 8.9 and above)", a.model, capability / 10, capability % 10),
                         false);
  f.on = true;
  f.block_n = block.n;
  f.block_k = block.k;
  f.static_activations = statics;
  const uint64_t d = static_cast<uint64_t>(dtype_bits(served)) / 8;
  if (VllmMoeAnswer& m = a.moe; m.blocks > 0) {
    // With --enable-expert-parallel (report/serve_vllm_moe.cc) the MoE layer's tp_size is 1: rank 0's E_local whole
    // experts (I_p = I) in place of the graph's tensor-parallel share, which the unquantized sizing already counts
    // as graph_expert_bytes; the expert maps stay expert parallelism's (serve_vllm.cc).
    const VllmFp8BlockExperts e =
        block.on() ? vllm_fp8_block_experts(m.ep.local_experts, m.hidden, m.intermediate_per_rank,
                                            m.expert_parallel ? 1 : a.settings.tp, block, a.model)
                   : vllm_fp8_tensor_experts(m.ep.local_experts, m.hidden, m.intermediate_per_rank, statics);
    const uint64_t layers = static_cast<uint64_t>(m.blocks);
    // UnquantizedFusedMoEMethod's w13 and w2: the graph's experts (their tensor-parallel share under expert
    // parallelism, where expert_weight_bytes is rank 0's whole experts).
    f.graph_expert_bytes = m.expert_parallel ? m.graph_expert_bytes : m.expert_weight_bytes;
    f.expert_weight_bytes = checked_mul(e.weight_bytes, layers, "expert bytes");
    f.expert_scale_bytes = checked_mul(e.scale_bytes, layers, "expert bytes");
    m.expert_weight_bytes = checked_add(f.expert_weight_bytes, f.expert_scale_bytes, "expert bytes");
    // The kernel with get_default_config's fp8 block config (per-tensor: the unquantized rule, the buffers already
    // sized), plus the quantized activations: on the same router steps as the unquantized kernel (vllm_fused_moe
    // placed it there: its peak less its buffers is that step's).
    if (block.on()) {
      VllmFusedMoeShape shape = vllm_moe_shape(m, a.settings.rule);
      shape.fp8_blocks = true;
      m.kernel = vllm_fused_moe_bytes(shape, served);
    }
    f.moe_quant_bytes =
        block.on()
            ? vllm_fp8_block_moe_quant_bytes(m.kernel.chunk_tokens, m.hidden, m.top_k, m.intermediate_per_rank, block)
            : vllm_fp8_tensor_moe_quant_bytes(m.kernel.chunk_tokens, m.hidden, m.top_k, m.intermediate_per_rank,
                                              statics);
    m.peak_allocated = vllm_moe_peak(m, f.moe_quant_bytes);
    a.quantized.dense_bytes = checked_add(a.quantized.dense_bytes, f.graph_expert_bytes, "weights bytes");
    a.quantized.quantized_bytes = checked_add(a.quantized.quantized_bytes, m.expert_weight_bytes, "weights bytes");
  }
  if (a.mla.on)
    f.mla_absorbed_bytes = vllm_fp8_block_mla_absorbed_bytes(a.mla.shape.layers, a.mla.shape.kv_lora_rank,
                                                             a.mla.shape.heads_per_rank, a.mla.shape.qk_nope_head_dim,
                                                             a.mla.shape.v_head_dim, d);
  // Each linear layer the profile runs quantizes its input while its output is allocated.
  const VllmCallPeak peak = vllm_largest_call_peak(g, forward, held_outside, a.quantized.call_bytes, a.model);
  f.input_quant_peak = peak.peak;
  f.input_quant_node = peak.node;
  f.input_quant_bytes = peak.bytes;
}

VllmCallPeak vllm_largest_call_peak(const Graph& g, const Estimate& forward, const std::vector<std::string>& held_outside,
                                    const std::vector<std::pair<std::string, uint64_t>>& calls, const std::string& model) {
  VllmCallPeak out;
  // By name, each once (10^5 held tensors, steps and nodes in DeepSeek-V3's step): views into the callers' names.
  NameIndex held(held_outside.size()), step_of(forward.step_names.size()), node_of(g.nodes.size());
  for (const std::string& name : held_outside) held.emplace(name, 0);
  for (size_t i = 0; i < forward.step_names.size() && i < forward.allocated_per_step.size(); ++i)
    step_of.emplace(forward.step_names[i], static_cast<int32_t>(i));
  for (size_t i = 0; i < g.nodes.size(); ++i) node_of.emplace(g.nodes[i].name, static_cast<int32_t>(i));
  for (const auto& [name, bytes] : calls) {
    const int32_t* node = node_of.find(name);
    if (!node) throw std::out_of_range("serve --engine vllm: no node " + name);
    const Node& n = g.nodes[static_cast<size_t>(*node)];
    if (n.outputs.empty() || n.outputs[0] < 0 || held.contains(g.tensors[n.outputs[0]].name)) continue;
    const int32_t* step = step_of.find(name);
    if (!step) continue;  // fused into another step: not placed
    const uint64_t peak = checked_add(forward.allocated_per_step[static_cast<size_t>(*step)], bytes, "profile bytes");
    if (peak > out.peak) out = {peak, name, bytes};
  }
  if (!calls.empty() && out.node.empty())
    throw std::logic_error("serve --engine vllm: no quantized linear layer of " + model + " is a step of the profile");
  return out;
}

nlohmann::ordered_json vllm_fp8_block_to_json(const VllmFp8BlockAnswer& f) {
  if (!f.on) return nullptr;
  const bool block = f.block_n > 0;  // per-tensor: no block grid, no quantized linear inputs sized
  nlohmann::ordered_json j;
  if (block)
    j["weight_block_size"] = {f.block_n, f.block_k};
  else
    j["activation_scheme"] = f.static_activations ? "static" : "dynamic";
  j["routers_unquantized"] = f.routers;
  j["expert_fp8_bytes"] = f.expert_weight_bytes;
  j["expert_scale_bytes"] = f.expert_scale_bytes;
  j["graph_expert_bytes"] = f.graph_expert_bytes;
  j["moe_quantized_activation_bytes"] = f.moe_quant_bytes;
  j["mla_dequantized_kv_b_proj_bytes"] = f.mla_absorbed_bytes;
  if (!block) return j;
  j["input_quant_layer"] =
      f.input_quant_node.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.input_quant_node);
  j["input_quant_bytes"] = f.input_quant_bytes;
  j["input_quant_peak_allocated_bytes"] = f.input_quant_peak;
  return j;
}

std::string vllm_fp8_block_to_text(const VllmFp8BlockAnswer& f) {
  if (!f.on) return "";
  const std::string routers = f.routers > 0 ? fmt::format(", {} routers left in the model's type", f.routers) : "";
  std::string t = f.block_n > 0 ? fmt::format("                                   block-wise fp8 [{}, {}]: float32 "
                                              "scales a block{}", f.block_n, f.block_k, routers)
                                : fmt::format("                                   per-tensor fp8 ({} activations): "
                                              "float32 scales an expert{}", f.static_activations ? "static" : "dynamic",
                                              routers);
  if (f.graph_expert_bytes > 0)
    t += fmt::format("; experts {} fp8 + {} scales for the graph's {} (Triton fused_experts, {} of quantized "
                     "activations a call)", format_bytes(f.expert_weight_bytes), format_bytes(f.expert_scale_bytes),
                     format_bytes(f.graph_expert_bytes), format_bytes(f.moe_quant_bytes));
  if (f.mla_absorbed_bytes > 0)
    t += fmt::format("; MLA's dequantized kv_b_proj (W_UV, W_UK_T) {}", format_bytes(f.mla_absorbed_bytes));
  if (!f.input_quant_node.empty())
    t += fmt::format("; quantized inputs, {} at most ({})", format_bytes(f.input_quant_bytes), f.input_quant_node);
  return t + "\n";
}

}  // namespace memplan
