// torch.onnx's ATen fallback (operator_export_type=ONNX_ATEN_FALLBACK): an aten op the exporter has no symbolic
// for is written as op type "ATen" in domain "org.pytorch.aten", its aten name in the string attribute `operator`
// (ONNX docs/Operators.md, org.pytorch.aten ATen-1; torch/testing/_internal/common_utils.py assertAtenOp), its
// non-tensor arguments as attributes. memplan shapes the aten ops its config.json graphs write
// (onnx_import/hf_moe_grouped.h); any other is refused, naming the operator.
#include <onnx/onnx_pb.h>

#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

// aten::_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None)
// (aten/src/ATen/native/native_functions.yaml) in the form transformers' grouped_mm_experts_forward calls it
// (src/transformers/integrations/moe.py): self [S, K] the rows sorted by group, mat2 [G, K, N] one matrix per group,
// offs [G] int32 the groups' cumulative row ends. Result [S, N] in self's dtype (out_dtype unset).
void grouped_mm(NodeContext& ctx) {
  const Value& a = ctx.required(0);
  const Value& b = ctx.required(1);
  if (a.shape.size() != 2 || b.shape.size() != 3)
    ctx.fail("aten::_grouped_mm is shaped for a 2-D input [S, K] and 3-D groups [G, K, N]");
  if (a.shape[1] != b.shape[1])
    ctx.fail("aten::_grouped_mm: the input's " + std::to_string(a.shape[1]) + " columns do not meet the groups' " +
             std::to_string(b.shape[1]) + " rows");
  if (const Value* offs = ctx.input(2); !offs || offs->shape.size() != 1 || offs->shape[0] != b.shape[0])
    ctx.fail("aten::_grouped_mm needs offs, one offset per group (" + std::to_string(b.shape[0]) + ")");
  ctx.set_output(0, a.dtype, {a.shape[0], b.shape[2]});
}

// aten::histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0): [bins] in self's dtype
// (aten/src/ATen/native/SummaryOps.cpp histogram_histc_out: result resized to bins).
void histc(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const int64_t bins = ctx.attr_int("bins", 100);
  if (bins <= 0) ctx.fail("aten::histc needs bins > 0");
  ctx.set_output(0, x.dtype, {bins});
}

// all_to_all_single(input, output_split_sizes, ...) (torch/distributed/_functional_collectives.py, and its
// _autograd form): a fresh output whose first dimension is the sum of the output splits, the rest the input's. In the
// graphs of --ep (onnx_import/hf_moe_ep.cc) the splits are the second input, a 1-D int64 value; one element with no
// split list is the equal split the call makes without one.
void all_to_all_single(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const std::optional<std::vector<int64_t>> splits = ctx.input_ints(1);
  if (x.shape.empty() || !splits || splits->empty())
    ctx.fail("all_to_all_single needs a tensor and its output splits, a known 1-D int64 value");
  int64_t rows = 0;
  for (int64_t s : *splits) {
    if (s < 0) ctx.fail("all_to_all_single: a negative split");
    rows = ctx.add(rows, s);
  }
  std::vector<int64_t> shape = x.shape;
  shape[0] = rows;
  ctx.set_output(0, x.dtype, shape);
}

// torchtitan/models/moe/kernels.py generate_permute_indices(tokens_per_expert_group, experts_per_rank, num_ranks,
// max_len, alignment) at 73a0e69: permuted_indices [max_len] int32 (fill_indices_wrapper's torch.full(..., -1,
// dtype=torch.int32)), m_sizes [experts_per_rank] int32 and m_offsets [experts_per_rank] int32. max_len is the second
// input, a known [1] value.
void generate_permute_indices(NodeContext& ctx) {
  ctx.required(0);
  const std::optional<std::vector<int64_t>> max_len = ctx.input_ints(1);
  const int64_t experts = ctx.attr_int("experts_per_rank", 0);
  if (!max_len || max_len->size() != 1 || (*max_len)[0] < 0 || experts <= 0)
    ctx.fail("generate_permute_indices needs a known max_len and experts_per_rank > 0");
  ctx.set_output(0, DType::Int32, {(*max_len)[0]});
  ctx.set_output(1, DType::Int32, {experts});
  ctx.set_output(2, DType::Int32, {experts});
}

bool aten(NodeContext& ctx) {
  const std::string op = ctx.attr_string("operator", "");
  if (op == "_grouped_mm") {
    grouped_mm(ctx);
  } else if (op == "histc") {
    histc(ctx);
  } else if (op == "all_to_all_single") {
    all_to_all_single(ctx);
  } else if (op == "generate_permute_indices") {
    generate_permute_indices(ctx);
  } else {
    ctx.fail("ATen operator \"" + op + "\" (torch.onnx's ATen fallback): memplan has no shape rule for it");
  }
  return true;
}

}  // namespace

void register_aten_rules(RuleTable& t) { t["org.pytorch.aten"]["ATen"] = aten; }

}  // namespace memplan::shape
