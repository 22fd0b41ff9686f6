"""Published GPU peaks of fine-tuning runs by others, grouped by the framework that ran them (issue 22), each beside
memplan's answer for the same configuration: the part of bench/accuracy.md's "Published GPU figures by others" that
tests/accuracy/published_gpu.py renders per framework.

Every published figure is quoted from its source (file and commit, or thread), with the metric it reports; every
memplan figure comes from the command in its row, with the memplan figure that matches that metric (allocated_bytes
for torch.cuda.max_memory_allocated, reserved_bytes for max_memory_reserved). Options are set from the source's own
code and configuration, never chosen to fit its figure; where memplan cannot express the source's setup, the row's
"setup" says so and how much it is worth where that can be counted. Sources considered and left out:
bench/published_gpu_sources.md.
"""
GIB = 2**30


def shown(args):
    """A row's memplan command as a shell takes it: the arguments holding a space, `|` or `\\` single-quoted."""
    return "memplan " + " ".join(a if " " not in a and "|" not in a and "\\" not in a else f"'{a}'" for a in args)


# Llama-2-7b-hf's config.json as on the Hub (tests/models/hf_configs/Llama-2-7b-hf.json; memplan inspect counts
# 6,738,415,616 parameters, the model's published total).
LLAMA2_7B = "tests/models/hf_configs/Llama-2-7b-hf.json"

# AnswerDotAI/fsdp_qlora, benchmarks_03_2024.md (added in commit 4cd69234f84de9f4f4933904b8824ab9f2c2a004, runs of
# February and March 2024; "Case Study: A Dual 3090 'Basement Rig'", two RTX 3090, sm86). The runs are train.py as of
# then (read at 50efa1efa0ed1451b466686bc89c07007637ae48, the commit whose names the text quotes:
# "reserved_after_model_wrap"), from the template command
#   python train.py --model_name meta-llama/Llama-2-7b-hf --batch_size 1 --context_length 512 --train_type qlora
#     --use_gradient_checkpointing True --reentrant_checkpointing True --use_cpu_offload False --dataset dummy
# with train.py's defaults for the rest:
#  - precision "bf16": the model loaded in bfloat16 and trained in it, no autocast, no FSDP MixedPrecision;
#  - LoRA through PEFT (train_type lora/qlora: get_peft_model(LoraConfig(r=lora_rank, lora_alpha, lora_dropout,
#    target_modules))), lora_rank 64, lora_alpha 16, lora_dropout 0.1, lora_target_modules "all" = k_proj, q_proj,
#    v_proj, up_proj, down_proj, gate_proj (not o_proj);
#  - qlora: every decoder Linear replaced by bitsandbytes Linear4bit(quant_type="nf4", quant_storage=bfloat16),
#    compress_statistics left at bitsandbytes' default True (double quantization); embeddings and head bfloat16;
#  - attention "sdpa"; torch.optim.AdamW(lr, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1), foreach by default;
#  - activation checkpointing of every LlamaDecoderLayer (apply_activation_checkpointing, reentrant here);
#  - FSDP(use_orig_params=False) with the wrapping policy of get_wrapping_policy(False): every leaf module whose
#    weight requires grad (each LoRA lora_A and lora_B Linear) its own unit, every LlamaDecoderLayer a unit, the rest
#    (embeddings, final norm, head) the root. --sharding_strategy ddp is FSDP's NO_SHARD: a whole copy on each GPU;
#  - dataset "dummy": every sample longer than context_length, so every batch is batch_size x context_length;
#  - output = model(input_ids, labels=labels): the output (its float32 logits) lives through backward;
#  - the figure: torch.cuda.reset_peak_memory_stats() before the first epoch, max_memory_reserved (the tables' "Peak
#    Memory (GiB)", which the text calls "the reported peak reserved memory") and max_memory_allocated (quoted in the
#    text for LoRA at batch 1) after it, in GiB.
AA_SOURCE = ("AnswerDotAI/fsdp_qlora benchmarks_03_2024.md @4cd6923 (dual RTX 3090), "
             "https://github.com/AnswerDotAI/fsdp_qlora/blob/main/benchmarks_03_2024.md")
AA_BASE = ["--graph", "train", "--mode", "train", "--precision", "bf16", "--attention", "sdpa",
           "--upcast", "rmsnorm,logits", "--optimizer", "adamw", "--checkpoint", "layers", "--lora-rank", "64",
           "--lora-targets", "q_proj|k_proj|v_proj|gate_proj|up_proj|down_proj", "--lora-dropout", "0.1",
           "--lora-dtype", "base", "--arch", "sm86"]
AA_QLORA = ["--frozen-dtype", "nf4", "--double-quant"]
# The source's wrapping policy as memplan's --fsdp-wrap (the first group names the unit): a LoRA weight is a unit of
# its own, every other parameter of decoder layer N is layer N's unit, the rest the root.
AA_WRAP = ["--gpus", "2", "--shard", "fsdp", "--fsdp-wrap", r"^(.*lora_[AB].*|.*?layers\.[0-9]+\.)"]
AA_SETUP = ("transformers 4.38-4.39 (what these runs loaded) upcast all logits in the forward and copied the shifted "
            "ones before the loss: memplan --upcast logits; PEFT then (<= 0.11) cast the adapters to the base weight's "
            "type (bfloat16, and quant_storage bfloat16 for 4-bit): memplan --lora-dtype base; reentrant "
            "checkpointing, modelled as per-layer checkpointing")


def answerai_rows(memplan):
    rows = []

    def row(config, published, metric, key, extra, note):
        args = ["estimate", LLAMA2_7B, *AA_BASE, *extra]
        j = memplan(args)
        rows.append(dict(
            framework="plain PyTorch + PEFT + bitsandbytes (Answer.AI fsdp_qlora train.py)",
            source=AA_SOURCE, model="Llama-2-7b-hf", config=config,
            measured=f"{metric} {published} GiB", published=round(published * GIB), memplan=j[key],
            command=shown(args),
            what=key, setup=note + "; " + AA_SETUP))
    # FSDP FULL_SHARD over the two GPUs, batch 1 ("Starting at 7B": QLoRA 4.98 / 5.21 GiB; LoRA: "the peak allocated
    # memory is 8.28 GiB vs 9.16 GiB" at 512 and 2048 tokens).
    for seq, reserved in ((512, 4.98), (2048, 5.21)):
        row(f"QLoRA r64, FSDP full_shard 2 GPUs, b1 s{seq}, bf16, checkpoint per layer", reserved,
            "peak reserved (max_memory_reserved)", "reserved_bytes",
            ["--batch", "1", "--dim", f"seq={seq}", *AA_QLORA, *AA_WRAP],
            "per GPU; the reserved peak also holds what loading and wrapping left cached: the text gives 3.72 GiB "
            "reserved after the wrap for this model, where the 4-bit shard is about 1.6 GiB, so at 512 tokens the "
            "published figure is floored by the loading's cache, which memplan (one steady step) does not see")
    for seq, allocated in ((512, 8.28), (2048, 9.16)):
        row(f"LoRA r64, FSDP full_shard 2 GPUs, b1 s{seq}, bf16, checkpoint per layer", allocated,
            "peak allocated (max_memory_allocated)", "allocated_bytes",
            ["--batch", "1", "--dim", f"seq={seq}", *AA_WRAP],
            "per GPU; the source's tables give 10.24 / 10.22 GiB reserved for these runs, the allocated peaks are "
            "quoted in its text")
    # FSDP FULL_SHARD, context 2048, larger batches (the table "Llama-2 7B with Context Length of 2048").
    for kind, batch, reserved in (("QLoRA", 4, 11.22), ("QLoRA", 10, 20.97), ("LoRA", 4, 16.14), ("LoRA", 6, 21.35)):
        row(f"{kind} r64, FSDP full_shard 2 GPUs, b{batch} s2048, bf16, checkpoint per layer", reserved,
            "peak reserved (max_memory_reserved)", "reserved_bytes",
            ["--batch", str(batch), "--dim", "seq=2048", *(AA_QLORA if kind == "QLoRA" else []), *AA_WRAP],
            "per GPU; batches chosen by the author to fill the 24 GiB card (its text: \"scale up the batch size to fill that up\")")
    # sharding_strategy ddp (NO_SHARD), context 2048: QLoRA batch 8 20.94 GiB, LoRA batch 4 22.04 GiB.
    row("QLoRA r64, FSDP NO_SHARD (a whole copy per GPU), b8 s2048, bf16, checkpoint per layer", 20.94,
        "peak reserved (max_memory_reserved)", "reserved_bytes", ["--batch", "8", "--dim", "seq=2048", *AA_QLORA],
        "memplan runs one GPU: NO_SHARD all-reduces each unit's flat grad in place (LoRA grads only, the decoder "
        "units are frozen), which adds no bucket")
    row("LoRA r64, FSDP NO_SHARD (a whole copy per GPU), b4 s2048, bf16, checkpoint per layer", 22.04,
        "peak reserved (max_memory_reserved)", "reserved_bytes", ["--batch", "4", "--dim", "seq=2048"],
        "memplan runs one GPU, as for the QLoRA row")
    return rows


# torchtune, docs/source/tutorials/e2e_flow.rst as of 0cd8bc4ca (pytorch/torchtune PR #2192, 2024-12-20): the log of
#   tune run lora_finetune_single_device --config llama3_2/3B_lora_single_device
# prints "Memory stats after model init: GPU peak memory allocation: 6.21 GiB" (torchtune/training/memory.py
# get_memory_stats: torch.cuda.max_memory_allocated / 2**30). The config at that commit
# (recipes/configs/llama3_2/3B_lora_single_device.yaml): lora_llama3_2_3b, lora_attn_modules q_proj, v_proj,
# output_proj, apply_lora_to_mlp True, lora_rank 64, dtype bf16. The recipe builds the model on the device under
# set_default_dtype(bf16) (the LoRA matrices bf16 too) and copies the CPU-loaded checkpoint into it, so the peak
# after init is the model itself: what memplan's breakdown.weights holds. The row runs memplan's torchtune recipe
# (--recipe torchtune, report/recipes_torchtune.cc, v0.6.1, whose llama3_2/3B_lora_single_device.yaml is the same on
# these keys) with the config's lora_rank: the adapters' targets and type are the recipe's.
TT_E2E = ("pytorch/torchtune docs/source/tutorials/e2e_flow.rst @0cd8bc4ca (PR #2192), "
          "https://github.com/pytorch/torchtune/blob/main/docs/source/tutorials/e2e_flow.rst")


def torchtune_rows(memplan):
    args = ["estimate", "tests/models/hf_configs/Llama-3.2-3B.json", "--graph", "train", "--mode", "train",
            "--batch", "1", "--dim", "seq=512", "--recipe", "torchtune", "--lora-rank", "64"]
    j = memplan(args)
    return [dict(
        framework="torchtune (lora_finetune_single_device; recipe torchtune)", source=TT_E2E, model="Llama-3.2-3B",
        config="LoRA r64 on q, v, output_proj and the MLP, bf16, after model init (no step)",
        measured="Memory stats after model init: peak allocated 6.21 GiB", published=round(6.21 * GIB),
        memplan=j["breakdown"]["weights"],
        command=shown(args),
        what="breakdown.weights (the frozen bf16 base, tied embedding once, and the adapters)",
        setup="a check of the model's bytes, not of a step: torchtune's adapters are bfloat16 (the recipe's "
              "--lora-dtype base), "
              "and torchtune also holds its RoPE "
              "cache (Llama3ScaledRoPE, 131072 positions x 64 x cos/sin in float32: 0.06 GiB) that memplan does not "
              "count; the step's own peak is not quoted by the source with a fixed sequence length (alpaca, unpacked)")]


# Unsloth's benchmarks (docs.unsloth.ai/basics/unsloth-benchmarks, also unsloth.ai/blog/llama3-3, December 2024),
# "Llama 3.1 (8B) max. context length": Llama 3.1 8B Instruct, "4bit QLoRA on all linear layers (Q, K, V, O, gate,
# up and down) with rank = 32 with a batch size of 1. We padded all sequences to a certain maximum sequence length",
# the column "Hugging Face + FA2": the longest context that ran (transformers + PEFT + bitsandbytes, flash attention
# 2) per GPU size; 40 GB: 12,264 and 80 GB: 28,454 tokens. The page names the A100 80GB for its 70B test; the 8B
# GPU is taken to be the A100 of each size (catalog: A100-40GB, A100-80GB). memplan fit answers the same question
# with the hf-peft-qlora recipe (Trainer + PEFT + bitsandbytes defaults: k-bit preparation, per-layer checkpointing).
UNSLOTH = "Unsloth benchmarks, Llama 3.1 (8B) max. context length, https://docs.unsloth.ai/basics/unsloth-benchmarks"


def hf_rows(memplan_fit):
    rows = []
    for gpu, published in (("A100-40GB", 12264), ("A100-80GB", 28454)):
        args = ["fit", "tests/models/hf_configs/Llama-3.1-8B.json", "--graph", "train", "--mode", "train",
                "--batch", "1", "--precision", "bf16", "--recipe", "hf-peft-qlora", "--lora-rank", "32",
                "--lora-targets", "q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj",
                "--search", "seq", "--gpu", gpu, "--max", "200000"]
        j = memplan_fit(args)
        rows.append(dict(
            framework="Hugging Face Trainer + PEFT + bitsandbytes (recipe hf-peft-qlora)", source=UNSLOTH,
            model="Llama-3.1-8B", unit="tokens",
            config=f"QLoRA r32 all linear layers, b1, padded, {gpu.replace('-', ' ')} (assumed)",
            measured=f"Hugging Face + FA2: longest context that fits, {published:,} tokens", published=published,
            memplan=j["value"], command=shown(args),
            what="fit's value: the largest seq that fits the GPU's budget (tokens, not bytes)",
            setup="the error is in tokens, and the weights and states do not grow with the context, so it is about "
                  "4x the error in bytes near the boundary: memplan puts the published lengths inside the budget with "
                  "little to spare (12,264 tokens: 37.6 GiB reserved of the A100-40GB's 38.4 GiB; 28,454 tokens: 77.4 "
                  "of the A100-80GB's 78.1 GiB, the step growing about 0.64 MiB a token there); fit's answer is the run's, "
                  "not the steady step's (alone that would fit 14,315 and 31,811 tokens): the first iteration leaves "
                  "cached blocks the steady steps must then fit around; the source gives neither the optimizer (Unsloth's notebooks "
                  "use adamw_8bit: -0.47 GiB of Adam states against the recipe's fused AdamW), nor the transformers "
                  "version (its loss then; the recipe follows today's), nor whether the GPU was an A100 or its VRAM "
                  "capped; flash attention 2 is costed as sdpa (neither keeps a seq x seq matrix)"))
    return rows


# bharathbattu/LoRA-vs-Full-Fine-Tuning, LoRA_vs_Full_Fine_Tuning.ipynb and README.md at 87b196a (2026-03-03; Colab,
# one T4, sm75; transformers recent enough for from_pretrained's dtype=, not pinned). run_experiment(): reset_peak_
# memory_stats() before loading, then Qwen/Qwen2-0.5B (the notebook prints 494,032,768 parameters: the shapes of
# tests/models/hf_configs/Qwen2.5-0.5B.json, whose Hub count is the same) loaded with dtype=float32 for the full
# fine-tune (Trainer fp16=True: autocast fp16 over float32 parameters) or dtype=float16 for LoRA (fp16=False: the
# model trains in float16, PEFT's adapters float32) and QLoRA (BitsAndBytesConfig nf4, double quant, compute float16,
# then prepare_model_for_kbit_training: float32 non-quantized parameters, per-layer reentrant checkpointing);
# LoraConfig r 8 (alpha 16) or 64 (alpha 128) on q_proj and v_proj, dropout 0.05; TrainingArguments batch 2,
# gradient_accumulation_steps 8, default optimizer; every sample padded to max_length 256. The figure:
# torch.cuda.max_memory_allocated() / 1024**3 after trainer.train(), the README's "Peak Memory (GB)" column, given
# to about 0.1 ("~10.2", "~2.6", "~2.7", "~1.6").
QWEN_T4 = ("bharathbattu/LoRA-vs-Full-Fine-Tuning LoRA_vs_Full_Fine_Tuning.ipynb, README.md @87b196a (T4), "
           "https://github.com/bharathbattu/LoRA-vs-Full-Fine-Tuning")


def qwen_t4_rows(memplan):
    rows = []
    base = ["estimate", "tests/models/hf_configs/Qwen2.5-0.5B.json", "--graph", "train", "--batch", "2",
            "--dim", "seq=256", "--grad-accum", "8", "--arch", "sm75"]
    lora = ["--lora-targets", "q_proj|v_proj", "--lora-dropout", "0.05"]
    for config, published, recipe, extra in (
            ("full fine-tune, float32 under fp16 autocast", 10.2, "hf-trainer",
             ["--precision", "amp-fp16", "--param-dtype", "fp32"]),
            ("LoRA r8 q,v, the model in float16", 2.6, "hf-peft", ["--precision", "fp16", "--lora-rank", "8", *lora]),
            ("LoRA r64 q,v, the model in float16", 2.7, "hf-peft", ["--precision", "fp16", "--lora-rank", "64", *lora]),
            ("QLoRA r8 q,v, nf4 double quant, compute float16", 1.6, "hf-peft-qlora",
             ["--precision", "fp16", "--lora-rank", "8", *lora])):
        args = [*base, "--recipe", recipe, *extra]
        j = memplan(args)
        rows.append(dict(
            framework="Hugging Face Trainer + PEFT + bitsandbytes (recipes hf-trainer, hf-peft, hf-peft-qlora)",
            source=QWEN_T4, model="Qwen2-0.5B", config=f"{config}, b2 s256 (padded), grad accum 8, T4",
            measured=f"peak allocated (max_memory_allocated) ~{published} GiB", published=round(published * GIB),
            memplan=j["allocated_bytes"],
            command=shown(args),
            what="allocated_bytes",
            setup="the published figure is given to about 0.1 GiB (a bar chart beside it agrees); the peak covers "
                  "the whole run from before loading (the steady step's, grads accumulating over 8 micro-batches, "
                  "sets it in memplan); the optimizer is the Trainer's default for the transformers installed (the "
                  "recipes' fused AdamW; the full fine-tune's peak is in the backward, not the step, so foreach "
                  "gives the same); attention is the recipes' sdpa rule (a T4 has no flash attention; which SDPA "
                  "kernel ran with the padding mask is not printed); the two LoRA rows' 0.17-0.21 GiB under is not "
                  "explained"))
    return rows


def rows(memplan, memplan_fit=None):
    return (answerai_rows(memplan) + torchtune_rows(memplan) + hf_rows(memplan_fit or memplan)
            + qwen_t4_rows(memplan))
