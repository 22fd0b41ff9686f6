// --recipe torchtune: how torchtune v0.6.1 runs its four fine-tuning recipes (recipes/lora_finetune_single_device.py,
// lora_finetune_distributed.py, full_finetune_single_device.py, full_finetune_distributed.py) with the configs its
// registry lists for them (torchtune/_recipe_registry.py: 41, 36, 17 and 27 configs). A setting names the config key
// it follows and how many of those configs hold the value where they differ. --lora-rank chooses the LoRA recipes
// (the configs choose them by the model builder, lora_* or qlora_*, whose lora_rank differs: 8 to 64); --gpus N > 1
// the distributed ones.
#include "onnx_import/errors.h"
#include "report/option_choices.h"
#include "report/recipes.h"

namespace memplan {
namespace {

bool bf16(const CommandArgs& a) { return kPrecisionChoices.is(a.estimate.precision, Precision::Bf16); }
bool full_single_device(const CommandArgs& a) { return !lora_adapters(a) && !multi_gpu(a); }
// optimizer_in_bwd needs gradient_accumulation_steps 1 (full_finetune_single_device.py __init__ raises otherwise).
bool full_single_device_no_accumulation(const CommandArgs& a) {
  return full_single_device(a) && a.estimate.grad_accum == 1;
}
bool lora_half(const CommandArgs& a) { return lora_adapters(a) && bf16(a); }
bool nf4(const CommandArgs& a) { return kFrozenDtypeChoices.is(a.estimate.frozen_dtype, FrozenStorage::Nf4); }

std::string torchtune_contradiction(const CommandArgs& args) {
  const EstimateArgs& a = args.estimate;
  const std::string tt = "--recipe torchtune";
  if (!kPrecisionChoices.is(a.precision, Precision::Bf16) && !kPrecisionChoices.is(a.precision, Precision::Fp32))
    return tt + " trains in its config's dtype, bf16 or fp32, without autocast (training.get_dtype; the recipes' "
                "__init__ refuse fp16): --precision " + a.precision + " is not one of its choices";
  if (multi_gpu(args) && !kShardChoices.is(a.shard, Sharding::Fsdp2) && !kShardChoices.is(a.shard, Sharding::Fsdp))
    return tt + " --gpus " + std::to_string(a.gpus) + " runs its distributed recipes, which shard with FSDP2 "
                "(training.shard_model): --shard " + a.shard + " is not one of its choices";
  if (a.loss.rfind("chunked-ce:", 0) != 0)  // kLossChoices' chunked-ce:N, any N
    return tt + " computes CEWithChunkedOutputLoss (every v0.6.1 config): --loss " + a.loss + " is not modelled "
                "for it (without chunks its model returns float32 logits, TransformerDecoder.unembed)";
  if (a.kbit_prep)
    return tt + " keeps every unquantized parameter in its dtype: --kbit-prep is PEFT's prepare_model_for_kbit_training";
  if (!kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Same) && !nf4(args))
    return tt + " stores a frozen base in its dtype, or as NF4 in its qlora_* models: --frozen-dtype " +
           a.frozen_dtype + " is not one of its choices";
  if (lora_adapters(args) && bf16(args) && kLoraDtypeChoices.is(a.lora_dtype, true))
    return tt + " builds the adapters in the model's dtype and checks it (training.validate_expected_param_dtype): "
                "--lora-dtype " + a.lora_dtype + " is not one of its choices";
  if (lora_adapters(args) && a.optimizer_in_backward)
    return tt + " --lora-rank: its LoRA recipes have no optimizer_in_bwd, which --optimizer-in-backward models";
  return "";
}

std::vector<RecipeSetting> torchtune_settings() {
  return {
      {"--precision", "bf16",
       "configs' dtype: bf16 (all 121); the recipes' __init__ self._dtype = training.get_dtype(cfg.dtype) and "
       "_setup_model's `with training.set_default_dtype(self._dtype)`: the model built in bf16, no autocast "
       "(torchtune/training/precision.py)"},
      {"--upcast", "rmsnorm",
       "torchtune/modules/rms_norm.py RMSNorm.forward: F.rms_norm(x.float(), ...).to(x.dtype)", bf16, "--precision bf16"},
      {"--attention", "sdpa",
       "torchtune/modules/attention.py MultiHeadAttention.forward calls _sdpa_or_flex_attention() "
       "(torchtune/modules/attention_utils.py): F.scaled_dot_product_attention, flex attention only for a packed "
       "dataset's BlockMask (configs' dataset packed: False, 120 of 121)"},
      {"--loss", "chunked-ce:8",
       "configs' loss: torchtune.modules.loss.CEWithChunkedOutputLoss (all 121), num_output_chunks 8 (its default, "
       "ce_chunked_output_loss.py); setup() calls self._model.set_num_output_chunks(8), so TransformerDecoder.unembed "
       "applies the head per chunk (chunked_output) and compute_cross_entropy upcasts one chunk at a time"},
      {"--free-output", "true",
       "lora_finetune_single_device.py / full_finetune_single_device.py _loss_step and the distributed recipes' "
       "train(): `del logits` after the loss, before backward"},
      {"--checkpoint", "layers",
       "configs' enable_activation_checkpointing: True (96 of 121; False: --checkpoint none) -> "
       "training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer}) "
       "(torchtune/training/memory.py): each decoder layer one checkpoint"},
      {"--checkpoint-impl", "non-reentrant",
       "set_activation_checkpointing calls torch's apply_activation_checkpointing with its default checkpoint_wrapper, "
       "whose checkpoint_impl defaults to CheckpointImpl.NO_REENTRANT in torch 2 "
       "(torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py): use_reentrant=False",
       checkpointed, "--checkpoint other than none"},
      {"--optimizer", "paged-adamw",
       "full_finetune_single_device configs' optimizer: bitsandbytes.optim.PagedAdamW (10 of 17; the Llama 3 "
       "family's PagedAdamW8bit, 5: --optimizer paged-adamw8bit)",
       full_single_device, "full fine-tune, one GPU"},
      {"--optimizer", "adamw",
       "LoRA and full_finetune_distributed configs' optimizer: torch.optim.AdamW (all 104)",
       [](const CommandArgs& a) { return !full_single_device(a); }, "--lora-rank R, or --gpus N > 1"},
      {"--optimizer-impl", "fused", "configs' optimizer fused: True (every AdamW config but 3)", torch_adamw,
       "--optimizer adamw"},
      {"--optimizer-in-backward", "true",
       "full_finetune_single_device configs' optimizer_in_bwd: True (14 of 17, all with gradient_accumulation_steps "
       "1): an optimizer per parameter, stepped and zeroed in its post-accumulate-grad hook "
       "(training.register_optim_in_bwd_hooks, torchtune/training/memory.py)",
       full_single_device_no_accumulation, "full fine-tune, one GPU, --grad-accum 1"},
      {"--shard", "fsdp2",
       "lora/full_finetune_distributed.py _setup_model: training.shard_model (torchtune/training/_distributed.py) "
       "calls fully_shard (reshard_after_forward=True, no mp_policy) on each layers.N module (get_shard_conditions) "
       "and then the root: memplan's default units",
       multi_gpu, "--gpus N > 1"},
      {"--lora-targets", "q_proj|v_proj|o_proj|gate_proj|up_proj|down_proj",
       "LoRA configs' lora_attn_modules: [q_proj, v_proj, output_proj] and apply_lora_to_mlp: True (all 77), "
       "apply_lora_to_output: False; as Hugging Face names the layers (torchtune/models/convert_weights.py "
       "_FROM_HF: o_proj is output_proj, gate_proj w1, down_proj w2, up_proj w3)",
       lora_adapters, "--lora-rank R"},
      {"--lora-dtype", "base",
       "lora_finetune_*.py _setup_model: the LoRALinear adapters built under training.set_default_dtype(dtype), "
       "then training.validate_expected_param_dtype(adapter_params, dtype)",
       lora_half, "--lora-rank R, --precision bf16"},
      {"--nf4-impl", "torchao",
       "qlora_* builders (torchtune/modules/peft/lora.py LoRALinear(quantize_base=True), "
       "modules/low_precision/nf4_linear.py FrozenNF4Linear): torchao's to_nf4 NF4Tensor (an int8 scaler per 64 values, "
       "a factor per 256 scalers) run by linear_nf4, on one GPU as under fully_shard",
       nf4, "--frozen-dtype nf4"},
  };
}

}  // namespace

Recipe torchtune_recipe() {
  return {"torchtune", "torchtune v0.6.1 (pytorch/torchtune tag v0.6.1, its recipes and their registered configs)",
          "torchtune's full fine-tune recipes, or with --lora-rank R its LoRA recipes (a qlora_* model: add "
          "--frozen-dtype nf4); with --gpus N > 1 the distributed ones. The model in bf16 with RMSNorm in float32, "
          "SDPA, the head and the loss in 8 chunks whose logits are dropped before backward, each decoder layer "
          "checkpointed; fused AdamW, or on one GPU for a full fine-tune bitsandbytes' PagedAdamW stepped in "
          "backward; LoRA adapters in bf16 on q, v, the output projection and the MLP. Batch, sequence, rank and "
          "checkpointing stay yours.",
          torchtune_settings(),
          torchtune_contradiction,
          "the configs' enable_activation_offloading (True in 5 of 121); "
          "custom_sharded_layers "
          "(the Llama 3 full_finetune_distributed configs' tok_embeddings and output as units of their own: "
          "--fsdp-wrap '^(.*?\\.[0-9]+\\.|model\\.embed_tokens|lm_head)'); RoPE's float32 copies of q and k "
          "(Llama3ScaledRoPE.forward x.float(), transient) and its cache buffer; in a full fine-tune, RMSNorm keeps "
          "its float32 normalized input for the scale's grad where memplan keeps it in bf16; compile: True (1 config); DoRA",
          {"sgd", "momentum", "adam", "adamw", "adamw8bit", "paged-adamw", "paged-adamw8bit"},
          "config.instantiate(cfg.optimizer, ...): any optimizer class the config's _component_ names, torch.optim "
          "or bitsandbytes.optim"};
}

}  // namespace memplan
