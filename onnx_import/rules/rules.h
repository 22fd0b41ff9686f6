// memplan's own shape rules: ops ONNX 1.12's schema inference gets wrong or does not know
// (opset 18+ changes, ops added after opset 17, com.microsoft ops, control flow).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "onnx_import/rules/node_context.h"

namespace memplan::shape {

// Sets the node's outputs and returns true, or returns false to fall back to ONNX's schema inference
// (for opsets the rule does not cover). Throws InputError naming the node for invalid inputs.
using Rule = bool (*)(NodeContext&);

// domain -> op_type -> rule; the default domain is "". Filled by the register_* functions below.
// (std::less<> lets the walker look names up without copying them.)
using RuleTable = std::map<std::string, std::map<std::string, Rule, std::less<>>, std::less<>>;

// ONNX Runtime's contrib-op domain (onnxruntime/core/graph/constants.h kMSDomain).
inline constexpr const char* kMsDomain = "com.microsoft";

// The rule of every op whose output 0 has input 0's dtype and shape (rules/core.cc): Gelu-20, Mish-18,
// MeanVarianceNormalization, com.microsoft's FastGelu, BiasGelu, RotaryEmbedding...
bool same_as_first(NodeContext& ctx);

void register_core_rules(RuleTable& table);         // rules/core.cc: Constant, Cast, Shape-like ops
void register_opset18_rules(RuleTable& table);      // rules/opset18.cc: Reduce*, Split, Pad, Resize, pools
void register_new_op_rules(RuleTable& table);       // rules/new_ops.cc: ops added after opset 17
void register_microsoft_rules(RuleTable& table);    // rules/microsoft.cc: com.microsoft contrib ops
void register_quantized_rules(RuleTable& table);    // rules/quantized.cc: Q/DQ, QLinear*, *Integer, MatMulNBits
void register_control_flow_rules(RuleTable& table); // rules/control_flow.cc: If, Loop, Scan
void register_onnx_fix_rules(RuleTable& table);     // rules/onnx_fixes.cc: ops ONNX 1.12 leaves unshaped
void register_sequence_rules(RuleTable& table);
void register_aten_rules(RuleTable& table);         // rules/aten.cc: torch.onnx's ATen fallback (org.pytorch.aten)     // rules/sequences.cc: Sequence*, Optional*, SplitToSequence, ...

// Ops whose inputs may be sequences or optionals (rules/sequences.cc, control_flow.cc); every other op is
// refused one, naming the node, before its rule or ONNX's inference reads it as a tensor.
bool takes_sequences(std::string_view domain, std::string_view op);

// The table with every rule registered; built once.
const RuleTable& rule_table();

}  // namespace memplan::shape
