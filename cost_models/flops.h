// Forward FLOP estimates per node, used only to weigh checkpointing's recompute cost (a ratio to the
// forward pass, so only relative sizes matter). Multiply-add = 2 FLOPs.
#pragma once

#include <cstdint>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// Conv / ConvTranspose: 2 * output elements * (input channels / group) * kernel elements.
// MatMul / Gemm: 2 * output elements * K (the contracted dimension).
// Everything else: one FLOP per output element (elementwise, reductions, normalisations, copies are
// all memory-bound and cost about as much as writing their result); shape-only ops: 0.
uint64_t node_flops(const Graph& g, int32_t node);

// An op's FLOPs: the sum over the nodes it runs as one (a fused op's, FusedOp::nodes), overflow-checked. The one
// count both cost models take.
uint64_t op_flops(const Graph& g, const std::vector<int32_t>& nodes);

}  // namespace memplan
