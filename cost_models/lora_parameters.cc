// LoRA through PEFT's target_parameters on a mixture of experts' stacked parameters: the readers it is modelled on
// and the note (cost_models/lora_parameters.h).
#include "cost_models/lora_parameters.h"

#include <algorithm>

#include "cost_models/eager_semantics.h"
#include "cost_models/frozen_storage.h"
#include "cost_models/graph_facts.h"
#include "onnx_import/errors.h"

namespace memplan {

// A stacked parameter adapted through target_parameters must be read as transformers' grouped experts read it:
// by aten::_grouped_mm as its groups, directly ([E, in, out], gpt_oss) or through .transpose(-2, -1) ([E, out,
// in]). The eager loops read an expert at a time (self.gate_up_proj[expert_idx]: a select of the cached sum, which
// the graph's Gather by a Python int is as a view of a parameter only): refused.
namespace {

// `node` reads `w` as grouped_mm_experts (graph_facts.h) says: the _grouped_mm itself, or a Transpose only such
// _grouped_mms read.
bool grouped_read(const Graph& g, int32_t w, int32_t node) {
  const Node& n = g.nodes[node];
  if (grouped_mm_experts(g, n) == w) return true;
  if (n.op_type != "Transpose" || n.outputs.empty() || n.outputs[0] < 0) return false;
  const auto& readers = g.tensors[n.outputs[0]].consumers;
  return !readers.empty() && std::all_of(readers.begin(), readers.end(),
                                         [&](int32_t r) { return grouped_mm_experts(g, g.nodes[r]) == w; });
}

}  // namespace

void check_lora_parameter_readers(const Graph& g, int32_t w) {
  const Tensor& t = g.tensors[w];
  if (t.consumers.empty())
    throw InputError("--lora-targets names the stacked parameter '" + t.name + "', which no op of model '" +
                     g.model_path + "' reads");
  for (int32_t c : t.consumers)
    if (!grouped_read(g, w, c))
      throw InputError("--lora-targets names the stacked parameter '" + t.name + "', read by a " +
                       g.nodes[c].op_type + " node ('" + g.nodes[c].name + "'): LoRA through PEFT's target_parameters "
                       "is modelled on transformers' grouped_mm experts only (--experts-implementation grouped_mm), "
                       "not on an eager loop over the experts");
}

// gpt_oss's experts, read by _grouped_mm untransposed: stored [E, in, out] (PEFT's is_transposed).
bool lora_parameter_stored_in_out(const Graph& g, int32_t w) {
  for (int32_t c : g.tensors[w].consumers)
    if (is_aten(g.nodes[c], "_grouped_mm")) return true;
  return false;
}

// --frozen-dtype fp16/bf16 stores the frozen parameters in the half type while the step computes its parameters in
// another (frozen_storage.h: elsewhere each op reads such a weight through a per-op cast, the what-if's assumption).
// A stacked parameter that PEFT adapts is not read so: ParamWrapper.get_delta_weight casts the delta to the parameter's
// own type (`delta_weight.to(param.device, param.dtype)`, huggingface/peft 5d602fd src/peft/tuners/lora/layer.py) and
// _LoraParameterProxy.forward returns `W + self.delta_weight` (upcasting fp8 parameters only: UPCAST_DTYPES,
// src/peft/utils/constants.py), so the sum is half, and aten::_grouped_mm, on no autocast list (aten/src/ATen/
// autocast_mode.h at d70fe7f; still so on main: pytorch/pytorch issue #174763, open, "torch._grouped_mm is not
// autocast-compatible"), would multiply rows of the compute type by it: torch raises "expected mat1 and mat2 to have
// the same dtype". A base really stored in the half type runs in it (embeddings, norms and residual stream too),
// which --precision bf16/fp16 (PEFT's float32 adapters) or amp-* with --param-dtype describe: refused, naming those.
// int8/nf4/gptq-int4/awq-int4 re-store Linear layers only, so the stacked parameters keep their type and are adapted
// as without --frozen-dtype (unquantized_experts_note, training_notes.cc, says so).
void check_lora_parameter_storage(const Graph& g, int32_t w, const TrainingOptions& o) {
  const DType half = frozen_half_dtype(o);
  if (half == DType::Float32 || half == compute_param_dtype(o)) return;  // no half storage, or stored so already
  const std::string type = half == DType::BFloat16 ? "bf16" : "fp16", name(dtype_name(half)),
                    rows(dtype_name(compute_param_dtype(o)));
  throw InputError("--frozen-dtype " + type + " with --lora-targets naming the stacked experts' parameter '" +
                   g.tensors[w].name + "': PEFT's ParamWrapper adds its delta, cast to the parameter's type, to it in "
                   "the type it is stored in, and aten::_grouped_mm (on no autocast list, pytorch issue #174763) "
                   "cannot multiply " + rows + " rows by that " + name + " sum; a base stored in " + name +
                   " runs in " + name + ": give --precision " + type + " (PEFT's adapters stay float32), or "
                   "--precision amp-" + type + " --param-dtype " + type + ", and no --frozen-dtype");
}

int32_t grouped_mm_stacked_parameter(const Graph& g, const Node& n) {
  const int32_t w = grouped_mm_experts(g, n);
  if (w >= 0 || !is_aten(n, "_grouped_mm") || n.inputs.size() < 2 || n.inputs[1] < 0) return w;
  // Builder::parameter_sum's W + delta (an Add of the stacked parameter), read directly or through the
  // .transpose(-2, -1) of transformers' [E, out, in] experts.
  const int32_t sum = untransposed_experts_operand(g, n.inputs[1]);
  const int32_t add = g.tensors[sum].producer;
  if (add < 0 || g.nodes[add].op_type != "Add" || g.nodes[add].inputs.empty()) return -1;
  return stacked_expert_weight(g, g.nodes[add].inputs[0]);
}

std::string lora_parameters_note(const LoraGraph& lora) {
  if (lora.adapted_parameters == 0) return "";
  return " Of those, the adapters of " + std::to_string(lora.adapted_parameters) + " stacked experts' parameter(s) "
         "are LoraConfig(target_parameters=...)'s, run as PEFT's ParamWrapper: delta = einsum(lora_B, lora_A) * "
         "scaling, cast to the parameter's type, and W + delta at the parameter's first read each forward (a new "
         "[experts, in, out] tensor per adapted parameter, which its _grouped_mm keeps for backward).";
}

}  // namespace memplan
