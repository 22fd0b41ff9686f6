#include "report/option_checks.h"

#include <fmt/format.h>

#include <cmath>

#include "onnx_import/errors.h"
#include "report/option_choices.h"

namespace memplan {
namespace {

bool train(const EstimateArgs& a) { return a.mode == mode_name(Mode::Training); }

// A value left at its default and not given is never checked (0 is "not given" for --micro-batches,
// --lora-rank, --context, ...).
void check_row(const OptionSpec& row, const CommandArgs& args, const CommandArgs& defaults) {
  if (field_text(row, args) != field_text(row, defaults)) check_value(row, args);
}

}  // namespace

void check_value(const OptionSpec& row, const CommandArgs& args) {
  const std::string value = field_text(row, args);
  const std::string flag = row.message_name();
  switch (row.kind) {
    case OptionKind::Choice:
      if (std::find(row.choices.begin(), row.choices.end(), value) == row.choices.end())
        throw InputError(fmt::format("{} {}: expected one of {}", flag, value, fmt::join(row.choices, "|")));
      break;
    case OptionKind::Int:
      if (std::stod(value) < row.min)
        throw InputError(fmt::format("{} {}: must be at least {}", flag, value, row.min));
      break;
    case OptionKind::Real: {
      const double v = std::stod(value);
      if (!std::isfinite(v) || v < row.min || v > row.max || (row.max_exclusive && v == row.max))
        throw InputError(row.max >= 1e300 ? fmt::format("{} {}: must be at least {}", flag, value, row.min)
                                          : fmt::format("{} {}: expected a number in [{}, {}{}", flag, value, row.min,
                                                        row.max, row.max_exclusive ? ")" : "]"));
      break;
    }
    default: break;
  }
}

namespace {

// Options that mean something only with another: each refused alone, naming both.
void check_requirements(const EstimateArgs& a) {
  if (!a.gpu.empty() && !a.arch.empty())
    throw InputError("--arch " + a.arch + " and --gpu " + a.gpu + ": give one (--gpu sets the GPU's own architecture)");
  if (a.sequence_parallel && a.tp < 2) throw InputError("--sequence-parallel needs --tp N with N >= 2");
  if ((!a.lora_targets.empty() || a.lora_dropout != 0) && a.lora_rank == 0)
    throw InputError("--lora-targets and --lora-dropout need --lora-rank R");
  if (a.shard != "none" && a.gpus < 2) throw InputError("--shard " + a.shard + " needs --gpus N with N >= 2");
  if (a.micro_batches > 0 && a.pp < 2) throw InputError("--micro-batches applies to --pp N with N >= 2");
  if (!a.fsdp_wrap.empty() && a.shard != "fsdp" && a.pp < 2) throw InputError("--fsdp-wrap applies to --shard fsdp and --pp");
  if (a.double_quant && a.frozen_dtype != "nf4") throw InputError("--double-quant applies to --frozen-dtype nf4");
  if (a.amsgrad && a.optimizer != "adam" && a.optimizer != "adamw")
    throw InputError("--amsgrad applies to --optimizer adam or adamw");
}

}  // namespace

const std::vector<Feature>& features() {
  using S = Scope;
  static const std::vector<Feature> all = {
      {"train", "--mode", "--mode train", S::Any, [](const EstimateArgs& a) { return train(a); }},
      {"onnxruntime", "--runtime", "--runtime onnxruntime", S::Any,
       [](const EstimateArgs& a) { return a.runtime == "onnxruntime"; }},
      {"ideal", "--runtime", "--runtime ideal", S::Any, [](const EstimateArgs& a) { return a.runtime == "ideal"; }},
      {"expandable-segments", "--expandable-segments", "--expandable-segments", S::Any,
       [](const EstimateArgs& a) { return a.expandable_segments; }},
      {"sdpa", "--attention", "--attention sdpa", S::Any, [](const EstimateArgs& a) { return a.attention == "sdpa"; }},
      {"untied", "--tied-embeddings", "--tied-embeddings no", S::Any,
       [](const EstimateArgs& a) { return a.tied_embeddings == "no"; }},
      {"tp", "--tp", "--tp", S::Any, [](const EstimateArgs& a) { return a.tp > 1; }},
      {"sequence-parallel", "--sequence-parallel", "--sequence-parallel", S::Any,
       [](const EstimateArgs& a) { return a.sequence_parallel; }},
      {"half", "--dtype", "--dtype fp16/bf16", S::Inference, [](const EstimateArgs& a) { return a.dtype != "fp32"; }},
      {"schedule-memory", "--schedule", "--schedule memory", S::Inference,
       [](const EstimateArgs& a) { return a.schedule == "memory"; }},
      {"half-precision", "--precision", "--precision fp16/bf16", S::Train,
       [](const EstimateArgs& a) { return a.precision == "fp16" || a.precision == "bf16"; }},
      {"amp", "--precision", "--precision amp-fp16/amp-bf16", S::Train,
       [](const EstimateArgs& a) { return a.precision.rfind("amp-", 0) == 0; }},
      {"checkpoint", "--checkpoint", "--checkpoint", S::Train, [](const EstimateArgs& a) { return a.checkpoint != "none"; }},
      {"grad-accum", "--grad-accum", "--grad-accum", S::Train, [](const EstimateArgs& a) { return a.grad_accum > 1; }},
      {"ddp", "--shard", "--shard ddp", S::Train, [](const EstimateArgs& a) { return a.shard == "ddp"; }},
      {"zero12", "--shard", "--shard zero1/zero2", S::Train,
       [](const EstimateArgs& a) { return a.shard == "zero1" || a.shard == "zero2"; }},
      {"zero3", "--shard", "--shard zero3", S::Train, [](const EstimateArgs& a) { return a.shard == "zero3"; }},
      {"fsdp", "--shard", "--shard fsdp", S::Train, [](const EstimateArgs& a) { return a.shard == "fsdp"; }},
      {"pp", "--pp", "--pp", S::Train, [](const EstimateArgs& a) { return a.pp > 1; }},
      {"lora", "--lora-rank", "--lora-rank", S::Train, [](const EstimateArgs& a) { return a.lora_rank > 0; }},
      {"frozen-nf4", "--frozen-dtype", "--frozen-dtype nf4", S::Train,
       [](const EstimateArgs& a) { return a.frozen_dtype == "nf4"; }},
      {"frozen-int8", "--frozen-dtype", "--frozen-dtype int8", S::Train,
       [](const EstimateArgs& a) { return a.frozen_dtype == "int8"; }},
      {"trainable", "--trainable", "--trainable/--frozen", S::Train,
       [](const EstimateArgs& a) { return !a.trainable.empty() || !a.frozen.empty(); }},
      {"torch-1.13", "--torch", "--torch 1.13", S::Train, [](const EstimateArgs& a) { return a.torch == "1.13"; }},
  };
  return all;
}

const std::vector<Refusal>& refused_pairs() {
  static const std::vector<Refusal> all = {
      {"onnxruntime", "train", "a training step is modelled for PyTorch only: use --runtime pytorch or ideal"},
      {"onnxruntime", "tp", "--tp models Megatron-style tensor parallelism in PyTorch: use --runtime pytorch or ideal"},
      {"onnxruntime", "sdpa",
       "--attention sdpa is PyTorch's scaled_dot_product_attention; ONNX Runtime runs the graph's attention"},
      {"onnxruntime", "expandable-segments", "--expandable-segments configures PyTorch's caching allocator: use --runtime pytorch"},
      {"ideal", "expandable-segments", "--expandable-segments configures PyTorch's caching allocator: use --runtime pytorch"},
      {"sdpa", "torch-1.13", "scaled_dot_product_attention is new in PyTorch 2.0: use --torch 2"},
      {"pp", "fsdp", "not modelled: use --shard ddp or zero1/zero2/zero3 within a stage"},
      {"pp", "checkpoint", "not modelled yet"},
      {"pp", "grad-accum", "the pipeline's --micro-batches are its gradient accumulation: give --micro-batches M"},
      {"tp", "lora", "not modelled: the adapters of a tensor-parallel layer are not split"},
      // FSDP flattens a unit's parameters into one floating tensor (torch/distributed/fsdp/_flat_param.py,
      // FlatParamHandle._validate_tensors_to_flatten: one dtype per flat parameter); bitsandbytes' Int8Params
      // are int8 tensors with their own scales. (fp16/bf16 re-storage is refused by the cost model when it
      // actually re-stores a weight: that depends on the model.)
      {"fsdp", "frozen-int8", "FSDP flattens a unit's parameters into one floating tensor of one dtype; LLM.int8 "
                              "weights cannot be flattened with the ones that train"},
  };
  return all;
}

const Refusal* refusal(const std::string& a, const std::string& b) {
  for (const Refusal& r : refused_pairs())
    if ((r.a == a && r.b == b) || (r.a == b && r.b == a)) return &r;
  return nullptr;
}

void validate_estimate_args(const EstimateArgs& a) {
  CommandArgs args;
  args.estimate = a;
  const CommandArgs defaults;
  for (const OptionSpec& row : option_schema())
    if (row.applies_to(kEstimate) || row.applies_to(kPlan)) check_row(row, args, defaults);
  // Each option against --mode.
  const bool training = train(a);
  for (const OptionSpec& row : option_schema()) {
    if (!(row.applies_to(kEstimate) || row.applies_to(kPlan)) || row.scope == Scope::Any) continue;
    if (field_text(row, args) == field_text(row, defaults)) continue;
    if (row.scope == Scope::Train && !training)
      throw InputError(row.message_name() + " applies to --mode train");
    if (row.scope == Scope::Inference && training)
      throw InputError(row.message_name() + " " + field_text(row, args) + " applies to --mode inference, not --mode train");
  }
  check_requirements(a);
  // The combination matrix.
  std::vector<const Feature*> on;
  for (const Feature& f : features())
    if (f.active(a)) on.push_back(&f);
  for (size_t i = 0; i < on.size(); ++i)
    for (size_t j = i + 1; j < on.size(); ++j)
      if (const Refusal* r = refusal(on[i]->name, on[j]->name))
        throw InputError(on[i]->value + " with " + on[j]->value + ": " + r->reason);
}

void validate_options(const CommandArgs& args, Command command) {
  const CommandArgs defaults;
  for (const OptionSpec& row : option_schema())
    if (row.applies_to(command)) check_row(row, args, defaults);
  if (command != kInspect) validate_estimate_args(args.estimate);
}

}  // namespace memplan
