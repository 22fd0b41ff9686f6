// Float32 islands (--upcast): the parts of a half-precision model (--precision fp16/bf16: the weights loaded as
// torch_dtype=bfloat16) that a framework's own code computes in float32, which an export of the float32 model
// cannot show (every `.to(torch.float32)` there is a no-op, and `.to(input_dtype)` is written as a cast to
// float32). A graph rewrite, pass 1 of the layout's (tensor_layout.h), after the LoRA rewrite: it inserts the casts
// the framework runs, as torch.onnx would write them, and pins the island's tensors to float32, so what autograd
// keeps and frees inside the island is the rule the cost model already applies to every op.
//   rmsnorm  transformers' LlamaRMSNorm.forward (src/transformers/models/llama/modeling_llama.py; Mistral, Qwen2/3,
//            Phi-3 copy it): input_dtype = x.dtype; h = x.to(torch.float32); variance = h.pow(2).mean(-1,
//            keepdim=True); h = h * torch.rsqrt(variance + eps); return self.weight * h.to(input_dtype).
//            Gemma's (modeling_gemma2.py Gemma2RMSNorm.forward): output = self._norm(x.float()); output = output *
//            (1.0 + self.weight.float()); return output.type_as(x): the weight's product in float32 too.
//   softmax  transformers' eager attention (modeling_llama.py eager_attention_forward): attn_weights =
//            nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype): softmax casts its
//            input to float32 (aten/src/ATen/native/SoftMax.cpp, softmax with a dtype: input.toType(dtype)), its
//            float32 result is what SoftmaxBackward keeps (derivatives.yaml _softmax: result), then a copy back.
//   logits   transformers up to 4.45 (LlamaForCausalLM.forward: logits = self.lm_head(hidden_states); logits =
//            logits.float()): the model's output is a float32 copy of the head's result, under any precision (a
//            no-op, aliased, where the head writes float32). The loss's copy of the shifted logits is the loss's
//            (training_loss.cc).
// The logits' upcast inside today's loss (transformers' ForCausalLMLoss, src/transformers/loss/loss_utils.py: logits =
// logits.float()) is not a graph op: TrainingOptions::upcast.loss, read by the loss (training_loss.cc).
// Under fp32 or autocast over float32 parameters the RMSNorm and softmax casts are no-ops (the residual stream is
// float32 already), so they are added only where the ops read half parameters (`half`: a half-precision model, or
// autocast over a mixed-precision policy's half gathered parameters, eager_semantics.h compute_param_dtype).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"
#include "onnx_import/graph.h"

namespace memplan {

struct IslandCounts {
  int rms_norms = 0;
  int softmaxes = 0;
  bool logits = false;
};

// Rewrites `g` in place: the casts of each island inserted (node order kept topological), producers and consumers
// relinked. `float32` (one flag per tensor, grown with the graph) gets the island's tensors; `grown` are other
// per-tensor flags to grow with it (LoRA's adapter flags). `softmax` is read only where attention runs as the
// graph's own ops (AttentionImpl::Eager), and never for a router's softmax (the rules below) or an attention with
// sinks (gpt_oss's eager_attention_forward: softmax(..., dtype=combined_logits.dtype), the model's type).
IslandCounts add_fp32_islands(Graph& g, const Upcast& upcast, bool half, bool eager_attention,
                              std::vector<bool>& float32, std::vector<bool>* grown = nullptr);

// DeepseekV3TopkRouter's float32 router (transformers models/deepseek_v3/modeling_deepseek_v3.py at f5a9ec5):
// router_logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)), the sigmoid scores,
// the group-limited top-k and the top-k weights in float32, and DeepseekV3MoE.moe's accumulator
// torch.zeros_like(hidden_states, dtype=topk_weights.dtype), each expert_output * expert_weights.unsqueeze(-1)
// promoted to float32 and index_add_-ed into it, cast back once (final_hidden_states.type(hidden_states.dtype)). The
// casts are in the graph (onnx_import/hf_deepseek_router.cc writes them as torch.onnx does, no-ops in float32), and
// a MatMul of a cast activation by the transpose of a cast parameter says the code meant them: unlike the islands
// above this needs no --upcast. DeepseekV2MoEGate (transformers' modular_deepseek_v2.py, first release) casts the
// same two and takes .softmax(dim=-1, dtype=torch.float32), whose Cast to float32 the region goes on through; its
// block casts each expert's weighted output back (no float32 accumulator). For a model whose ops read half parameters (`half`), pins the casts' outputs to
// float32 and, outside autocast, everything float that the logits reach up to the next float Cast, with the
// float zeros (ConstantOfShape) the region's scatters and index_add_s start from. Under torch.autocast F.linear is
// on the lower-precision list (aten/src/ATen/autocast_mode.h at d70fe7f, AT_FORALL_LOWER_PRECISION_FP: linear), so
// only the two float32 copies are pinned and autocast casts them back for the product. Returns how many routers.
int pin_float32_routers(const Graph& g, bool autocast, std::vector<bool>& float32);

// The router of mixtral, qwen2_moe and qwen3_moe (transformers models/qwen3_moe/modeling_qwen3_moe.py
// Qwen3MoeSparseMoeBlock.forward; MixtralSparseMoeBlock and Qwen2MoeSparseMoeBlock the same): routing_weights =
// F.softmax(router_logits, dim=1, dtype=torch.float), torch.topk on them, `/=` their sum when the config normalizes,
// then .to(hidden_states.dtype). softmax with a dtype converts its input first (aten/src/ATen/native/SoftMax.cpp:
// input_.toType(dtype), then _softmax; only a CUDA Half input takes the half_to_float kernel, which a bf16 model's
// never is) and SoftmaxBackward keeps the float32 result (derivatives.yaml _softmax: result). The export writes a
// Softmax then a Cast to the dtype, which cannot tell `dtype=torch.float` from gpt_oss's `dtype=x.dtype` (its
// attention sinks, its top-k softmax): what marks the router is the Softmax of a linear layer's output whose Cast
// torch.topk reads. A rewrite for a model whose ops read half parameters outside autocast (autocast runs softmax on
// float32 anyway, its fp32 list): the float32 copy of the logits inserted before each such Softmax, its result
// pinned, and everything float the Cast's result reaches up to the next float Cast (the top-k weights, their sum and
// quotient). Returns how many routers.
bool has_softmax_router(const Graph& g);
int add_float32_softmax_routers(Graph& g, std::vector<bool>& float32, std::vector<bool>* grown = nullptr);
std::string softmax_router_note(int routers);
std::string float32_router_note(int routers, bool autocast);

}  // namespace memplan
