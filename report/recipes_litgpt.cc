// --recipe litgpt: how litgpt v0.5.13 (Lightning-AI/litgpt tag v0.5.13) runs its LoRA fine-tune, litgpt/finetune/
// lora.py (`litgpt finetune_lora`), with setup()'s defaults and the 32 LoRA configs of config_hub/finetune
// (*/lora.yaml and */qlora.yaml: 16 each), and with --lora-rank 0 its full fine-tune, litgpt/finetune/full.py
// (`litgpt finetune_full`) and the 10 */full.yaml configs. A setting names the function or key it follows, and how
// many configs hold the value where they differ. --frozen-dtype nf4 is the LoRA configs' quantize: bnb.nf4 (the
// qlora.yaml ones); --gpus N > 1 lora.py's ModelParallelStrategy, or full.py's FSDPStrategy.
#include "report/option_choices.h"
#include "report/recipes.h"

namespace memplan {
namespace {

bool half(const CommandArgs& a) {
  return kPrecisionChoices.is(a.estimate.precision, Precision::Bf16) ||
         kPrecisionChoices.is(a.estimate.precision, Precision::Fp16);
}
bool amp(const CommandArgs& a) { return amp_precision(a.estimate.precision); }
// --lora-rank 0 (after the recipe's --lora-rank 8, which only a given --lora-rank overrides): finetune/full.py.
bool full(const CommandArgs& a) { return a.estimate.lora_rank == 0; }
bool lora_multi_gpu(const CommandArgs& a) { return lora_adapters(a) && multi_gpu(a); }
bool full_multi_gpu(const CommandArgs& a) { return full(a) && multi_gpu(a); }
bool multi_gpu_checkpointed(const CommandArgs& a) { return multi_gpu(a) && checkpointed(a); }
// --quantize bnb.nf4 / bnb.nf4-dq (with --double-quant) / bnb.int8-training: BitsandbytesPrecision.
bool quantized(const CommandArgs& a) {
  return kFrozenDtypeChoices.is(a.estimate.frozen_dtype, FrozenStorage::Nf4) ||
         kFrozenDtypeChoices.is(a.estimate.frozen_dtype, FrozenStorage::Int8);
}

// finetune/full.py (--lora-rank 0): setup() has no quantize, main() trains every parameter, fit() calls the model
// without lm_head_chunk_size, and more than one device is FSDPStrategy (FSDP1).
std::string full_contradiction(const CommandArgs& args) {
  const EstimateArgs& a = args.estimate;
  const std::string lg = "--recipe litgpt --lora-rank 0 is finetune/full.py,";
  if (!row_chunked_loss(a.loss))
    return lg + " which computes litgpt.utils.chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:]) on the "
                "whole head's logits (fit(): model(input_ids), no lm_head_chunk_size) in chunks of 128 rows: --loss " +
           a.loss + " is not what it runs";
  if (!kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Same))
    return lg + " whose setup() has no quantize and trains every parameter: --frozen-dtype " + a.frozen_dtype +
           " is not one of its choices";
  if (!a.trainable.empty() || !a.frozen.empty())
    return lg + " which trains every parameter (instantiate_torch_optimizer(optimizer, model.parameters())): "
                "--trainable/--frozen is another recipe";
  if (multi_gpu(args) && !kShardChoices.is(a.shard, Sharding::Fsdp))
    return lg + " whose --gpus " + std::to_string(a.gpus) + " shards with FSDP1 (setup(): FSDPStrategy(auto_wrap_"
                "policy={Block}, ...)): --shard " + a.shard + " is not one of its choices";
  if (multi_gpu(args) && amp(args))
    return lg + " whose --gpus " + std::to_string(a.gpus) + " runs Lightning's FSDPPrecision, which under --precision " +
           a.precision + " builds the model in the half type (module_init_context: mixed_precision_config.param_dtype) "
           "and autocasts over those half flat parameters: not modelled (--param-dtype under FSDP)";
  return "";
}

std::string litgpt_contradiction(const CommandArgs& args) {
  const EstimateArgs& a = args.estimate;
  const std::string lg = "--recipe litgpt";
  if (a.free_output)
    return lg + " keeps the logits through backward (fit() holds `logits` until the next step): --free-output drops them";
  if (a.kbit_prep)
    return lg + " keeps every unquantized parameter in the precision's dtype: --kbit-prep is PEFT's "
                "prepare_model_for_kbit_training";
  if (a.optimizer_in_backward) return lg + ": fit() steps the optimizer after backward, --optimizer-in-backward is not its";
  if (full(args)) return full_contradiction(args);
  if (!token_chunked_loss(a.loss))
    return lg + " computes litgpt.utils.chunked_cross_entropy on the head's chunks (fit(): model(input_ids, "
                "lm_head_chunk_size=128)): --loss " + a.loss + " is not what it runs";
  if (!kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Same) && !quantized(args))
    return lg + " stores a frozen base in the precision's dtype, or quantized by bitsandbytes (--quantize bnb.nf4, "
                "bnb.int8-training): --frozen-dtype " + a.frozen_dtype + " is not one of its choices";
  if (quantized(args) && amp(args))
    return lg + " --frozen-dtype " + a.frozen_dtype + " is --quantize bnb.*, which setup() refuses with mixed "
                "precision (\"Quantization and mixed precision is not supported.\"): --precision " + a.precision;
  if (quantized(args) && multi_gpu(args))
    return lg + " --frozen-dtype " + a.frozen_dtype + " is --quantize bnb.*, which setup() refuses on more than one "
                "device (NotImplementedError): --gpus " + std::to_string(a.gpus);
  if (quantized(args) && !kOptimizerChoices.is(a.optimizer, Optimizer::PagedAdamW))
    return lg + " --frozen-dtype " + a.frozen_dtype + " is --quantize bnb.*, whose optimizer is bitsandbytes' "
                "PagedAdamW whatever AdamW is named (utils.py instantiate_bnb_optimizer): --optimizer " + a.optimizer;
  if (multi_gpu(args) && !kShardChoices.is(a.shard, Sharding::Fsdp))
    return lg + " --gpus " + std::to_string(a.gpus) + " shards with FSDP2 (ModelParallelStrategy, parallelize_fn's "
                "fully_shard): --shard " + a.shard + " is not one of its choices";
  if (half(args) && kLoraDtypeChoices.is(a.lora_dtype, true))
    return lg + " builds the adapters in the model's dtype (fabric.init_module under --precision " + a.precision +
           "): --lora-dtype " + a.lora_dtype + " is not one of its choices";
  return "";
}

std::vector<RecipeSetting> litgpt_settings() {
  return {
      {"--precision", "bf16",
       "config_hub/finetune configs' precision: bf16-true (all 42): Fabric builds the model in bf16 "
       "(fabric.init_module) and runs it without autocast (setup()'s own default, get_default_supported_precision"
       "(training=True), is bf16-mixed: --precision amp-bf16)"},
      {"--upcast", "rmsnorm",
       "litgpt/model.py RMSNorm.forward: x = x.float(), normalized, then (x_normed * weight.float()).to(dtype)", half,
       "--precision bf16/fp16"},
      {"--attention", "sdpa",
       "litgpt/model.py CausalSelfAttention.scaled_dot_product_attention: F.scaled_dot_product_attention unless "
       "the config has attention_logit_softcapping (Gemma 2)"},
      {"--lora-rank", "8",
       "finetune/lora.py setup() lora_r: 8 (the configs: 32 in 20, 16 in 6, 8 in 6); --lora-rank 0 is finetune/full.py"},
      {"--loss", "chunked-ce-tokens:128",
       "finetune/lora.py fit(): model(input_ids, lm_head_chunk_size=128) (GPT.forward: the head applied to each "
       "x.split(128, dim=1)), logits[-1] = logits[-1][..., :-1, :], litgpt/utils.py chunked_cross_entropy: "
       "F.cross_entropy per chunk in the logits' dtype, no .float(); fit() keeps `logits` through backward (no "
       "--free-output)",
       lora_adapters, "--lora-rank R > 0"},
      {"--loss", "chunked-ce-rows:128",
       "finetune/full.py fit(): model(input_ids) (no lm_head_chunk_size: the whole logits), then "
       "chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:]) with its default chunk_size=128: litgpt/utils.py's "
       "\"lm_head wasn't chunked\" branch, logits.reshape(-1, V).split(128) (a copy at batch > 1), F.cross_entropy per "
       "chunk of 128 rows in the logits' dtype; fit() keeps `logits` through backward (no --free-output)",
       full, "--lora-rank 0"},
      {"--outputs-to-default-dtype", "true",
       "lightning/fabric/wrappers.py _FabricModule.forward (Lightning 2.6.1, which litgpt v0.5.13 requires at least): "
       "output = precision.convert_output(output), in HalfPrecision, MixedPrecision, BitsandbytesPrecision and "
       "FSDPPrecision each floating tensor .to(torch.get_default_dtype()) (plugins/precision/utils.py "
       "_convert_fp_tensor): fit()'s `logits` are float32 copies of the head's half output (lora.py's chunks, "
       "full.py's whole logits), which chunked_cross_entropy reads (32-true's Precision returns them as they are)",
       [](const CommandArgs& a) { return half(a) || amp(a); }, "--precision bf16/fp16/amp-bf16/amp-fp16"},
      {"--lora-targets", "q_proj|v_proj",
       "setup() lora_query and lora_value True, lora_key, lora_projection, lora_mlp, lora_head False (as the 18 "
       "Llama 2 and 3, Mistral, Falcon and StableLM configs; the other 14 adapt every layer); litgpt adapts its fused "
       "transformer.h.N.attn.qkv (litgpt/lora.py LoRAQKVLinear, enable_lora [q, k, v] = [True, False, True]), "
       "which memplan's Hugging Face-named graphs hold as q_proj and v_proj",
       lora_adapters, "--lora-rank R > 0"},
      {"--lora-dropout", "0.05",
       "setup() lora_dropout: 0.05 (24 of the 32 configs; 0.1 in 8): litgpt/lora.py LoRALayer's nn.Dropout", lora_adapters,
       "--lora-rank R > 0"},
      {"--lora-dtype", "base",
       "finetune/lora.py main(): GPT(config) under fabric.init_module(), so LoRALinear's lora_A and lora_B "
       "(torch.empty) are made in the precision's dtype",
       [](const CommandArgs& a) { return half(a) && lora_adapters(a); }, "--lora-rank R > 0, --precision bf16/fp16"},
      {"--optimizer", "adamw",
       "setup() optimizer: \"AdamW\" (all 32 LoRA configs; the 10 full.yaml: class_path torch.optim.AdamW): utils.py "
       "instantiate_torch_optimizer -> torch.optim.AdamW "
       "with its defaults (foreach on CUDA: memplan's --torch 2 default)",
       [](const CommandArgs& a) { return !quantized(a); }, "no --frozen-dtype"},
      {"--optimizer", "paged-adamw",
       "main(): with BitsandbytesPrecision, utils.py instantiate_bnb_optimizer -> bitsandbytes.optim.PagedAdamW",
       quantized, "--frozen-dtype nf4/int8"},
      {"--shard", "fsdp",
       "finetune/lora.py setup(): devices > 1 -> ModelParallelStrategy(parallelize_fn, data_parallel_size=devices * "
       "num_nodes): parallelize_fn's fully_shard on each checkpointed Block and then the root: memplan's default units",
       lora_multi_gpu, "--lora-rank R > 0, --gpus N > 1"},
      {"--shard", "fsdp",
       "finetune/full.py setup(): devices * num_nodes > 1 -> FSDPStrategy(auto_wrap_policy={Block}, "
       "activation_checkpointing_policy={Block}, limit_all_gathers=True, cpu_offload=False): Lightning 2.6.1's "
       "FullyShardedDataParallel (FSDP1) with sharding_strategy FULL_SHARD and use_orig_params=True, a unit per Block "
       "and the root (memplan's default units); under bf16-true FSDPPrecision's MixedPrecision is bf16 throughout, "
       "over parameters already bf16 (plugins/precision/fsdp.py mixed_precision_config): no cast",
       full_multi_gpu, "--lora-rank 0, --gpus N > 1"},
      {"--checkpoint", "layers",
       "finetune/lora.py parallelize_fn(activation_checkpointing=True): checkpoint_wrapper around each Block of "
       "model.transformer.h (one GPU: no checkpointing)",
       lora_multi_gpu, "--lora-rank R > 0, --gpus N > 1"},
      {"--checkpoint", "layers",
       "finetune/full.py FSDPStrategy(activation_checkpointing_policy={Block}): Lightning's "
       "_setup_activation_checkpointing, checkpoint_wrapper(checkpoint_impl=CheckpointImpl.NO_REENTRANT) around each "
       "Block (one GPU: no checkpointing)",
       full_multi_gpu, "--lora-rank 0, --gpus N > 1"},
      {"--checkpoint-impl", "non-reentrant",
       "both checkpoint_wrappers are non-reentrant: finetune/lora.py's is torch's checkpoint_wrapper, whose "
       "checkpoint_impl defaults to CheckpointImpl.NO_REENTRANT in torch 2 "
       "(torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py); Lightning's passes NO_REENTRANT",
       multi_gpu_checkpointed, "--gpus N > 1, --checkpoint other than none"},
      {"--fsdp-wrap", kLoraUnitsWrap,
       "FSDP2 shards each parameter on its own (fully_shard), so a frozen base weight gets no grad though its Block "
       "holds adapters; memplan's FSDP1 units would give the frozen weights of a unit that trains grads "
       "(use_orig_params), so each adapter weight is a unit of its own, beside its layer's frozen unit",
       lora_multi_gpu, "--lora-rank R > 0, --gpus N > 1"},
  };
}

}  // namespace

Recipe litgpt_recipe() {
  return {"litgpt",
          "litgpt v0.5.13 (Lightning-AI/litgpt tag v0.5.13, finetune/lora.py, finetune/full.py and config_hub/finetune)",
          "litgpt's LoRA fine-tune (finetune/lora.py, its setup() defaults); with --frozen-dtype nf4 its QLoRA "
          "(--quantize bnb.nf4; bnb.nf4-dq: add --double-quant), with --gpus N > 1 its FSDP2 run. The model in bf16 "
          "(bf16-true) with RMSNorm in float32, SDPA, the head in chunks of 128 positions in bf16, which Fabric "
          "returns as float32 copies (convert_output) that the loss reads and fit() keeps through backward, LoRA r 8 "
          "on q and v in bf16 with dropout 0.05, AdamW (bitsandbytes' "
          "PagedAdamW when quantized). With --lora-rank 0 its full fine-tune (finetune/full.py): every parameter "
          "trains, the head whole, Fabric's float32 copy of the whole logits, which fit() keeps through backward, "
          "and the loss on the shifted logits in chunks of 128 rows (a float32 copy of them at batch > 1); with --gpus "
          "N > 1 FSDP1 (FSDPStrategy), each Block a unit and checkpointed. Batch (micro_batch_size 1), sequence, rank "
          "and targets stay yours.",
          litgpt_settings(),
          litgpt_contradiction,
          "litgpt's fused qkv adapter (LoRAQKVLinear: one lora_A [2r, C] and one lora_B [q + v, r] a layer, applied "
          "by a grouped conv1d and zero-padded to the whole qkv width, zero_pad, before the add; memplan adapts "
          "q_proj and v_proj apart: the same parameter bytes, but each adapter drops and keeps its own copy of the "
          "input where litgpt drops it once for both, and no padded [B, T, q + k + v] tensor); RMSNorm's product "
          "with weight.float() in float32 (a full fine-tune's float32 normalized input, where memplan keeps it in "
          "bf16); with --quantize bnb.*, BitsandbytesPrecision converts every nn.Linear, lm_head included (memplan "
          "keeps the head as stored), and main() swaps wte for bitsandbytes' StableEmbedding, a fresh weight that "
          "requires grad outside the optimizer, with a LayerNorm; FSDP2's per-parameter shards as FSDP1's flat "
          "parameters over the same units; validate() (no_grad, chunk_size=0: the whole loss on the float32 copy, "
          "before fit's first step and every eval.interval steps; at the same batch and sequence it holds the copy, "
          "the shifted rows and their log_softmax, no more than the training step's loss backward, which holds the "
          "copy, the chunk grads and their concatenation beside the saved activations) and generate_example's KV "
          "cache; the ignore mask (targets != -100) and its count, made after the chunks' losses, are counted "
          "before them (a few bytes a token, in the forward)",
          {"sgd", "momentum", "adam", "adamw", "adamw8bit", "paged-adamw", "paged-adamw8bit"},
          "setup() optimizer: a torch.optim class name or any class_path (utils.py instantiate_torch_optimizer); "
          "quantized, bitsandbytes' PagedAdamW only (instantiate_bnb_optimizer)"};
}

}  // namespace memplan
