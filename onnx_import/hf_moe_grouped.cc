// The sparse block under --experts-implementation grouped_mm (onnx_import/hf_moe_grouped.h).
#include "onnx_import/hf_moe_grouped.h"

#include "onnx_import/decoder_builder.h"
#include "onnx_import/errors.h"

namespace memplan {

using onnx::TensorProto;

std::vector<std::string> experts_implementation_names() { return {"eager", "grouped_mm"}; }

void check_grouped_experts(const std::string& path, const std::string& experts, DecoderConfig& config) {
  auto refuse = [&](const std::string& why) {
    throw InputError(path + ": --experts-implementation " + experts + ": " + why);
  };
  if (experts != "eager" && experts != "grouped_mm") refuse("not eager or grouped_mm");
  if (config.num_experts == 0)
    refuse("it chooses how a mixture of experts runs its experts; model_type \"" + config.model_type +
           "\" has no experts");
  config.grouped_experts = experts == "grouped_mm";
}

// grouped_mm_experts_forward on the (N, h) tokens, after the model's router (hf_moe_grouped.h lists the tensors).
std::string LlamaBuilder::grouped_moe_block(int64_t l, const std::string& x) {
  // serve's engines (DecoderConfig::engine_experts, hf_moe.h): the block under the checkpoint's module names (mixtral's
  // block_sparse_moe, as vLLM's MixtralMoE loads it).
  const bool engine = c_.engine_experts && !c_.grouped_experts;
  const std::string block = engine && c_.model_type == "mixtral" ? "block_sparse_moe" : "mlp";
  const std::string m = "/layers." + std::to_string(l) + "/" + block, p = "layers." + std::to_string(l) + "." + block;
  const std::string ex = m + "/experts", px = p + ".experts";
  const int64_t h = c_.hidden_size, experts = c_.num_experts, k = c_.experts_per_token;
  const int64_t held = experts / c_.expert_parallel;  // --ep N: rank 0's E/N experts (hf_moe_ep.cc)
  const int64_t f = c_.expert_intermediate_size;
  // GptOssExperts: experts_are_transposed (its matrices stored [in, out]) and the two biases.
  const bool transposed = c_.gpt_oss;
  e_.scope = m;
  const std::string hidden = reshape(x, e_.const_i64({-1, h}, false));  // hidden_states.view(-1, hidden_dim)
  std::string indices;
  const std::string weights = route(m, p, hidden, &indices);
  if (transposed) {  // GptOssExperts.__init__: [E, H, 2I], [E, 2I], [E, I, H], [E, H]
    param(px + ".gate_up_proj", {held, h, 2 * f}), param(px + ".gate_up_proj_bias", {held, 2 * f});
    param(px + ".down_proj", {held, f, h}), param(px + ".down_proj_bias", {held, h});
  } else if (engine) {
    // vLLM's FusedMoE (fused_moe/layer.py at c439a13, UnquantizedFusedMoEMethod.create_weights): w13_weight [E, 2I, H]
    // (every expert's gate and up, stacked) and w2_weight [E, H, I], one tensor each a layer; stored here as the
    // grouped GEMM reads them, [E, H, 2I] and [E, I, H] (the same bytes, no transposed copy), under vLLM's names.
    param(px + ".w13_weight", {held, h, 2 * f});
    param(px + ".w2_weight", {held, f, h});
  } else {  // Qwen3MoeExperts / MixtralExperts / DeepseekV3NaiveMoe / DeepseekV2Experts: [E, 2I, H], [E, H, I]
    param(px + ".gate_up_proj", {held, 2 * f, h});
    param(px + ".down_proj", {held, h, f});
  }
  e_.scope = ex;
  std::string acc = e_.op("ConstantOfShape", {e_.op("Shape", {hidden})});  // torch.zeros_like(hidden_states)
  const float zero = 0.0f;
  e_.tensor("value", TensorProto::FLOAT, {1}, &zero, 4);
  const std::string expert_ids = reshape(indices, e_.const_i64({-1}, false));  // top_k_index.reshape(-1)
  // torch.arange(num_tokens).unsqueeze(1).expand(-1, num_top_k).reshape(-1)
  std::string token_idx;
  if (engine) {
    // The same indices from the router's S pairs, arange(S) // k (the eager loop's pair tokens, hf_moe.cc), so that
    // every tensor of the block is downstream of the router's top-k: all of it is what the fused kernel replaces
    // (find_moe_blocks holds it outside the profile step).
    std::string pairs = e_.op("Gather", {e_.op("Shape", {expert_ids}), e_.const_i64({0}, true)});
    e_.i("axis", 0);
    const std::string range = e_.op("Range", {e_.const_i64({0}, true), pairs, e_.const_i64({1}, true)});
    token_idx = e_.op("Div", {range, e_.const_i64({k}, true)});
  } else {
    std::string tokens = e_.op("Gather", {e_.op("Shape", {hidden}), e_.const_i64({0}, true)});
    e_.i("axis", 0);
    const std::string range = e_.op("Range", {e_.const_i64({0}, true), tokens, e_.const_i64({1}, true)});
    const std::string column = e_.op("Unsqueeze", {range, e_.const_i64({1}, false)});
    const std::string expanded = e_.op("Expand", {column, e_.const_i64({1, k}, false)});
    token_idx = reshape(expanded, e_.const_i64({-1}, false));
  }
  // torch.argsort(x, stable=True): a sort along the last axis, its indices (TopK largest=0 over all S entries).
  auto argsort = [&](const std::string& v) {
    e_.op("TopK", {v, e_.op("Shape", {v})}, 2);
    e_.i("axis", -1).i("largest", 0).i("sorted", 1);
    return e_.output(1);
  };
  const std::string perm = argsort(expert_ids);
  const std::string inv_perm = argsort(perm);
  const std::string sample_weights = reshape(weights, e_.const_i64({-1}, false));  // top_k_weights.reshape(-1)
  auto take = [&](const std::string& v, const std::string& index) {  // v[index]
    const std::string y = e_.op("Gather", {v, index});
    e_.i("axis", 0);
    return y;
  };
  const std::string current = take(hidden, token_idx);
  const std::string expert_ids_g = take(expert_ids, perm);
  const std::string sample_weights_g = take(sample_weights, perm);
  const std::string current_g = take(current, perm);
  // torch.histc(expert_ids_g.float(), bins=E, min=0, max=E - 1); torch.cumsum(..., dim=0, dtype=torch.int32) (the
  // cumsum symbolic casts to the dtype, then CumSum: symbolic_opset11.py cumsum).
  std::string hist = e_.op("Cast", {expert_ids_g});
  e_.i("to", TensorProto::FLOAT);
  hist = e_.op("ATen", {hist});
  e_.aten("histc").i("bins", experts).f("min", 0.0f).f("max", float(experts - 1));
  std::string offsets;
  if (c_.expert_parallel == 1) {
    offsets = e_.op("Cast", {hist});
    e_.i("to", TensorProto::INT32);
    offsets = e_.op("CumSum", {offsets, e_.const_i64({0}, true)});
  }
  // torch._grouped_mm(rows, self.<proj>, offs) when experts_are_transposed, else on self.<proj>.transpose(-2, -1);
  // then, with biases, + self.<proj>_bias[expert_ids_g] ([S, out], a gather per row).
  auto grouped_linear = [&](const std::string& a, const std::string& proj) {
    const bool w13 = proj == "gate_up_proj";
    const std::string weight = px + "." + (engine && !transposed ? (w13 ? "w13_weight" : "w2_weight") : proj);
    const bool stored = transposed || engine;  // read as [E, in, out]
    std::string y = e_.op("ATen", {a, stored ? weight : transpose(weight, {0, 2, 1}), offsets});
    e_.aten("_grouped_mm");
    if (transposed) y = e_.op("Add", {y, take(weight + "_bias", expert_ids_g)});
    return y;
  };
  std::string out;
  if (c_.expert_parallel > 1) {
    out = expert_parallel_rows(px, current_g, hist);  // hf_moe_ep.cc: dispatch, the local experts, combine
  } else {
    const std::string gate_up = grouped_linear(current_g, "gate_up_proj");
    // GptOssExperts._apply_gate, or gate, up = .chunk(2, dim=-1); act_fn(gate) * up
    out = grouped_linear(c_.gpt_oss ? gpt_oss_gate(gate_up) : grouped_swiglu(gate_up), "down_proj");
  }
  const std::string w = e_.op("Unsqueeze", {sample_weights_g, e_.const_i64({1}, false)});
  const std::string weighted = e_.op("Mul", {out, w});
  std::string restored = take(weighted, inv_perm);  // out_per_sample_g[inv_perm]
  restored = e_.op("Cast", {restored});  // .to(final_hidden_states.dtype)
  e_.i("to", TensorProto::FLOAT);
  acc = index_add(acc, token_idx, restored);
  if (engine && c_.mla && !c_.deepseek_v2) {
    // DeepseekV3MoE.moe's float32 accumulator typed back, final_hidden_states.type(hidden_states.dtype), as the
    // eager loop the engines read before writes it (hf_moe.cc): the block's result, then its cast.
    acc = e_.op("Cast", {acc});
    e_.i("to", TensorProto::FLOAT);
  }
  if (c_.mla) {  // DeepseekV3MoE.forward: .view(*orig_shape) + shared_experts(residuals)
    e_.scope = m;
    return add_deepseek_shared(m, p, x, acc);
  }
  if (c_.shared_expert_intermediate_size > 0) acc = add_shared_expert(m, p, hidden, h, acc);
  e_.scope = m;
  return reshape(acc, e_.op("Shape", {x}));  // .reshape(batch_size, sequence_length, hidden_dim)
}

// act_fn(gate) * up over the grouped rows, gate and up the two halves of gate_up (.chunk(2, dim=-1), views).
std::string LlamaBuilder::grouped_swiglu(const std::string& gate_up) {
  const int64_t f = c_.expert_intermediate_size;
  const std::string gate = e_.op("Split", {gate_up, e_.const_i64({f, f}, false)}, 2);
  e_.i("axis", -1);
  const std::string up = e_.output(1);
  const std::string silu = e_.op("Mul", {gate, e_.op("Sigmoid", {gate})});  // act_fn (silu)
  return e_.op("Mul", {silu, up});
}

}  // namespace memplan
