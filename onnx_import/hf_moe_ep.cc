// --ep N: expert parallelism as torchtitan v0.2.2 runs it (pytorch/torchtitan at
// 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce), the graph of rank 0 of the N expert-parallel GPUs, around the grouped
// experts of onnx_import/hf_moe_grouped.h. The N GPUs are data-parallel ranks (parallel_dims.py ParallelDims.
// build_mesh: the sparse mesh's ep dimension is carved out of the data-parallel shard dimension, efsdp = dp_shard /
// ep), each with its own batch of N_t = batch x seq tokens, its own router, and E/N of the experts:
//  - torchtitan/distributed/expert_parallel.py ExpertParallel._partition_fn: every parameter of the experts module
//    distribute_tensor(..., [Shard(0)]): rank r holds experts r·E/N .. (r+1)·E/N - 1 (gate_up_proj and down_proj
//    [E/N, ...]); the router and everything else is whole, as the other flags hold it.
//  - ExpertParallel._token_dispatch, before the experts run on the rows sorted by expert (routed_input, here
//    current_g [S, H], S = N_t x k) and the tokens per expert ([E], histc's float32 counts):
//    all_to_all_single(num_tokens_per_expert) gives num_tokens_per_expert_group [E] (no grad), whose sums per rank
//    are the output splits; all_to_all_single_autograd(routed_input, output_splits, input_splits) gives the R rows
//    this rank's experts receive from all N ranks, [R, H]. torch.distributed._functional_collectives
//    all_to_all_single_autograd: a fresh output; its backward is the reverse all-to-all of the grad (a fresh [S, H]),
//    saving no tensor.
//  - torchtitan/models/moe/utils.py _permute (TOKEN_GROUP_ALIGN_SIZE_M = 8, the bf16 alignment):
//    padded_max_len = _round_up(R + (E/N) x 8, 8) = P; x = torch.vstack((x, x.new_zeros((H)))) [R + 1, H] (one
//    zero row the padding reads); models/moe/kernels.py generate_permute_indices gives permuted_indices [P] int32
//    (fill_indices_wrapper: torch.full((max_len,), -1, dtype=torch.int32), -1 reading the zero row), m_sizes and
//    m_offsets [E/N] int32; x[permuted_indices, :] [P, H] (IndexBackward keeps the indices).
//  - torchtitan/models/moe/moe.py GroupedExperts.forward on an "ep" DTensor runs _run_experts_grouped_mm without
//    indices_padding_wrapper: offsets = torch.cumsum(num_tokens_per_expert, dim=0, dtype=torch.int32) [E/N], then the
//    grouped GEMMs over P rows. Here they are transformers' (hf_moe_grouped.h: gate_up [P, 2I], act(gate) * up
//    [P, I], down [P, H]) on the local [E/N, ...] parameters: torchtitan's own GroupedExperts (w1, w3, w2 as three
//    [E, I, H] matrices, routing scores applied before the experts) is not built, only its rows and buffers.
//  - _unpermute: out.new_empty(input_shape) [R + 1, H], out_unpermuted[permuted_indices, :] = out (index_put_, in
//    place, its backward grad[indices] [P, H]), out_unpermuted[:-1] (a view, [R, H]);
//    ExpertParallel._token_combine: all_to_all_single_autograd(routed_output, input_splits, output_splits) [S, H]
//    (backward: the reverse all-to-all, a fresh [R, H]). transformers' weighting, un-sort and index_add_ follow.
// Which rows rank 0 receives (--moe-routing, hf_moe.h's rules on every rank's own tokens): balanced deals each rank's
// S pairs to expert p mod E, so rank 0's experts 0..E/N-1 get c = floor(S / E) x E/N + min(S mod E, E/N) rows from
// each rank (the busiest rank: the first experts get the extra rows); worst has every token pick experts 0..k-1, so
// rank 0 gets N_t x min(k, E/N) rows from each rank, the most any rank can receive (a token's k experts are
// distinct). R = N x c. The all-to-all's splits are values in the graph (ATen all_to_all_single's second input,
// onnx_import/rules/aten.cc), so the shapes follow the bound batch and sequence.
// Refused (check_expert_parallel): a model without experts, the eager loop (torchtitan's ExpertParallel wraps a
// grouped experts module), gpt_oss (its biased experts are torchtitan's GptOssExpertParallel, models/gpt_oss/infra/
// expert_parallel.py, not modelled), an N that does not divide E (distribute_tensor's Shard(0) would give ranks
// unequal experts; transformers' GroupedGemmParallel.shard_tensor refuses it outright), and the decode and prefill
// graphs (--ep is a training layout).
#include <algorithm>

#include "onnx_import/decoder_builder.h"
#include "onnx_import/errors.h"
#include "onnx_import/hf_moe_grouped.h"

namespace memplan {

using onnx::TensorProto;

void check_expert_parallel(const std::string& path, int ep, ConfigGraph kind, DecoderConfig& config) {
  const std::string flag = "--ep " + std::to_string(ep);
  if (config.num_experts == 0)
    throw InputError(path + ": " + flag + " splits a mixture of experts' experts; model_type \"" + config.model_type +
                     "\" has no experts");
  if (!config.grouped_experts)
    throw InputError(path + ": " + flag + " with --experts-implementation eager: torchtitan's ExpertParallel wraps "
                     "grouped experts (the rows sorted by expert); give --experts-implementation grouped_mm");
  if (config.gpt_oss)
    throw InputError(path + ": " + flag + " with model_type \"gpt_oss\": its biased experts' expert parallelism "
                     "(torchtitan's GptOssExpertParallel) is not modelled");
  if (config.num_experts % ep != 0)
    throw InputError(path + ": " + flag + ": the model's " + std::to_string(config.num_experts) +
                     " experts (num_experts) do not split evenly over " + std::to_string(ep) + " GPUs");
  if (kind != ConfigGraph::Train)
    throw InputError(path + ": " + flag + " is a training layout: it applies to --graph train");
  config.expert_parallel = ep;
}

std::string LlamaBuilder::expert_parallel_rows(const std::string& px, const std::string& rows,
                                               const std::string& counts) {
  const int64_t ep = c_.expert_parallel, experts = c_.num_experts, held = experts / ep, k = c_.experts_per_token;
  const int64_t h = c_.hidden_size, align = 8;  // utils.py TOKEN_GROUP_ALIGN_SIZE_M
  auto i64 = [&](int64_t v) { return e_.const_i64({v}, false); };
  // S, this rank's routed rows, as a [1] value.
  const std::string s = e_.op("Gather", {e_.op("Shape", {rows}), i64(0)});
  e_.i("axis", 0);
  // The rows rank 0's experts receive from each rank (the rules above).
  std::string each;
  if (c_.worst_routing) {
    each = e_.op("Mul", {e_.op("Div", {s, i64(k)}), i64(std::min(k, held))});
  } else {
    const std::string whole = e_.op("Mul", {e_.op("Div", {s, i64(experts)}), i64(held)});
    each = e_.op("Add", {whole, e_.op("Min", {e_.op("Mod", {s, i64(experts)}), i64(held)})});
  }
  const std::string splits = e_.op("Concat", std::vector<std::string>(static_cast<size_t>(ep), each));
  e_.i("axis", 0);
  // num_tokens_per_expert_group = all_to_all_single(num_tokens_per_expert, None, None): equal splits, [E].
  const std::string group_counts = e_.op("ATen", {counts, i64(experts)});
  e_.aten("all_to_all_single");
  const std::string received = e_.op("ATen", {rows, splits});  // all_to_all_single_autograd: [R, H]
  e_.aten("all_to_all_single");
  // _permute: P = _round_up(R + E/N x 8, 8); vstack with x.new_zeros((H)); x[permuted_indices, :].
  const std::string r = e_.op("Mul", {each, i64(ep)});
  const std::string padded =
      e_.op("Mul", {e_.op("Div", {e_.op("Add", {r, i64(held * align + align - 1)}), i64(align)}), i64(align)});
  const std::string zero_row = e_.op("ConstantOfShape", {e_.const_i64({1, h}, false)});
  const float zero = 0.0f;
  e_.tensor("value", TensorProto::FLOAT, {1}, &zero, 4);
  const std::string stacked = e_.op("Concat", {received, zero_row});
  e_.i("axis", 0);
  e_.op("ATen", {group_counts, padded}, 3);
  e_.aten("generate_permute_indices").i("experts_per_rank", held).i("alignment", align);
  const std::string permuted_indices = e_.output(0), m_sizes = e_.output(1);
  const std::string permuted = e_.op("Gather", {stacked, permuted_indices});
  e_.i("axis", 0);
  // GroupedExperts: torch.cumsum(num_tokens_per_expert, dim=0, dtype=torch.int32); the grouped GEMMs on E/N experts.
  const std::string offsets = e_.op("CumSum", {m_sizes, e_.const_i64({0}, true)});
  auto grouped = [&](const std::string& a, const std::string& proj) {
    const std::string y = e_.op("ATen", {a, transpose(px + "." + proj, {0, 2, 1}), offsets});
    e_.aten("_grouped_mm");
    return y;
  };
  const std::string out = grouped(grouped_swiglu(grouped(permuted, "gate_up_proj")), "down_proj");
  // _unpermute: new_empty(input_shape), [permuted_indices, :] = out (in place), [:-1].
  const std::string empty = e_.op("ConstantOfShape", {e_.op("Shape", {stacked})});
  e_.tensor("value", TensorProto::FLOAT, {1}, &zero, 4);
  const std::string column = e_.op("Unsqueeze", {permuted_indices, e_.const_i64({1}, false)});
  const std::string index = e_.op("Expand", {column, e_.op("Shape", {out})});
  const std::string scattered = e_.op("ScatterElements", {empty, index, out});
  e_.i("axis", 0);
  const std::string kept = e_.op("Slice", {scattered, i64(0), r, i64(0)});
  // _token_combine: all_to_all_single_autograd(routed_output, input_splits, output_splits): this rank's S rows.
  const std::string back = e_.op("ATen", {kept, s});
  e_.aten("all_to_all_single");
  return back;
}

}  // namespace memplan
