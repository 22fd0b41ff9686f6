// What the graph rewrites of pass 1 (tensor_layout.h: the LoRA adapters, the float32 islands) build with: a new
// activation tensor, a Cast node as torch.onnx writes Tensor.to(dtype), and the producers and consumers relinked
// from the node list once the nodes are in their new order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// Appends an activation tensor; returns its id.
int32_t add_activation(Graph& g, const std::string& name, DType dtype, std::vector<int64_t> shape);

// Cast(from) -> out, to `to` (the node is returned, not added: the caller places it).
Node cast_node(const std::string& name, int32_t from, int32_t out, DType to, int opset);

// Producers and consumers from the node list (consumers in schedule order, one entry per use).
void relink(Graph& g);

}  // namespace memplan
