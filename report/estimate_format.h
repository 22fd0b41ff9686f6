// An Estimate as JSON ("memplan.estimate/1", docs/json.md), as a table for people, and as markdown.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "onnx_import/graph.h"
#include "report/estimate.h"

namespace memplan {

inline constexpr const char* kEstimateSchema = "memplan.estimate/1";

// `configuration` is a one-line description of the options ("inference, pytorch runtime, fp32, batch=8").
nlohmann::ordered_json estimate_to_json(const Estimate& e, const Graph& graph, const std::string& configuration);
std::string estimate_to_text(const Estimate& e, const std::string& configuration);
std::string estimate_to_markdown(const Estimate& e, const std::string& configuration);

// {"weights": ..., ..., "fixed": ...}: the breakdown as estimate and baseline files write it.
// The graph inputs bound with --value and their contents: {"sr": 16000, "ids": [1, 2]} (a scalar as a number,
// a 1-D tensor as an array). estimate's "values" and inspect's "bound_values".
nlohmann::ordered_json bound_values_json(const Graph& graph);
nlohmann::ordered_json breakdown_to_json(const Breakdown& b);
// Memory outside the allocator (report/device_memory.h): the CUDA context, NCCL's buffers.
nlohmann::ordered_json outside_allocator_json(const OutsideAllocator& o);

// The breakdown as (label, bytes) rows in a fixed order, zero rows included.
std::vector<std::pair<std::string, uint64_t>> breakdown_rows(const Estimate& e);

// What a decision on a device budget (fit's answer, check's budget) says of the workspace: the part of the
// decision it took (counted_bytes), and with benchmark the free memory at the least loaded convolution on that
// budget (budget − fixed − least allocated: the most a plan may take there) and the first iteration's extra.
// `fixed`: the runtime's bytes outside the allocator. The JSON object and the lines of text fit and check print.
uint64_t cudnn_free_at_least_loaded_convolution(const CudnnWorkspaceRange& r, uint64_t budget_bytes, uint64_t fixed);
nlohmann::ordered_json cudnn_decision_json(const CudnnWorkspaceRange& r, uint64_t budget_bytes, uint64_t fixed);
std::string cudnn_decision_text(const CudnnWorkspaceRange& r, uint64_t budget_bytes, uint64_t fixed);

}  // namespace memplan
