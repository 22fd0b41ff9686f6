// LoRA through PEFT's target_parameters (LoraConfig(target_parameters=[...]), its ParamWrapper, huggingface/peft
// 5d602fd src/peft/tuners/lora/layer.py) on a mixture of experts' stacked [E, d1, d2] parameters, which
// add_lora_adapters adapts (lora_adapters.cc, Builder::parameter_delta and parameter_sum) where --lora-targets names
// one.
#pragma once

#include <cstdint>
#include <string>

#include "cost_models/lora_adapters.h"
#include "onnx_import/graph.h"

namespace memplan {

// Throws InputError unless every reader of the stacked parameter `w` is transformers' grouped experts' read.
void check_lora_parameter_readers(const Graph& g, int32_t w);

// Whether `w` is stored [E, in, out] (read by _grouped_mm untransposed: gpt_oss, PEFT's is_transposed).
bool lora_parameter_stored_in_out(const Graph& g, int32_t w);

// Throws InputError where --frozen-dtype stores the stacked parameter `w` in a half type the step does not compute its
// parameters in (fp16/bf16 over float32 parameters): PEFT adds delta.to(param.dtype) to it in that type, and the
// half sum meets _grouped_mm, which no autocast rule casts (lora_parameters.cc).
void check_lora_parameter_storage(const Graph& g, int32_t w, const TrainingOptions& o);

// The stacked parameter the aten::_grouped_mm `n` reads as its groups: graph_facts' grouped_mm_experts, or, where
// add_lora_adapters adapted it, the parameter of the W + delta sum it reads in its place; -1 for any other node.
int32_t grouped_mm_stacked_parameter(const Graph& g, const Node& n);

}  // namespace memplan
