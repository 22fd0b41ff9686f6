// The fine-tuning rows of the option schema (report/options.h): what trains and what freezes, LoRA's adapters, how
// frozen weights are stored (bitsandbytes, torchao, GPTQ, AWQ), PEFT's k-bit preparation, activation offloading and
// the optimizer in backward. In the schema after --zero-grad (report/option_schema.cc).
#include "report/option_choices.h"
#include "report/option_rows.h"

namespace memplan {

// Rows are designated initializers that name only what differs from OptionSpec's defaults; GCC 12's -Wextra
// would warn for every member left to its default member initializer.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<OptionSpec> finetune_option_rows() {
  using K = OptionKind;
  return {
      {.flag = "--trainable", .kind = K::Text, .commands = kTraining, .scope = Scope::Train,
       .help = "Only parameters whose initializer name matches this regular expression train, e.g. lora_",
       .field = FIELD(estimate.trainable),
       .describe = [](const EstimateArgs& a) { return if_set(!a.trainable.empty(), ", trainable /" + a.trainable + "/"); }},
      {.flag = "--frozen", .kind = K::Text, .commands = kTraining, .scope = Scope::Train,
       .help = "Parameters whose name matches this regular expression are frozen (no grad, no state)",
       .field = FIELD(estimate.frozen),
       .describe = [](const EstimateArgs& a) { return if_set(!a.frozen.empty(), ", frozen /" + a.frozen + "/"); }},
      {.flag = "--lora-rank", .kind = K::Int, .commands = kTraining, .scope = Scope::Train,
       .help = "LoRA what-if: rank-R adapters (PEFT lora.Linear, float32) on the layers --lora-targets names; the base "
               "weights freeze (with --trainable, the base parameters it names train too); 0, the default: no adapters "
               "(with --recipe litgpt, its full fine-tune)",
       .field = FIELD(estimate.lora_rank), .min = 0,
       .describe = [](const EstimateArgs& a) {
         return if_set(a.lora_rank > 0, ", LoRA r=" + std::to_string(a.lora_rank) + " on /" + a.lora_targets + "/");
       }},
      {.flag = "--lora-targets", .kind = K::Text, .commands = kTraining, .scope = Scope::Train,
       .help = "With --lora-rank: regular expression searched in the weight names of the MatMul/Gemm layers to adapt, "
               "e.g. 'q_proj|v_proj' (PEFT's default for Llama), and of a mixture of experts' stacked [experts, in, "
               "out] parameters (grouped_mm experts: 'experts', as PEFT's target_parameters adapts them). Required: "
               "no default",
       .field = FIELD(estimate.lora_targets)},
      {.flag = "--lora-dropout", .kind = K::Real, .commands = kTraining, .scope = Scope::Train,
       .help = "With --lora-rank: the adapters' dropout p, in [0, 1); > 0 copies each adapted layer's input and keeps a "
               "mask",
       .field = FIELD(estimate.lora_dropout), .min = 0, .max = 1, .max_exclusive = true, .show_default = true,
       .describe = [](const EstimateArgs& a) { return if_set(a.lora_dropout != 0, " dropout " + std::to_string(a.lora_dropout)); }},
      {.flag = "--lora-dtype", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "With --lora-rank on a half base (--precision fp16/bf16): float32, the adapters upcast as PEFT does "
               "(get_peft_model's autocast_adapter_dtype=True), each adapted layer's input copied into float32; base, "
               "the adapters in the base's type (autocast_adapter_dtype=False, or PEFT before it). Not given, --deepspeed "
               "at stage 1 or 2 makes it base (DeepSpeed casts every parameter to the enabled type); stage 3 keeps "
               "float32 (a zero.Init model is not cast, DeepSpeed >= 0.19.2)",
       .field = FIELD(estimate.lora_dtype), .choices = kLoraDtypeChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) { return if_set(a.lora_dtype != "float32", " adapters in the base's type"); }},
      {.flag = "--frozen-dtype", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "How frozen weights are stored: same, fp16, bf16, int8 (LLM.int8), nf4 (QLoRA: bitsandbytes', or torchao's NF4Tensor, --nf4-impl), gptq-int4 "
               "(gptqmodel's packed int32, --precision fp16/bf16) or awq-int4 (AutoAWQ's WQLinear_GEMM, --precision "
               "fp16); the quantized ones: Linear weights but the head. Each op dequantizes what it reads. auto: "
               "the type the weights are stored in, as --precision auto reads it (same for a float32 checkpoint): "
               "under --shard fsdp/fsdp2 with --fsdp2-mp in that type, a half checkpoint's frozen weights stay half "
               "beside the float32 ones that train, as accelerate upcasts only what requires grad (the hf-peft "
               "recipe sets it there, hf-trainer too with --trainable/--frozen)",
       .field = FIELD(estimate.frozen_dtype),
       .choices = [] {
         std::vector<std::string> names = kFrozenDtypeChoices.names();
         names.push_back(kAutoPrecision);
         return names;
       }(),
       .show_default = true,
       .describe = [](const EstimateArgs& a) {
         return if_set(!kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Same),
                       ", frozen weights " + a.frozen_dtype + (a.frozen_dtype_auto ? " (auto: as stored)" : ""));
       }},
      {.flag = "--double-quant", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "With --frozen-dtype nf4: QLoRA's double quantization of the block scales (bitsandbytes' compress_statistics; torchao's NF4Tensor, --nf4-impl torchao, always quantizes its scalers)",
       .field = FIELD(estimate.double_quant),
       .describe = [](const EstimateArgs& a) { return if_set(a.double_quant, " double-quantized"); }},
      {.flag = "--quantize-experts", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "With --frozen-dtype nf4 (bitsandbytes) on a mixture of experts run as --experts-implementation "
               "grouped_mm: quantize the stacked experts' parameters too, as axolotl's quantize_moe_experts does "
               "(bitsandbytes' replace_parameter_4bit: NF4 in blocks of 64, --double-quant its compress_statistics). "
               "Each experts forward dequantizes each parameter whole into the model's type, and _grouped_mm keeps "
               "that copy for backward (one layer's under --checkpoint layers, every layer's without). Without it "
               "the experts stay unquantized, as transformers' own bitsandbytes loading leaves them (bitsandbytes "
               "issue #1849). No --kbit-prep: axolotl skips it for such a model. axolotl's kernels plugin "
               "(ScatterMoE, SonicMoE) is not modelled",
       .field = FIELD(estimate.quantize_experts),
       .describe = [](const EstimateArgs& a) { return if_set(a.quantize_experts, ", experts quantized (parametrized)"); }},
      {.flag = "--nf4-impl", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "With --frozen-dtype nf4, whose NF4 it is: bitsandbytes (Params4bit and MatMul4Bit, which keeps each "
               "layer's input for backward: PEFT's QLoRA, --double-quant its compress_statistics; under --shard fsdp2 "
               "the packed weight sharded as a plain parameter, its QuantState on every rank: accelerate's FSDP-QLoRA), "
               "torchao (NF4Tensor "
               "and linear_nf4, which keeps the weight alone and dequantizes through get_original_weight: torchtune's "
               "qlora_* models, on one GPU or under --shard fsdp2) or auto (torchao under --shard fsdp2 without "
               "--quantize-experts, else bitsandbytes)",
       .field = FIELD(estimate.nf4_impl), .choices = kNf4ImplChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) {
         return if_set(kNf4ImplChoices.is(a.nf4_impl, Nf4Impl::Torchao), " (torchao NF4)");
       }},
      {.flag = "--frozen-group-size", .kind = K::Int, .commands = kTraining, .scope = Scope::Train,
       .help = "With --frozen-dtype gptq-int4 or awq-int4: inputs per scale and zero point (-1: one group over a "
               "layer's inputs), GPTQConfig's and AwqConfig's group_size",
       .field = FIELD(estimate.frozen_group_size), .min = -1, .show_default = true,
       .describe = [](const EstimateArgs& a) {
         return if_set(a.frozen_group_size != EstimateArgs{}.frozen_group_size,
                       " groups of " + std::to_string(a.frozen_group_size));
       }},
      {.flag = "--kbit-prep", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "PEFT's prepare_model_for_kbit_training over the --frozen-dtype nf4 or awq-int4 base: every parameter "
               "not quantized (embeddings, norms, head) in float32, so activations are float32 and each 4-bit layer "
               "casts its input to --precision (bnb_4bit_compute_dtype: fp32, its default, bf16 or fp16; AWQ: fp16) "
               "and its result back. (PEFT skips the cast for GPTQ: no --kbit-prep there.)",
       .field = FIELD(estimate.kbit_prep),
       .describe = [](const EstimateArgs& a) { return if_set(a.kbit_prep, ", k-bit prepared"); }},
      {.flag = "--offload-activations", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "torchtune's enable_activation_offloading (OffloadActivations, use_streams): saved activations of 1024 "
               "bytes or more copied to pinned host memory in forward and back in backward, the output head's kept; "
               "host bytes reported apart. Needs --checkpoint, as torchtune's recipes do",
       .field = FIELD(estimate.offload_activations),
       .describe = [](const EstimateArgs& a) { return if_set(a.offload_activations, ", activations offloaded"); }},
      {.flag = "--optimizer-in-backward", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "torchtune's optimizer_in_bwd: each parameter updated by its own optimizer as soon as its grad is "
               "complete (a post-accumulate-grad hook, PyTorch >= 2.1), then its grad freed: no step after backward",
       .field = FIELD(estimate.optimizer_in_backward),
       .describe = [](const EstimateArgs& a) { return if_set(a.optimizer_in_backward, ", optimizer in backward"); }},
  };
}
#pragma GCC diagnostic pop

}  // namespace memplan
