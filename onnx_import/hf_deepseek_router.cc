// The deepseek routers (onnx_import/hf_deepseek.h) on a sparse block's (N, h) tokens, as torch.onnx.export
// (torch 1.13, opset 17) writes tests/models/hf_deepseek.py's TopkRouter (DeepseekV3TopkRouter) and
// tests/models/hf_deepseek_v2.py's MoeGate (DeepseekV2MoEGate): the (N, k) top-k weights, which hf_moe.cc's expert
// loop reads.
#include <string>

#include "onnx_import/decoder_builder.h"

namespace memplan {

using onnx::TensorProto;

// torch.topk(x, n, dim=-1, sorted=...): n the pooled Python int reshaped to [1] (symbolic_opset11.py topk); the
// values are e_.output(0), the indices e_.output(1).
void LlamaBuilder::topk(const std::string& x, int64_t n, bool sorted) {
  const std::string n_list = reshape(e_.pooled(n), e_.const_i64({1}, false));
  e_.op("TopK", {x, n_list}, 2);
  e_.i("axis", -1).i("largest", 1).i("sorted", sorted ? 1 : 0);
}

// The group-limited choice on the (N, n_group) group scores, as DeepseekV3TopkRouter.get_topk_indices and
// DeepseekV2MoEGate's group_limited_greedy both write it: topk_group groups kept, `scores` (N, E) masked to 0
// elsewhere.
std::string LlamaBuilder::group_masked(const std::string& group_scores, const std::string& scores) {
  const int64_t experts = c_.num_experts, groups = c_.n_group, per = experts / groups;
  topk(group_scores, c_.topk_group, false);
  const std::string group_idx = e_.output(1);
  // group_mask = zeros_like(group_scores).scatter_(1, group_idx, 1): the scalar src cast and expanded.
  const std::string zeros = e_.op("ConstantOfShape", {e_.op("Shape", {group_scores})});
  const float zero = 0.0f;
  e_.tensor("value", TensorProto::FLOAT, {1}, &zero, 4);
  std::string one = e_.op("Cast", {e_.const_i64({1}, true)});
  e_.i("to", TensorProto::FLOAT);
  one = e_.op("Expand", {one, e_.op("Shape", {group_idx})});
  const std::string mask = e_.op("ScatterElements", {zeros, group_idx, one});
  e_.i("axis", 1);
  // .unsqueeze(-1).expand(-1, n_group, per).reshape(-1, E): a constant size list, with expand's -1 handling.
  const std::string unsqueezed = e_.op("Unsqueeze", {mask, e_.const_i64({-1}, false)});
  const std::string list = e_.const_i64({-1, groups, per}, false);
  const std::string ones = e_.op("ConstantOfShape", {e_.op("Shape", {list})});
  const int64_t one_i = 1;
  e_.tensor("value", TensorProto::INT64, {1}, &one_i, 8);
  const std::string minus = e_.op("Mul", {ones, e_.const_i64({-1}, true)});
  const std::string equal = e_.op("Equal", {e_.const_i64({-1, groups, per}, false), minus});
  const std::string expanded = e_.op("Expand", {unsqueezed, e_.op("Where", {equal, ones, list})});
  const std::string score_mask = reshape(expanded, e_.const_i64({-1, experts}, false));
  // scores.masked_fill(~score_mask.bool(), 0.0)
  std::string blocked = e_.op("Cast", {score_mask});
  e_.i("to", TensorProto::BOOL);
  blocked = e_.op("Not", {blocked});
  blocked = e_.op("Cast", {blocked});
  e_.i("to", TensorProto::BOOL);
  return e_.op("Where", {blocked, e_.const_f32({0.0f}, {}), scores});
}

// Both DeepSeek gates' logits, F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
// (DeepseekV3TopkRouter.forward; DeepseekV2MoEGate.forward): Tensor.type is Tensor.to, which torch.onnx writes as a
// Cast even where it is a no-op (a float32 export); the weight's cast, then F.linear's Transpose and MatMul on it.
std::string LlamaBuilder::float32_gate_logits(const std::string& g, const std::string& weight,
                                              const std::string& hidden) {
  const std::string hidden32 = e_.op("Cast", {hidden});
  e_.i("to", TensorProto::FLOAT);
  const std::string weight32 = e_.op("Cast", {weight});
  e_.i("to", TensorProto::FLOAT);
  return weight_matmul(g, weight32, hidden32);
}

// DeepseekV3TopkRouter.forward on the (N, h) tokens (its view of the block's (b, s, h) input, which the JIT's
// common-subexpression pass merges with DeepseekV3MoE's own view: moe_block writes it in the gate's scope): the top-k
// weights (hf_deepseek.py TopkRouter), in float32 whatever the model's type; `indices`, when given, gets the top-k
// expert indices (the grouped_mm block reads them, hf_moe_grouped.cc).
std::string LlamaBuilder::deepseek_router(const std::string& g, const std::string& p, const std::string& hidden,
                                          std::string* indices) {
  if (c_.deepseek_v2) return deepseek_v2_router(g, p, hidden, indices);  // below
  const int64_t experts = c_.num_experts, groups = c_.n_group, per = experts / groups;
  const std::string weight = param(p + ".weight", {experts, c_.hidden_size});
  const std::string bias = param(p + ".e_score_correction_bias", {experts});
  e_.scope = g;
  // .sigmoid() (transformers models/deepseek_v3/modeling_deepseek_v3.py at f5a9ec5, DeepseekV3TopkRouter.forward).
  const std::string scores = e_.op("Sigmoid", {float32_gate_logits(g, weight, hidden)});
  const std::string choice = e_.op("Add", {scores, e_.op("Unsqueeze", {bias, e_.const_i64({0}, false)})});
  topk(reshape(choice, e_.const_i64({-1, groups, per}, false)), 2, true);
  const std::string best_two = e_.output(0);
  const std::string group_scores = e_.op("ReduceSum", {best_two, e_.pooled_list(-1, "ReduceSum")});
  e_.i("keepdims", 0);
  topk(group_masked(group_scores, choice), c_.experts_per_token, false);
  if (indices) *indices = e_.output(1);
  std::string weights = e_.op("GatherElements", {scores, e_.output(1)});  // scores.gather(1, topk_indices)
  e_.i("axis", 1);
  if (c_.norm_topk_prob) {  // / (sum(dim=-1, keepdim=True) + 1e-20)
    const std::string sum = e_.op("ReduceSum", {weights, e_.pooled_list(-1, "ReduceSum")});
    e_.i("keepdims", 1);
    weights = e_.op("Div", {weights, e_.op("Add", {sum, e_.const_f32({1e-20f}, {})})});
  }
  const std::string routed = e_.op("Mul", {weights, e_.const_f32({float(c_.routed_scaling_factor)}, {})});
  e_.scope = g.substr(0, g.size() - 5);  // back in the block
  return routed;
}

// DeepseekV2MoEGate.forward (transformers' modular_deepseek_v2.py, first release) on the (N, h) tokens (its view of
// the block's (b, s, h) input, as deepseek_router's), as hf_deepseek_v2.py's MoeGate: weight (E, h) and no
// e_score_correction_bias; F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
// .softmax(dim=-1, dtype=torch.float32): float32_gate_logits, the Softmax and its Cast to the dtype
// (symbolic_opset9.py softmax); greedy: the top-k scores; group_limited_greedy: each group's maximum
// (view(N, n_group, E / n_group).max(dim=-1): ReduceMax), the group mask (group_masked), the top-k of the masked
// scores; the weights (TopK's values, not gathered) times routed_scaling_factor, traced even at 1.0.
std::string LlamaBuilder::deepseek_v2_router(const std::string& g, const std::string& p, const std::string& hidden,
                                             std::string* indices) {
  const int64_t experts = c_.num_experts, groups = c_.n_group, per = experts / groups;
  const std::string weight = param(p + ".weight", {experts, c_.hidden_size});
  e_.scope = g;
  std::string scores = e_.op("Softmax", {float32_gate_logits(g, weight, hidden)});
  e_.i("axis", -1);
  scores = e_.op("Cast", {scores});
  e_.i("to", TensorProto::FLOAT);
  std::string choice = scores;
  if (c_.group_limited) {
    const std::string grouped = reshape(scores, e_.const_i64({-1, groups, per}, false));
    const std::string group_scores = e_.op("ReduceMax", {grouped});
    e_.ints("axes", {-1}).i("keepdims", 0);
    choice = group_masked(group_scores, scores);
  }
  topk(choice, c_.experts_per_token, false);
  if (indices) *indices = e_.output(1);
  const std::string routed = e_.op("Mul", {e_.output(0), e_.const_f32({float(c_.routed_scaling_factor)}, {})});
  e_.scope = g.substr(0, g.size() - 5);  // back in the block
  return routed;
}

}  // namespace memplan
