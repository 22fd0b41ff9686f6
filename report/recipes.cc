#include "report/recipes.h"

#include <algorithm>

#include "onnx_import/errors.h"
#include "onnx_import/hf_config.h"
#include "report/option_choices.h"

namespace memplan {

const char kLoraUnitsWrap[] = R"(^(.*lora_[AB].*|.*?\.[0-9]+\.))";

namespace {

// transformers' OptimizerNames (src/transformers/training_args.py): adamw_torch(_fused), adamw_bnb_8bit,
// paged_adamw_32bit, paged_adamw_8bit, sgd (torch.optim.SGD; momentum through optim_args), and others memplan does
// not model (adafactor, lion, ...); no plain Adam.
const char* const kTrainerOptimizers =
    "transformers TrainingArguments.optim (OptimizerNames: adamw_torch, adamw_bnb_8bit, paged_adamw_32bit, "
    "paged_adamw_8bit, sgd; no plain Adam)";

bool fsdp(const CommandArgs& a) { return kShardChoices.is(a.estimate.shard, Sharding::Fsdp); }

// Under FSDP the Trainer wraps a PEFT LoRA model with PEFT's policy (src/transformers/trainer.py,
// _fsdp_qlora_plugin_updates: fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model); peft src/peft/utils/
// other.py fsdp_auto_wrap_policy: a lambda policy wrapping every leaf module whose weight requires grad, so each
// lora_A and lora_B Linear, or'ed with the transformer layer class): each adapter weight a unit of its own, each
// decoder layer's frozen base a unit, the rest in the root. As --fsdp-wrap: an adapter weight's whole name, else the
// first "<prefix>.<N>." of the name.
RecipeSetting peft_fsdp_wrap() {
  return {"--fsdp-wrap", kLoraUnitsWrap,
          "src/transformers/trainer.py _fsdp_qlora_plugin_updates: peft src/peft/utils/other.py fsdp_auto_wrap_policy "
          "(each LoRA Linear its own unit, besides each decoder layer)",
          fsdp, "--shard fsdp"};
}

bool fsdp2(const CommandArgs& a) { return kShardChoices.is(a.estimate.shard, Sharding::Fsdp2); }

// FSDP1 with accumulation: the Trainer runs every batch sample of a step but the last inside accelerate's no_sync.
bool fsdp_accumulating(const CommandArgs& a) { return fsdp(a) && a.estimate.grad_accum > 1; }

// The Trainer's bf16/fp16 under FSDP1 is accelerate's mixed_precision: a MixedPrecision of param_dtype = reduce_dtype
// = the half type (utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision, v1.14.0) under
// torch.autocast (accelerator.py Accelerator.__init__ native_amp, prepare_model). Under FSDP2 there is no autocast
// (fsdp2_autocast below).
bool fsdp1_amp(const CommandArgs& a, Precision amp) { return fsdp(a) && kPrecisionChoices.is(a.estimate.precision, amp); }
bool fsdp_amp_bf16(const CommandArgs& a) { return fsdp1_amp(a, Precision::AmpBf16); }
bool fsdp_amp_fp16(const CommandArgs& a) { return fsdp1_amp(a, Precision::AmpFp16); }

const char kAccelerateMixedPrecision[] =
    "accelerate utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision (v1.14.0): param_dtype = "
    "reduce_dtype = the Trainer's bf16/fp16, kept under torch.autocast (accelerator.py prepare_model, native_amp); "
    "the flat parameters that train upcast to float32 shards (Accelerator.prepare_model)";

// accelerate's mixed precision under FSDP, a policy in the Trainer's half type: FSDP1 under amp-* (whose policy the
// hf-* recipes set), FSDP2 with the --fsdp2-mp its refusal of amp-* asks for (fsdp2_autocast below). There accelerate
// upcasts to float32 only what requires grad (Accelerator.prepare_model: each FSDP1 flat parameter that does;
// utils/fsdp_utils.py fsdp2_prepare_model: each parameter; v1.14.0): the frozen base keeps the checkpoint's type.
// The setting applies where parameters are frozen: LoRA's base (hf-peft sets --lora-rank before it), or what
// --trainable/--frozen leave out (a full fine-tune has none).
bool accelerate_fsdp_policy_over_frozen(const CommandArgs& a) {
  const EstimateArgs& e = a.estimate;
  const bool policy = (fsdp(a) && amp_precision(e.precision)) ||
                      (fsdp2(a) && !kFsdp2MpChoices.is(e.fsdp2_mp, {Precision::Fp32, DType::Float32}));
  return policy && (e.lora_rank > 0 || !e.trainable.empty() || !e.frozen.empty());
}
const RecipeSetting kFrozenAsLoaded = {
    "--frozen-dtype", "auto",
    "accelerate accelerator.py Accelerator.prepare_model (FSDP1: `param.data = param.data.to(torch.float32)` for each "
    "flat parameter that requires grad) and utils/fsdp_utils.py fsdp2_prepare_model (FSDP2: each parameter that "
    "requires grad), v1.14.0: the frozen base stays in the type from_pretrained loaded it in",
    accelerate_fsdp_policy_over_frozen,
    "--shard fsdp with --precision amp-*, or --shard fsdp2 with --fsdp2-mp, over frozen parameters (LoRA, "
    "--trainable/--frozen)"};

// accelerate prepares an FSDP2 model with utils/fsdp_utils.py fsdp2_prepare_model (Accelerator._prepare_fsdp2,
// v1.14.0), never prepare_model, so nothing wraps its forward in torch.autocast (nor the Trainer: its
// autocast_smart_context_manager autocasts only on the CPU). The Trainer's bf16/fp16 there is the policy alone
// (MixedPrecisionPolicy of param_dtype = reduce_dtype = output_dtype = the half type, set_mixed_precision) over the
// trained parameters upcast to float32 (fsdp2_prepare_model): memplan's --precision fp32 --fsdp2-mp T:T, not amp-*.
std::string fsdp2_autocast(const CommandArgs& a) {
  const EstimateArgs& e = a.estimate;
  if (!fsdp2(a) || !amp_precision(e.precision)) return "";
  const std::string half = kPrecisionChoices.is(e.precision, Precision::AmpBf16) ? "bf16" : "fp16";
  return "--recipe " + e.recipe + " with --shard " + e.shard + " and --precision " + e.precision + ": accelerate runs "
         "no torch.autocast under FSDP2 (Accelerator._prepare_fsdp2 prepares the model with fsdp2_prepare_model, "
         "never prepare_model's autocast wrapper; v1.14.0): the Trainer's " + half + "=True there is float32 shards "
         "computing in the policy's type, --precision fp32 --fsdp2-mp " + half + ":" + half;
}

// The Trainer's bf16/fp16 is accelerate's mixed precision, which wraps the model's forward in torch.autocast and
// convert_outputs_to_fp32 where it is native AMP: not under DeepSpeed (Accelerator.__init__ leaves native_amp False
// for DistributedType.DEEPSPEED) nor under FSDP2 (Accelerator._prepare_fsdp2 prepares the model with
// fsdp2_prepare_model, never prepare_model). The copy follows a loss the forward computed (report/command_rules.cc).
bool accelerate_converts_outputs(const CommandArgs& a) {
  const EstimateArgs& e = a.estimate;
  const bool native = e.deepspeed.empty() && (kShardChoices.is(e.shard, Sharding::None) ||
                                              kShardChoices.is(e.shard, Sharding::Ddp) || fsdp(a));
  return amp_precision(e.precision) && native && whole_output_loss(e.loss);
}

// transformers 5 runs a mixture of experts' experts with grouped_mm unless told otherwise; memplan models that for a
// config.json mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3 or gpt_oss (onnx_import/hf_moe_grouped.h).
bool grouped_experts_modelled(const CommandArgs& a) {
  const ModelArgs& m = a.estimate.model;
  if (!is_config_path(m.path)) return false;
  const std::string type = config_model_type(m.path);
  return type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" || type == "deepseek_v2" ||
         type == "deepseek_v3" || type == "gpt_oss";
}


// The model in the type its checkpoint is stored in: from_pretrained's dtype defaults to "auto" since transformers 5,
// and the Trainer does not cast the model (bf16=True adds autocast around it). Not for hf-peft-qlora, whose
// prepare_model_for_kbit_training casts every parameter it leaves unquantized to float32 and whose 4-bit layers
// compute in bnb_4bit_compute_dtype (float32 by default).
const RecipeSetting kStoredPrecision = {
    "--precision", "auto",
    "src/transformers/modeling_utils.py PreTrainedModel.from_pretrained: dtype defaults to \"auto\" (the config's "
    "torch_dtype) since transformers 5 (PR #42805), float32 before"};

// The Trainer's bf16=True/fp16=True outside FSDP: accelerate wraps the forward in torch.autocast and keeps the
// parameters in the type from_pretrained loaded them in (the checkpoint's, kStoredPrecision), so their grads and
// AdamW's states are that type too (cost_models/eager_semantics.h stored_param_dtype). Under FSDP accelerate upcasts
// the parameters that train to float32 (kAccelerateMixedPrecision), the default --param-dtype fp32.
bool unsharded_amp(const CommandArgs& a) {
  return amp_precision(a.estimate.precision) && !fsdp(a) && !fsdp2(a);
}
const RecipeSetting kStoredParamDtype = {
    "--param-dtype", "auto",
    "src/transformers/training_args.py TrainingArguments.__post_init__ (huggingface/transformers 00349ae: "
    "mixed_precision = \"bf16\" for bf16=True) and trainer.py Trainer._build_accelerator_args (main: "
    "Accelerator(mixed_precision=...)); accelerate accelerator.py "
    "Accelerator.prepare_model (16cb6eb): native_amp wraps the forward in torch.autocast and upcasts no parameter "
    "outside FSDP",
    unsharded_amp, "--precision amp-* without --shard fsdp/fsdp2"};

// transformers' Trainer over a model as from_pretrained loads it. Sources read at huggingface/transformers main
// (loss_utils.py at 0114da0).
std::vector<RecipeSetting> hf_trainer_settings() {
  return {
      {"--upcast", "rmsnorm,softmax,loss",
       "src/transformers/models/llama/modeling_llama.py LlamaRMSNorm.forward (hidden_states.to(torch.float32)) and "
       "eager_attention_forward (softmax(..., dtype=torch.float32)); src/transformers/loss/loss_utils.py "
       "ForCausalLMLoss (logits = logits.float())"},
      {"--free-output", "true",
       "src/transformers/trainer.py Trainer.compute_loss returns the loss alone (outputs only with "
       "return_outputs), so the logits die before backward"},
      {"--attention", "sdpa",
       "src/transformers/modeling_utils.py PreTrainedModel._check_and_adjust_attn_implementation: sdpa when the "
       "model and torch support it, unless attn_implementation says otherwise"},
      {"--optimizer", "adamw", "src/transformers/training_args.py TrainingArguments.optim: adamw_torch"},
      {"--optimizer-impl", "fused",
       "src/transformers/training_args.py: default_optim = adamw_torch_fused with torch >= 2.8", torch_adamw,
       "--optimizer adamw"},
      {"--outputs-to-fp32", "true",
       "accelerate src/accelerate/accelerator.py Accelerator.prepare_model (v1.14.0): with native_amp, model.forward = "
       "convert_outputs_to_fp32(autocast(forward)) (utils/operations.py convert_to_fp32: each float16/bfloat16 "
       "tensor returned as .float())",
       accelerate_converts_outputs,
       "--precision amp-bf16 or amp-fp16, no DeepSpeed or --shard fsdp2, --loss cross-entropy or mse"},
      {"--fsdp2-mp", "bf16:bf16", kAccelerateMixedPrecision, fsdp_amp_bf16,
       "--shard fsdp with --precision amp-bf16"},
      {"--fsdp2-mp", "fp16:fp16", kAccelerateMixedPrecision, fsdp_amp_fp16,
       "--shard fsdp with --precision amp-fp16"},
      {"--experts-implementation", "grouped_mm",
       "src/transformers/modeling_utils.py PreTrainedModel.get_correct_experts_implementation: grouped_mm when none "
       "is asked for (src/transformers/integrations/moe.py grouped_mm_experts_forward)",
       grouped_experts_modelled, "a config.json mixture of experts"},
      {"--fsdp-wrap", "accelerate",
       "accelerate utils/fsdp_utils.py fsdp2_prepare_model (v1.14.0): each decoder layer (the auto-wrap policy), the "
       "input embedding when untied, [final norm, output embedding] with reshard_after_forward=False, the root",
       fsdp2, "--shard fsdp2"},
      {"--fsdp-no-sync", "true",
       "src/transformers/trainer.py Trainer._inner_training_loop: each batch sample but the last under "
       "accelerator.no_sync (unless sync_each_batch), which is FullyShardedDataParallel.no_sync (accelerate "
       "accelerator.py Accelerator.no_sync)",
       fsdp_accumulating, "--shard fsdp with --grad-accum N"},
  };
}

std::vector<RecipeSetting> with(std::vector<RecipeSetting> base, const std::vector<RecipeSetting>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

std::string no_lora(const CommandArgs& a) {
  return a.estimate.lora_rank == 0 ? "--recipe " + a.estimate.recipe + " trains LoRA adapters: --lora-rank 0 leaves "
                                     "none (use --recipe hf-trainer for a full fine-tune)"
                                   : fsdp2_autocast(a);
}

std::string qlora_contradiction(const CommandArgs& a) {
  if (!kFrozenDtypeChoices.is(a.estimate.frozen_dtype, FrozenStorage::Nf4))
    return "--recipe hf-peft-qlora quantizes the base to NF4: --frozen-dtype " + a.estimate.frozen_dtype +
           " makes it another recipe (hf-peft with --frozen-dtype; a GPTQ base: --frozen-dtype gptq-int4 --checkpoint "
           "layers, all prepare_model_for_kbit_training does for GPTQ; AWQ: --frozen-dtype awq-int4 --kbit-prep "
           "--precision fp16)";
  if (!a.estimate.kbit_prep) return "--recipe hf-peft-qlora prepares the base with prepare_model_for_kbit_training";
  return no_lora(a);
}

}  // namespace

// What the Hugging Face recipes follow but do not model.
const char* const kHfNotModelled =
    "grouped_mm_experts_forward as rewritten after 0261a46 (src/transformers/integrations/moe.py at 8b584a6: the "
    "rows summed by a view over the k slots in place of zeros_like + index_add_; memplan builds 0261a46's form)";

bool multi_gpu(const CommandArgs& a) { return a.estimate.gpus > 1; }
bool lora_adapters(const CommandArgs& a) { return a.estimate.lora_rank > 0; }
bool torch_adamw(const CommandArgs& a) { return kOptimizerChoices.is(a.estimate.optimizer, Optimizer::AdamW); }
bool checkpointed(const CommandArgs& a) {
  return checkpoint_given(a.estimate.checkpoint) && !selective_checkpoint(a.estimate.checkpoint);
}

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> all = {
      {"hf-trainer", "transformers Trainer (main, torch >= 2.8)",
       "A full fine-tune with the Hugging Face Trainer: the model in the type it is stored in (transformers 5's "
       "dtype=\"auto\"), its float32 islands, the logits freed before backward, SDPA attention, fused AdamW; with "
       "--precision amp-* (the Trainer's bf16=True/fp16=True), autocast over the parameters in that stored type, "
       "their grads and AdamW's states in it too (no float32 master copy), and accelerate's float32 copy of the "
       "logits; under --shard fsdp with --precision amp-*, accelerate's mixed precision (a policy in autocast's type "
       "under torch.autocast, the shards that train float32; under fsdp2, which accelerate runs without autocast, "
       "--precision fp32 --fsdp2-mp bf16:bf16). Batch and checkpointing (gradient_checkpointing=True: "
       "--checkpoint layers) stay yours.",
       with({kStoredPrecision, kStoredParamDtype}, with(hf_trainer_settings(), {kFrozenAsLoaded})),
       fsdp2_autocast, kHfNotModelled,
       {"sgd", "momentum", "adamw", "adamw8bit", "paged-adamw", "paged-adamw8bit"},
       kTrainerOptimizers},
      {"hf-peft", "transformers Trainer + PEFT LoRA (main)",
       "hf-trainer with a PEFT LoRA model: LoraConfig's defaults, float32 adapters on the base's layers (PEFT casts "
       "each adapted layer's input to the adapter's type); under --shard fsdp/fsdp2 with accelerate's policy the frozen base "
       "stays in the checkpoint's type beside the float32 adapters.",
       with(with({kStoredPrecision, kStoredParamDtype}, hf_trainer_settings()),
            {{"--lora-rank", "8", "peft src/peft/tuners/lora/config.py LoraConfig.r (default 8)"},
             {"--lora-targets", "q_proj|v_proj",
              "peft src/peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (llama: q_proj, "
              "v_proj)"},
             peft_fsdp_wrap(), kFrozenAsLoaded}),
       no_lora, kHfNotModelled, {"sgd", "momentum", "adamw", "adamw8bit", "paged-adamw", "paged-adamw8bit"},
       kTrainerOptimizers},
      {"hf-peft-qlora", "transformers Trainer + PEFT LoRA + bitsandbytes 4-bit (main)",
       "hf-peft over a base loaded with BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\") and "
       "prepared by peft.prepare_model_for_kbit_training: the base NF4 but its head, every other parameter and "
       "activation float32, the 4-bit layers computing in --precision (bnb_4bit_compute_dtype), each decoder layer "
       "checkpointed.",
       with(with(hf_trainer_settings(), {{"--lora-rank", "8", "peft src/peft/tuners/lora/config.py LoraConfig.r (default 8)"},
                                        {"--lora-targets", "q_proj|v_proj",
                                         "peft src/peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_"
                                         "MAPPING (llama: q_proj, v_proj)"}}),
            {{"--frozen-dtype", "nf4",
              "transformers BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\"): every nn.Linear but "
              "the output embedding becomes bitsandbytes' Linear4bit (integrations/bitsandbytes.py)"},
             {"--kbit-prep", "true",
              "peft src/peft/utils/other.py prepare_model_for_kbit_training: fp16/bf16 parameters cast to float32"},
             {"--checkpoint", "layers",
              "prepare_model_for_kbit_training(use_gradient_checkpointing=True), its default: "
              "model.gradient_checkpointing_enable(), one checkpoint per decoder layer"},
             peft_fsdp_wrap()}),
       qlora_contradiction, kHfNotModelled, {"sgd", "momentum", "adamw", "adamw8bit", "paged-adamw", "paged-adamw8bit"},
       kTrainerOptimizers},
      torchtune_recipe(),
      litgpt_recipe(),
      torchtitan_recipe(),
  };
  return all;
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const Recipe& r : recipes()) names.push_back(r.name);
  return names;
}

void apply_recipe(CommandArgs& args, Command command, std::vector<const OptionSpec*>& given) {
  const std::string& name = args.estimate.recipe;
  if (name.empty()) return;
  const auto& all = recipes();
  const auto recipe = std::find_if(all.begin(), all.end(), [&](const Recipe& r) { return r.name == name; });
  if (recipe == all.end()) return;  // not a choice: validate_options names the choices
  for (const RecipeSetting& s : recipe->settings) {
    const OptionSpec* row = nullptr;
    for (const OptionSpec& r : option_schema())
      if (r.applies_to(command) && r.message_name() == s.flag) row = &r;
    if (!row) throw InternalError("recipe " + name + " sets " + s.flag + ", which is no option of this command");
    if (std::find(given.begin(), given.end(), row) != given.end()) continue;  // the user's value wins
    if (s.applies && !s.applies(args)) continue;
    set_field_text(*row, args, s.value);
    given.push_back(row);
  }
  const auto& offered = recipe->optimizers;
  if (!offered.empty() && std::find(offered.begin(), offered.end(), args.estimate.optimizer) == offered.end())
    throw InputError("--recipe " + name + " --optimizer " + args.estimate.optimizer + ": not an optimizer the " +
                     "framework offers (" + recipe->optimizers_source + ")");
  if (recipe->contradiction) {  // after the recipe's values: only a flag the user gave can contradict it
    const std::string why = recipe->contradiction(args);
    if (!why.empty()) throw InputError(why);
  }
}

std::string recipes_markdown() {
  std::string md =
      "# Recipes\n\n`--recipe NAME` fills the options a framework decides, each with the source it follows; a flag "
      "you give overrides the recipe's value. Produced by `memplan recipes > docs/recipes.md`.\n";
  for (const Recipe& r : recipes()) {
    md += "\n## " + r.name + "\n\nFollows " + r.follows + ". " + r.summary +
          "\n\n| option | value | when | source |\n|---|---|---|---|\n";
    for (const RecipeSetting& s : r.settings)
      md += "| `" + s.flag + "` | `" + markdown_cell(s.value) + "` | " +
            (s.when.empty() ? "always" : markdown_cell(s.when)) + " | " + s.source + " |\n";
    if (!r.optimizers.empty()) {
      md += "\nOptimizers: ";
      for (size_t i = 0; i < r.optimizers.size(); ++i) md += (i ? ", `" : "`") + r.optimizers[i] + "`";
      md += " (" + r.optimizers_source + ").\n";
    }
    if (!r.not_modelled.empty()) md += "\nNot modelled yet: " + r.not_modelled + "\n";
  }
  return md;
}

}  // namespace memplan
