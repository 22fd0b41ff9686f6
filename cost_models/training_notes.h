// The notes a training step's result gives on its configuration (training_notes.cc): what the graph's rewrites
// and the stored types did, and what the layout the step ran keeps (checkpointing, sharding, the loss, gradient
// accumulation, the optimizer, frozen storage). build_training_program (training.cc) adds them in this order.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cost_models/fp32_islands.h"
#include "cost_models/training_context.h"

namespace memplan {

// The tensors' types: the float32 routers and softmax routers pinned, --upcast's islands, --param-dtype under
// autocast, --kbit-prep's `kbit_layers` 4-bit layers.
void add_dtype_notes(const TrainingOptions& options, const std::optional<IslandCounts>& islands, int routers,
                     int softmax_routers, int kbit_layers, std::vector<std::string>& notes);

// The layout the step ran (`result`: its frozen bytes): checkpointing without separators, ZeRO-3, FSDP and FSDP2,
// the chunked and fused losses, grads kept and accumulated, the optimizer's update, cuBLAS's workspaces, the
// optimizer states' first or steady iteration, --frozen-dtype.
void add_layout_notes(const TrainingContext& context, const TrainingOptions& options, const TrainingResult& result,
                      std::vector<std::string>& notes);

}  // namespace memplan
