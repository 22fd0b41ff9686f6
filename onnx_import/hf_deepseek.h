// deepseek_v3 from its config.json (transformers models/deepseek_v3/modeling_deepseek_v3.py at 00b676f8,
// configuration_deepseek_v3.py DeepseekV3Config): DeepseekV3Attention, multi-head latent attention, and DeepseekV3MoE,
// built op for op as torch.onnx.export (torch 1.13, opset 17) writes tests/models/hf_deepseek.py's twin (the
// attention in hf_deepseek.cc, the router in hf_deepseek_router.cc; the experts by hf_moe.cc's loop, or under
// --experts-implementation grouped_mm by hf_moe_grouped.cc;
// tests/import/hf_deepseek_test.py checks it node for node). Internal to onnx_import.
//
// deepseek_v2 (DeepSeek-V2, DeepSeek-V2-Lite; transformers models/deepseek_v2/modeling_deepseek_v2.py at 0233e509,
// configuration_deepseek_v2.py DeepseekV2Config) is the same model but for what tests/models/hf_deepseek_v2.py's
// docstring names: apply_rotary_emb's complex rotary (hf_deepseek_v2.cc), the scaling without yarn's mscale,
// DeepseekV2MoEGate (softmax scores, no bias, greedy or group_limited_greedy: hf_deepseek_router.cc), the defaults
// (first_k_dense_replace 0, routed_scaling_factor 1.0) and the keys (no rope_interleave; aux_loss_alpha, seq_aux).
// tests/import/hf_deepseek_v2_test.py checks it node for node.
//
// Routing (--moe-routing, hf_moe.h's two rules) under DeepseekV3TopkRouter's group-limited choice (and
// DeepseekV2MoEGate's group_limited_greedy; its greedy is one group of every expert): a token's k experts
// must lie in at most topk_group of the n_group groups of n_routed_experts / n_group consecutive experts.
// worst (experts 0..k-1 for every token) spans ceil(k / group size) groups, which the router allows whenever it can
// pick k experts at all (k <= topk_group x group size, checked on reading). balanced gives token t the k consecutive
// experts (t·k + j) mod E, j < k; check_deepseek_read walks every start t·k mod E and refuses balanced (naming
// --moe-routing worst) when some token's k experts span more than topk_group groups: the rule would then be a routing
// the model cannot make. DeepSeek-V3 (E 256, 8 groups of 32, k 8, topk_group 4): each token's 8 experts lie in one
// group, so balanced is a choice its router can make. Under --experts-implementation grouped_mm no tensor depends on
// the routing (hf_moe_grouped.h) and the check is not made.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "onnx_import/hf_config.h"

namespace memplan {

// The config keys of deepseek_v3 or deepseek_v2 beyond the decoders' shared ones (empty for any other type).
const std::set<std::string>& deepseek_keys(const std::string& model_type);

// Reads deepseek_v3's or deepseek_v2's attention, rope and experts keys into `c` (after the shared keys). Throws InputError naming
// the file and the key.
void parse_deepseek(const std::string& path, const nlohmann::json& j, DecoderConfig& c);

// For a deepseek_v3 or deepseek_v2 config about to be built: refuses --moe-routing balanced when the grouped router cannot make it
// (above). Nothing for another model type. Throws InputError. (serve --engine vllm sizes vLLM's latent cache and MLA
// kernels from ReadModel::mla: report/serve_vllm_mla.cc.)
void check_deepseek_read(const std::string& path, const DecoderConfig& c);

}  // namespace memplan
