#include "cost_models/selective_checkpoint.h"

#include "cost_models/eager_semantics.h"

namespace memplan {

namespace {

size_t rank_of(const Graph& g, int32_t t) { return t < 0 ? 0 : g.tensors[t].shape.size(); }

}  // namespace

SacOp sac_op_class(const Graph& g, const FusedOp& op) {
  switch (op.kind) {
    case OpKind::Attention: return SacOp::Saved;
    case OpKind::Linear: return op.bias >= 0 ? SacOp::Recomputed : SacOp::Mm;
    case OpKind::Node: break;
    default: return SacOp::Recomputed;
  }
  const Node& n = g.nodes[op.nodes.back()];
  if (n.op_type == "MatMul") {
    const int32_t a = node_input(n, 0), b = node_input(n, 1);
    return a >= 0 && b >= 0 && rank_of(g, a) >= 2 && rank_of(g, b) == 2 ? SacOp::Mm : SacOp::Recomputed;
  }
  if (n.op_type == "Gemm") return node_input(n, 2) >= 0 ? SacOp::Recomputed : SacOp::Mm;
  if (n.op_type == "ReduceMax") {
    const int32_t y = node_output(n, 0);
    return y >= 0 && g.tensors[y].shape.empty() ? SacOp::Saved : SacOp::Recomputed;
  }
  return SacOp::Recomputed;
}

std::vector<bool> sac_saved_ops(const Graph& g, const std::vector<FusedOp>& ops, const std::vector<int32_t>& segment_of_op) {
  std::vector<bool> saved(ops.size(), false);
  int32_t segment = -1;
  int mm_count = 0;  // meta["forward_mm_count"], a new meta per block
  for (size_t i = 0; i < ops.size(); ++i) {
    if (segment_of_op[i] < 0) continue;
    if (segment_of_op[i] != segment) segment = segment_of_op[i], mm_count = 0;
    const SacOp c = sac_op_class(g, ops[i]);
    if (c == SacOp::Mm) ++mm_count;
    saved[i] = c == SacOp::Saved || (c == SacOp::Mm && mm_count % 2 == 1);
  }
  return saved;
}

bool layer_sac_checkpoints(size_t block, int every) {
  return every >= 1 && (block + 1) % static_cast<size_t>(every) == 0;
}

}  // namespace memplan
