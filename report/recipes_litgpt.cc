// --recipe litgpt: how litgpt v0.5.13 (Lightning-AI/litgpt tag v0.5.13) runs its LoRA fine-tune, litgpt/finetune/
// lora.py (`litgpt finetune_lora`), with setup()'s defaults and the 32 LoRA configs of config_hub/finetune
// (*/lora.yaml and */qlora.yaml: 16 each). A setting names the function or key it follows, and how many configs hold
// the value where they differ. --frozen-dtype nf4 is the configs' quantize: bnb.nf4 (the qlora.yaml ones); --gpus
// N > 1 lora.py's ModelParallelStrategy.
#include "report/option_choices.h"
#include "report/recipes.h"

namespace memplan {
namespace {

bool half(const CommandArgs& a) {
  return kPrecisionChoices.is(a.estimate.precision, Precision::Bf16) ||
         kPrecisionChoices.is(a.estimate.precision, Precision::Fp16);
}
bool amp(const CommandArgs& a) { return amp_precision(a.estimate.precision); }
// --quantize bnb.nf4 / bnb.nf4-dq (with --double-quant) / bnb.int8-training: BitsandbytesPrecision.
bool quantized(const CommandArgs& a) {
  return kFrozenDtypeChoices.is(a.estimate.frozen_dtype, FrozenStorage::Nf4) ||
         kFrozenDtypeChoices.is(a.estimate.frozen_dtype, FrozenStorage::Int8);
}

std::string litgpt_contradiction(const CommandArgs& args) {
  const EstimateArgs& a = args.estimate;
  const std::string lg = "--recipe litgpt";
  if (a.lora_rank == 0)
    return lg + " is finetune/lora.py: --lora-rank 0 leaves no adapters (finetune/full.py's loss, on an unchunked "
                "head, is not modelled)";
  if (!token_chunked_loss(a.loss))
    return lg + " computes litgpt.utils.chunked_cross_entropy on the head's chunks (fit(): model(input_ids, "
                "lm_head_chunk_size=128)): --loss " + a.loss + " is not what it runs";
  if (a.free_output)
    return lg + " keeps the logits through backward (fit() holds `logits` until the next step): --free-output drops them";
  if (a.kbit_prep)
    return lg + " keeps every unquantized parameter in the precision's dtype: --kbit-prep is PEFT's "
                "prepare_model_for_kbit_training";
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
  if (a.optimizer_in_backward) return lg + ": fit() steps the optimizer after backward, --optimizer-in-backward is not its";
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
      {"--loss", "chunked-ce-tokens:128",
       "finetune/lora.py fit(): model(input_ids, lm_head_chunk_size=128) (GPT.forward: the head applied to each "
       "x.split(128, dim=1)), logits[-1] = logits[-1][..., :-1, :], litgpt/utils.py chunked_cross_entropy: "
       "F.cross_entropy per chunk in the logits' dtype, no .float(); fit() keeps `logits` through backward (no "
       "--free-output)"},
      {"--outputs-to-default-dtype", "true",
       "lightning/fabric/wrappers.py _FabricModule.forward (Lightning 2.6.1, which litgpt v0.5.13 requires at least): "
       "output = precision.convert_output(output), in HalfPrecision, MixedPrecision and BitsandbytesPrecision each "
       "floating tensor .to(torch.get_default_dtype()) (plugins/precision/utils.py _convert_fp_tensor): fit()'s "
       "`logits` are float32 copies of the head's half chunks, which chunked_cross_entropy reads (32-true's Precision "
       "returns them as they are)",
       [](const CommandArgs& a) { return half(a) || amp(a); }, "--precision bf16/fp16/amp-bf16/amp-fp16"},
      {"--lora-rank", "8",
       "finetune/lora.py setup() lora_r: 8 (the configs: 32 in 20, 16 in 6, 8 in 6)"},
      {"--lora-targets", "q_proj|v_proj",
       "setup() lora_query and lora_value True, lora_key, lora_projection, lora_mlp, lora_head False (as the 18 "
       "Llama 2 and 3, Mistral, Falcon and StableLM configs; the other 14 adapt every layer); litgpt adapts its fused "
       "transformer.h.N.attn.qkv (litgpt/lora.py LoRAQKVLinear, enable_lora [q, k, v] = [True, False, True]), "
       "which memplan's Hugging Face-named graphs hold as q_proj and v_proj"},
      {"--lora-dropout", "0.05",
       "setup() lora_dropout: 0.05 (24 of the 32 configs; 0.1 in 8): litgpt/lora.py LoRALayer's nn.Dropout"},
      {"--lora-dtype", "base",
       "finetune/lora.py main(): GPT(config) under fabric.init_module(), so LoRALinear's lora_A and lora_B "
       "(torch.empty) are made in the precision's dtype",
       half, "--precision bf16/fp16"},
      {"--optimizer", "adamw",
       "setup() optimizer: \"AdamW\" (all 32 configs): utils.py instantiate_torch_optimizer -> torch.optim.AdamW "
       "with its defaults (foreach on CUDA: memplan's --torch 2 default)",
       [](const CommandArgs& a) { return !quantized(a); }, "no --frozen-dtype"},
      {"--optimizer", "paged-adamw",
       "main(): with BitsandbytesPrecision, utils.py instantiate_bnb_optimizer -> bitsandbytes.optim.PagedAdamW",
       quantized, "--frozen-dtype nf4/int8"},
      {"--shard", "fsdp",
       "setup(): devices > 1 -> ModelParallelStrategy(parallelize_fn, data_parallel_size=devices * num_nodes): "
       "parallelize_fn's fully_shard on each checkpointed Block and then the root: memplan's default units",
       multi_gpu, "--gpus N > 1"},
      {"--checkpoint", "layers",
       "finetune/lora.py parallelize_fn(activation_checkpointing=True): checkpoint_wrapper around each Block of "
       "model.transformer.h (one GPU: no checkpointing)",
       multi_gpu, "--gpus N > 1"},
      {"--fsdp-wrap", kLoraUnitsWrap,
       "FSDP2 shards each parameter on its own (fully_shard), so a frozen base weight gets no grad though its Block "
       "holds adapters; memplan's FSDP1 units would give the frozen weights of a unit that trains grads "
       "(use_orig_params), so each adapter weight is a unit of its own, beside its layer's frozen unit",
       multi_gpu, "--gpus N > 1"},
  };
}

}  // namespace

Recipe litgpt_recipe() {
  return {"litgpt", "litgpt v0.5.13 (Lightning-AI/litgpt tag v0.5.13, finetune/lora.py and config_hub/finetune)",
          "litgpt's LoRA fine-tune (finetune/lora.py, its setup() defaults); with --frozen-dtype nf4 its QLoRA "
          "(--quantize bnb.nf4; bnb.nf4-dq: add --double-quant), with --gpus N > 1 its FSDP2 run. The model in bf16 "
          "(bf16-true) with RMSNorm in float32, SDPA, the head in chunks of 128 positions in bf16, which Fabric "
          "returns as float32 copies (convert_output) that the loss reads and fit() keeps through backward, LoRA r 8 "
          "on q and v in bf16 with dropout 0.05, AdamW (bitsandbytes' "
          "PagedAdamW when quantized). Batch (micro_batch_size 1), sequence, rank and targets stay yours.",
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
          "parameters over the same units; and finetune/full.py (an unchunked head, the shifted logits copied and "
          "chunked by 128 rows)",
          {"sgd", "momentum", "adam", "adamw", "adamw8bit", "paged-adamw", "paged-adamw8bit"},
          "setup() optimizer: a torch.optim class name or any class_path (utils.py instantiate_torch_optimizer); "
          "quantized, bitsandbytes' PagedAdamW only (instantiate_bnb_optimizer)"};
}

}  // namespace memplan
