// --deepspeed CONFIG.json: the DeepSpeed config a training run would be given, read for what sizes GPU memory
// (zero_optimization's buckets, overlap and offload; fp16/bf16; gradient_accumulation_steps; optimizer). The
// result is a plain DeepSpeedZero for the cost model (cost_models/deepspeed_zero.h) and the settings it must agree
// with. Every key is read, ignored (its list below: it changes no GPU memory, or the graph already decides it), or
// refused with one message naming it. Defaults: DeepSpeed's DeepSpeedZeroConfig (deepspeed/runtime/zero/config.py
// at edaa7221267243c7be7fb49c5d5f5c4fb97b4641).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"

namespace memplan {

struct DeepSpeedSettings {
  DeepSpeedZero zero;             // enabled, the zero_optimization keys read; stage below
  int stage = -1;                 // zero_optimization.stage; -1: absent
  std::string precision;          // "fp16" / "bf16" (that section enabled), "fp32" (both disabled), "" (auto/absent)
  int grad_accum = 0;             // gradient_accumulation_steps as a number; 0: "auto" or absent
  std::string optimizer;          // optimizer.type, lower case; "": none (the client's optimizer, e.g. HF Trainer's)
  std::optional<bool> bf16_check_grad_overflow;  // bf16.check_grad_overflow; absent: DeepSpeedBF16Config's default
};

// The keys ignored, as the docs list them: no GPU memory effect, or the graph/options decide it.
const std::vector<std::string>& deepspeed_ignored_keys();

// Reads and checks the file alone. Throws InputError (one message naming the file and the key).
DeepSpeedSettings read_deepspeed_config(const std::string& path);

// The settings against the command line (deepspeed_config_apply.cc): --shard (or the stage), --precision, --grad-accum, --optimizer,
// --optimizer-impl and --lora-dtype (`impl_given`, `lora_dtype_given`: whether the user or a recipe gave them); fills
// `t` (shard, deepspeed, optimizer_impl, lora_float32). Throws InputError naming both sides of a contradiction.
void apply_deepspeed(const DeepSpeedSettings& s, const std::string& path, const std::string& shard_flag,
                     const std::string& precision_flag, bool impl_given, bool lora_dtype_given, TrainingOptions& t);

}  // namespace memplan
