#!/usr/bin/python3
"""Published GPU memory figures by others, each with its source, beside memplan's answer for the same setup.

    /usr/bin/python3 tests/accuracy/published_gpu.py              # the table, as text
    /usr/bin/python3 tests/accuracy/published_gpu.py --markdown   # the section bench/accuracy.md carries

Every memplan number here comes from the memplan command in its row (run by this script); every published number is
quoted from its source, or computed from the source's formula with the model's own dimensions (tests/models/zoo.py)
and PyTorch's own parameter count (tests/models/expected_shapes.json, recorded at export). Not a gate: the setups are
not always memplan's (the "setup" column says where they differ), so the error is information, not a pass/fail.
timm's published benchmark CSVs and huggingface/peft's method_comparison results are deliberately not used: they
are kept as an independent check.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import published_finetune  # noqa: E402  (fine-tuning runs by others, one table per framework)

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("MEMPLAN_BIN", os.path.join(SRC, "build", "memplan"))
MIB = 2**20

# The zoo's GPT-2-small-like model (tests/models/zoo.py GPT_CONFIG): 12 layers, hidden 768, 12 heads, vocab 50257,
# pre-norm blocks with a 4h GELU MLP, no dropout.
GPT = dict(L=12, h=768, a=12, v=50257)


def memplan(args):
    p = subprocess.run([BIN, *args, "--json"], cwd=SRC, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"memplan {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return json.loads(p.stdout)


def pytorch_params(export):
    with open(os.path.join(SRC, "tests", "models", "expected_shapes.json")) as f:
        return json.load(f)["models"][export]["pytorch_trainable_parameters"]


def model_states(j):
    t = j["training"]
    return t["param_bytes"] + t["grad_bytes"] + t["optimizer_state_bytes"]


def korthikanti_layer_bytes(s, b, h, a, dropout):
    """Activation bytes one transformer layer saves for backward, 16-bit activations, no parallelism, no recompute:
    Korthikanti et al. 2022 (arXiv:2205.05198) section 4.1, eq. 1: s*b*h*(34 + 5*a*s/h). Its items: attention 11sbh +
    5as^2b (QKV input 2sbh, Q and K 4sbh, softmax output 2as^2b, its dropout mask as^2b, dropout output 2as^2b, V 2sbh,
    projection input 2sbh, dropout mask sbh), MLP 19sbh (input 2sbh, GELU input 8sbh, GELU output 8sbh, dropout mask
    sbh), two LayerNorm inputs 4sbh. Without dropout the three masks and the dropout output go (sbh + sbh + as^2b +
    2as^2b), and attention-over-values reads the softmax output itself: 32sbh + 2as^2b."""
    if dropout:
        return s * b * h * 34 + 5 * a * s * s * b
    return s * b * h * 32 + 2 * a * s * s * b


def korthikanti_tp_layer_bytes(s, b, h, a, t, sp):
    """Korthikanti et al. 2022 sec. 4.2, eq. 2 (tensor parallelism t: sbh(10 + 24/t + 5as/(ht))) and eq. 3 (with
    sequence parallelism: sbh(34/t + 5as/(ht))), without dropout as korthikanti_layer_bytes: the two replicated masks
    (2sbh) and the split attention-dropout mask and output go, so 10 -> 8 and 5as/h -> 2as/h."""
    if sp:
        return s * b * h * 32 // t + 2 * a * s * s * b // t
    return s * b * h * (8 + 24 // t) + 2 * a * s * s * b // t


# Llama 3.1 8B (tests/models/llama.py CONFIGS["llama3_1_8b"], from its config.json): Megatron-LM's arguments for it.
LLAMA8B = dict(L=32, h=4096, a=32, kv=8, ffn=14336, v=128256)


def megatron_padded_vocab(v, t):
    """megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding: up to a multiple of
    make_vocab_size_divisible_by (default 128) x tensor_model_parallel_size."""
    m = 128 * t
    return -(-v // m) * m


def megatron_shard_parameters(c, t):
    """megatron/training/theoretical_memory_usage.py, compute_weight_and_optimizer_memory: the parameters on the most
    loaded model shard, pp = 1, RMSNorm (norm_size 1), SwiGLU (gated_linear_multiplier 3/2), GQA, untied embeddings:
    (L x layer + final norm + embedding) / tp, + embedding / tp for the untied output layer."""
    h = c["h"]
    attn = 2 * h * h * (1 + c["kv"] / c["a"])
    layer = 2 * h * (c["ffn"] * 3 / 2 + 1) + attn
    embedding = h * megatron_padded_vocab(c["v"], t)
    return (c["L"] * layer + h + embedding) / t + embedding / t


def megatron_sp_activation_bytes(c, s, b, t):
    """megatron/training/theoretical_memory_usage.py, compute_activation_memory (its branch for sequence parallelism
    with selective recompute, pp = 1): per layer sbh(18 + 4 ffn/h), the embedding's input 8sb and dropout sbh, the
    output layer's input and the loss 4sbh(1 + v/h) with the padded vocabulary, all / tp."""
    h = c["h"]
    act = s * b * h * (18 + 4 * c["ffn"] / h) * c["L"] + 8 * s * b + s * b * h
    act += s * b * h * 4 * (1 + megatron_padded_vocab(c["v"], t) / h)
    return act / t


def rows():
    out = []
    # 1-2. ZeRO (Rajbhandari et al., SC 2020, arXiv:1910.02054), section 3.1 "Model States": mixed-precision Adam keeps
    # 2 bytes (fp16 parameters) + 2 (fp16 gradients) + K = 12 (fp32 parameters, momentum, variance) per parameter:
    # 16 bytes per parameter.
    for export, dims in (("gpt_train", ["--dim", "seq=128"]), ("bert_train", ["--dim", "seq=128"])):
        psi = pytorch_params(export)
        args = ["estimate", f"tests/models/{export}.onnx", "--batch", "1", *dims, "--mode", "train",
                "--precision", "amp-fp16", "--optimizer", "adam"]
        out.append(dict(
            source="ZeRO, Rajbhandari et al. 2020, arXiv:1910.02054, sec. 3.1",
            model=export.replace("_train", ""), config="mixed-precision Adam, any batch",
            measured="model states: 16 B x parameters (PyTorch's count %d)" % psi,
            published=16 * psi, memplan=model_states(memplan(args)), command="memplan " + " ".join(args),
            what="param_bytes + grad_bytes + optimizer_state_bytes",
            setup="a consistency check: memplan counts the same 16 B; the split differs: ZeRO's fp16 weights and grads + fp32 master, momentum, variance; "
                  "torch.autocast keeps fp32 weights and grads + fp32 momentum, variance (4 + 4 + 8)"))
    # FSDP FULL_SHARD against ZeRO-3 (P_os+g+p), Rajbhandari et al. 2020 sec. 5.3 / Figure 1: (2 + 2 + K) * Psi / N_d
    # bytes of model states per GPU, K = 12 for mixed-precision Adam: 16 Psi / N_d.
    psi = pytorch_params("gpt_train")
    args = ["estimate", "tests/models/gpt_train.onnx", "--batch", "1", "--dim", "seq=128", "--mode", "train",
            "--precision", "amp-fp16", "--optimizer", "adam", "--gpus", "8", "--shard", "fsdp"]
    out.append(dict(
        source="ZeRO, Rajbhandari et al. 2020, arXiv:1910.02054, sec. 5.3 (P_os+g+p: 16 Psi / N_d)",
        model="gpt", config="--shard fsdp over 8 GPUs, mixed-precision Adam",
        measured="model states per GPU: 16 B x parameters / 8 (PyTorch's count %d)" % psi,
        published=16 * psi // 8, memplan=model_states(memplan(args)), command="memplan " + " ".join(args),
        what="param_bytes + grad_bytes + optimizer_state_bytes (per GPU)",
        setup="a consistency check of the sharded persistent state: FSDP pads each unit's flat parameter to a "
              "multiple of 8 (at most 7 elements per unit, 13 units), which the formula does not; the transient "
              "unit working set (the current and the prefetched all-gathered units, the unsharded grad before its "
              "reduce-scatter) is on top of this in memplan's peak and outside the formula"))
    # Pipeline parallelism against Megatron-LM's megatron/training/theoretical_memory_usage.py (NVIDIA/Megatron-LM),
    # for the zoo GPT over 4 stages, 1F1B with as many micro-batches as stages (num_microbatches=None). Activations,
    # compute_activation_memory_without_sp (the path without sequence parallelism), tensor parallel 1: per layer
    # sbh(10 + 24/t) = 34sbh (Korthikanti et al. 2022 Table 2, selective recompute: no attention-score matrices),
    # times num_layers (the first stage's num_layers / pp layers for pp micro-batches in flight), plus the
    # embedding's input 8sb and dropout sbh per micro-batch in flight, times its 1.05 overhead factor.
    pp, s_, b_ = 4, 1024, 1
    args = ["estimate", "tests/models/gpt_train.onnx", "--batch", str(b_), "--dim", f"seq={s_}", "--mode", "train",
            "--precision", "fp16", "--optimizer", "adam", "--attention", "sdpa", "--runtime", "ideal", "--pp", str(pp)]
    stage0 = memplan(args)["training"]["pipeline"]["stages"][0]
    sbh = s_ * b_ * GPT["h"]
    megatron_act = (34 * sbh * GPT["L"] + 8 * s_ * b_ * pp + sbh * pp) * 1.05
    out.append(dict(
        source="Megatron-LM theoretical_memory_usage.py compute_activation_memory_without_sp (NVIDIA/Megatron-LM)",
        model="gpt", config=f"--pp {pp}, {pp} micro-batches of b{b_} s{s_}, fp16, first stage",
        measured="first stage: 34sbh x num_layers + (8sb + sbh) x pp, x 1.05",
        published=round(megatron_act),
        memplan=stage0["in_flight_micro_batches"] * stage0["saved_bytes_per_micro_batch"],
        command="memplan " + " ".join(args),
        what="training.pipeline.stages[0]: in_flight_micro_batches x saved_bytes_per_micro_batch",
        setup="both say the first stage holds pp micro-batches of its num_layers/pp layers (memplan: 4 in flight x "
              "3 layers + the embedding); the formula is Megatron's GPT with dropout (two sbh masks per layer) and "
              "selective recompute, the zoo GPT has no dropout and runs sdpa (no score matrices either; it keeps "
              "a logsumexp), and memplan adds the LayerNorms' fp32 mean and rstd; the 1.05 is Megatron's margin"))
    # Weights and optimizer: compute_weight_and_optimizer_memory, the most loaded shard (the first stage:
    # num_layers / pp layers + the embedding), 18 B per parameter (no distributed optimizer), with Megatron's
    # parameter formula for the zoo GPT: per layer 2h(4h + 2) + 4h^2 (no linear biases), embedding h x the
    # vocabulary padded to a multiple of 128 (50304), final LayerNorm 2h.
    h, L = GPT["h"], GPT["L"]
    layer = 2 * h * (4 * h + 2) + 4 * h * h
    shard = (L * layer + 2 * h) / pp + h * 50304
    args_w = ["estimate", "tests/models/gpt_train.onnx", "--batch", "1", "--dim", "seq=128", "--mode", "train",
              "--precision", "amp-fp16", "--optimizer", "adam", "--pp", str(pp)]
    stage0_w = memplan(args_w)["training"]["pipeline"]["stages"][0]
    out.append(dict(
        source="Megatron-LM theoretical_memory_usage.py compute_weight_and_optimizer_memory (NVIDIA/Megatron-LM)",
        model="gpt", config=f"--pp {pp}, mixed-precision Adam, first stage",
        measured="most loaded shard: (layers / pp + embedding) parameters x 18 B", published=round(shard * 18),
        memplan=4 * stage0_w["param_bytes"], command="memplan " + " ".join(args_w),
        what="4 x training.pipeline.stages[0].param_bytes (amp: fp32 parameter, grad and two Adam states)",
        setup="Megatron keeps 18 B per parameter (fp16 weight, fp32 main grad, fp32 master weight and two states), "
              "torch.autocast 16 B: -11.1% from that alone; Megatron's formula has no linear biases and no "
              "position embedding, which the zoo GPT's first stage holds (wpe, 1024 x 768); its vocabulary is "
              "padded to 50304, the zoo's is 50257"))
    # 3-4. Korthikanti et al. 2022, eq. 1, for the zoo GPT (no dropout), 16-bit activations (model.half()), plus
    # what lies outside the 12 layers, counted the same way: the final LayerNorm's input and output (the tied head's
    # input) 4sbh, the logits and the log-softmax output 2sbv each (cross-entropy saves log_softmax's result).
    for b, s in ((4, 512), (1, 1024)):
        args = ["estimate", "tests/models/gpt_train.onnx", "--batch", str(b), "--dim", f"seq={s}", "--mode", "train",
                "--precision", "fp16", "--optimizer", "sgd", "--runtime", "ideal"]
        j = memplan(args)
        layers = GPT["L"] * korthikanti_layer_bytes(s, b, GPT["h"], GPT["a"], dropout=False)
        outside = 4 * s * b * GPT["h"] + 4 * s * b * GPT["v"]
        out.append(dict(
            source="Korthikanti et al. 2022, arXiv:2205.05198, sec. 4.1 eq. 1 (dropout terms removed)",
            model="gpt", config=f"b{b} s{s} fp16 (model.half()), no recompute",
            measured=f"12 x sbh(32 + 2as/h) = {layers / MIB:.1f} MiB for the layers, + 4sbh + 4sbv outside them",
            published=layers + outside, memplan=j["breakdown"]["activations"], command="memplan " + " ".join(args),
            what="breakdown.activations at the peak",
            setup="the paper's formula is for Megatron's layers with dropout (34sbh + 5as^2b); the zoo GPT has none, "
                  "so its three masks and the dropout output are removed; the terms outside the layers are counted "
                  "by hand, not by the paper (identified while comparing: each is a tensor PyTorch saves for backward); memplan also holds the LayerNorms' fp32 mean and rstd (8 B per row "
                  "each, 25 LayerNorms), which neither counts"))
    # Tensor parallelism, Korthikanti et al. eq. 2 / eq. 3 for the zoo GPT (12 heads: t = 2 and 4), the same setup as
    # rows 3-4; outside the layers: the final LayerNorm's input and output 4sbh (split along the sequence with
    # sequence parallelism, where the head saves only its shard of the input), the vocab-parallel logits and
    # log-softmax 2sb x ceil(v/t) each (vocab_parallel_cross_entropy never gathers them).
    b, s = 4, 512
    for t in (2, 4):
        for sp in (False, True):
            args = ["estimate", "tests/models/gpt_train.onnx", "--batch", str(b), "--dim", f"seq={s}", "--mode", "train",
                    "--precision", "fp16", "--optimizer", "sgd", "--runtime", "ideal", "--tp", str(t)]
            args += ["--sequence-parallel"] if sp else []
            j = memplan(args)
            layers = GPT["L"] * korthikanti_tp_layer_bytes(s, b, GPT["h"], GPT["a"], t, sp)
            outside = 4 * s * b * GPT["h"] // (t if sp else 1) + 4 * s * b * -(-GPT["v"] // t)
            out.append(dict(
                source="Korthikanti et al. 2022, arXiv:2205.05198, sec. 4.2 eq. %d (dropout terms removed)" % (3 if sp else 2),
                model="gpt", config=f"b{b} s{s} fp16, --tp {t}" + (" --sequence-parallel" if sp else "") + ", one GPU",
                measured=(f"12 x sbh(32/t + 2as/(ht))" if sp else f"12 x sbh(8 + 24/t + 2as/(ht))") +
                         f" = {layers / MIB:.1f} MiB for the layers, + {'4sbh/t' if sp else '4sbh'} + 4sb ceil(v/t) outside",
                published=layers + outside, memplan=j["breakdown"]["activations"], command="memplan " + " ".join(args),
                what="breakdown.activations at the peak (one GPU)",
                setup="as rows 3-4 (no dropout in the zoo GPT; memplan also holds the 25 LayerNorms' fp32 mean and rstd, "
                      "8 B per row each, split along the sequence with sequence parallelism); rank 0 holds "
                      "ceil(50257/t) vocabulary columns where Megatron would pad the vocabulary"))
    # Megatron-LM's own theoretical memory report (megatron/training/theoretical_memory_usage.py) for Llama 3.1 8B at
    # tp = 2, 4, 8: the parameters on the most loaded shard (compute_weight_and_optimizer_memory, x 4 B in fp32), and
    # the activations of compute_activation_memory, its formula for sequence parallelism with selective recompute
    # (no attention-score terms: memplan runs --attention sdpa, which keeps none either).
    for t in (2, 4, 8):
        args = ["estimate", "tests/models/llama3_1_8b_train.onnx", "--batch", "1", "--dim", "seq=512", "--mode", "train",
                "--precision", "fp32", "--optimizer", "adam", "--tp", str(t)]
        j = memplan(args)
        out.append(dict(
            source="Megatron-LM megatron/training/theoretical_memory_usage.py, compute_weight_and_optimizer_memory",
            model="llama3_1_8b", config=f"--tp {t}, fp32 weights, one GPU",
            measured="num_parameters_on_most_loaded_model_shard x 4 B (padded vocabulary %d)" % megatron_padded_vocab(LLAMA8B["v"], t),
            published=round(megatron_shard_parameters(LLAMA8B, t) * 4), memplan=j["training"]["param_bytes"],
            command="memplan " + " ".join(args), what="training.param_bytes",
            setup="Megatron divides the RMSNorm weights by tp too and pads the vocabulary to a multiple of 128 x tp; "
                  "memplan replicates the norms (as Megatron's layers do) and holds ceil(V/tp) rows, V unpadded"))
    for t in (2, 4, 8):
        s = 4096
        args = ["estimate", "tests/models/llama3_1_8b_train.onnx", "--batch", "1", "--dim", f"seq={s}", "--mode", "train",
                "--precision", "bf16", "--optimizer", "sgd", "--attention", "sdpa", "--tp", str(t), "--sequence-parallel"]
        j = memplan(args)
        out.append(dict(
            source="Megatron-LM megatron/training/theoretical_memory_usage.py, compute_activation_memory",
            model="llama3_1_8b", config=f"b1 s{s} bf16, --tp {t} --sequence-parallel, sdpa, one GPU",
            measured="(L x sbh(18 + 4 ffn/h) + 8sb + sbh + 4sbh(1 + v/h)) / tp",
            published=round(megatron_sp_activation_bytes(LLAMA8B, s, 1, t)), memplan=j["breakdown"]["activations"],
            command="memplan " + " ".join(args), what="breakdown.activations at the peak (one GPU)",
            setup="the scaling with tp is the check (the error is the same at every tp: memplan splits what the "
                  "formula splits); the level differs because the formula is GPT's: its MLP term 4 ffn/h sbh is a GELU "
                  "MLP's (fc output and GELU output), while Llama's SwiGLU saves gate, up, silu(gate) and their product "
                  "(8 ffn/h sbh, +14 sbh per layer here); memplan's Llama also keeps HF's eager ops (RMSNorm decomposed, "
                  "repeat_kv's full-head copies of k and v) and a bf16 log-softmax where the formula has an fp32 loss"))
    # 5-6. ColossalAI PR #1587 (github.com/hpcaitech/ColossalAI/pull/1587), torchvision models on a CUDA device,
    # "real_param_mem" (MB = MiB: resnet18's 11,689,512 fp32 parameters are 44.59 of them, its "estimated" column).
    for export, real in (("resnet18_train", 44.690), ("resnet50_train", 99.353)):
        args = ["estimate", f"tests/models/{export}.onnx", "--batch", "1", "--mode", "train", "--optimizer", "sgd"]
        j = memplan(args)
        out.append(dict(
            source="hpcaitech/ColossalAI#1587 (real_param_mem)", model=export.replace("_train", ""),
            config="fp32, torchvision, on CUDA", measured="memory allocated by the model on the device",
            published=round(real * MIB), memplan=j["breakdown"]["weights"], command="memplan " + " ".join(args),
            what="breakdown.weights",
            setup="theirs is memory_allocated, so each of the model's tensors is rounded up to 512 B by the caching "
                  "allocator; memplan's weights are exact bytes (parameters and BatchNorm buffers; the rounding is in "
                  "allocator_rounding). For resnet50 that explains about 0.1 of the 1.6 MiB difference; the rest is "
                  "not explained by the PR"))
    # 7-8. WSShiro/vramexp, vramexp1.ipynb at commit e37a7f3cb1b12d1d3b40040ed5e91fcf4d8f2a33 (github.com/WSShiro/vramexp),
    # sections "ResNet50" and "Visiont Transformer": torchvision models with a 10-class head, batch 128, fp32,
    # optim.SGD(lr=0.01), F.cross_entropy; torch 2.0.1, CUDA 11.8, RTX 4090 (sm89). Printed: max_memory_allocated()
    # after reset_peak_memory_stats(), and memory_allocated() at the start of train() (the model's weights plus other
    # cells' tensors). Compared: the step's peak above what was allocated at its start, against memplan's allocated
    # peak less its weights, less the 1000-class head's weight + bias gradient (live at memplan's peak) that a
    # 10-class head does not have: (in * 990 + 990) * 4 B.
    for export, peak, start, fan_in, extra, note in (
            ("resnet50_train", 11738.2, 1141.6, 2048, [], ""),
            ("vit_b_16_train", 17218.1, 1563.3, 768, ["--attention", "sdpa"],
             "; --attention sdpa: in torch 2.x torchvision's ViT attention (need_weights=False) runs "
             "scaled_dot_product_attention (torch/nn/functional.py multi_head_attention_forward), the memory-efficient "
             "kernel in fp32 on sm89; --attention eager gives +11.2%, so the measurement tells the two paths apart")):
        args = ["estimate", f"tests/models/{export}.onnx", "--mode", "train", "--batch", "128", "--optimizer", "sgd",
                "--arch", "sm89", *extra]
        j = memplan(args)
        head_grad = (fan_in * 990 + 990) * 4
        out.append(dict(
            source="WSShiro/vramexp vramexp1.ipynb @e37a7f3", model=export.replace("_train", ""),
            config="b128 fp32 SGD, 10-class head, torch 2.0.1, RTX 4090",
            measured=f"max_memory_allocated {peak} MiB - memory_allocated at the step's start {start} MiB",
            published=round((peak - start) * MIB),
            memplan=j["allocated_bytes"] - j["breakdown"]["weights"] - head_grad, command="memplan " + " ".join(args),
            what=f"allocated_bytes - breakdown.weights - the 1000-class head's grad ({head_grad / MIB:.2f} MiB)",
            setup="the published start includes other cells' tensors, hence peak minus start; cuDNN's convolution "
                  "workspace counts 0 in memplan (its lower end), a real run allocates some" + note))
    # 9. ljm565/universal-llm-trainer, docs/gpu_test.md ("1. NVIDIA H100"): Llama 3.1 8B full fine-tune, 1 x H100,
    # torch 2.5.1, batch 2, seq 8192 fully filled, bf16 weights, torch.optim.AdamW, gradient checkpointing per decoder
    # layer; "Peak Mem. 78 GiB", printed by src/trainer/trainer.py as torch.cuda.memory_reserved() / 1E9, so GB and
    # reserved (its "Model Mem. 16 GiB" is 8.03e9 x 2 B = 16.06e9 B: the table's GiB are GB).
    boundaries = ",".join(["/embed_tokens/Gather_output_0"] + [f"/layers.{i}/Add_1_output_0" for i in range(32)])
    args = ["estimate", "tests/models/llama3_1_8b_train.onnx", "--mode", "train", "--batch", "2", "--dim", "seq=8192",
            "--precision", "bf16", "--optimizer", "adamw", "--attention", "sdpa", "--checkpoint", "at:" + boundaries]
    j = memplan(args)
    out.append(dict(
        source="ljm565/universal-llm-trainer docs/gpu_test.md", model="llama3_1_8b",
        config="b2 s8192 bf16 AdamW, checkpoint per layer, torch 2.5.1, H100",
        measured="memory_reserved() / 1e9 = 78 (GB)", published=78 * 10**9, memplan=j["reserved_bytes"],
        command="memplan estimate tests/models/llama3_1_8b_train.onnx --mode train --batch 2 --dim seq=8192 "
                "--precision bf16 --optimizer adamw --attention sdpa --checkpoint at:/embed_tokens/Gather_output_0,"
                "/layers.0/Add_1_output_0,...,/layers.31/Add_1_output_0",
        what="reserved_bytes",
        setup="a moderate row: memplan's peak is foreach AdamW's step (weights, grads, states and one param-sized "
              "temporary, about 80.5e9 B alone, above the published figure); --optimizer-impl single-tensor gives "
              "-5.1%, so the published figure lies between the two implementations; HF's reentrant checkpointing, "
              "an fp32 loss under autocast and clip_grad_norm_ temporaries are not modelled; +1.5% if the 78 were GiB"))
    return out


def finetune_rows():
    return published_finetune.rows(memplan)


def fmt(v, ratio, unit=None):
    if unit == "tokens":
        return f"{v:,} tokens"
    return f"{v:.3f}" if ratio else f"{v / MIB:.1f}"  # ratio rows: none yet


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rs = rows() + finetune_rows()
    if args.markdown:
        print(section(rs), end="")
        return 0
    for r in rs:
        ratio = r.get("ratio", False)
        err = 100.0 * (r["memplan"] - r["published"]) / r["published"]
        print(f"{r['model']:<20} {r['config']:<40} published {fmt(r['published'], ratio, r.get('unit')):>10} "
              f"memplan {fmt(r['memplan'], ratio, r.get('unit')):>10} {err:+7.2f}%")
    return 0


def table(rs):
    md = ["| source | model | config | what was published | published | memplan | error % | memplan command | memplan figure | setup |",
          "|---|---|---|---|---:|---:|---:|---|---|---|"]
    for r in rs:
        ratio = r.get("ratio", False)
        err = 100.0 * (r["memplan"] - r["published"]) / r["published"]
        md.append(f"| {r['source']} | {r['model']} | {r['config']} | {r['measured']} | {fmt(r['published'], ratio, r.get('unit'))} | "
                  f"{fmt(r['memplan'], ratio, r.get('unit'))} | {err:+.2f} | `{cell(r['command'])}` | {r['what']} | {r['setup']} |")
    return md


def cell(text):
    """A table cell: GitHub markdown ends a cell at any '|', even inside a code span, unless escaped."""
    return text.replace("|", "\\|")


def section(rs=None):
    rs = rows() + finetune_rows() if rs is None else rs
    general = [r for r in rs if "framework" not in r]
    frameworks = []
    for r in rs:
        if "framework" in r and r["framework"] not in frameworks:
            frameworks.append(r["framework"])
    md = ["## Published GPU figures by others", "",
          "Produced by `/usr/bin/python3 tests/accuracy/published_gpu.py --markdown` (each memplan figure is the "
          "command in its row). Published figures are quoted from the source, or computed from the source's formula "
          "with the zoo model's dimensions and PyTorch's parameter count. MiB unless the row is a ratio. Not gated: "
          "the setup column says where the published setup is not memplan's.", "",
          "Two kinds of row: formulas from papers and frameworks (ZeRO's 16 bytes per parameter, Korthikanti et al.'s "
          "activations per layer, without and with tensor and sequence parallelism (--tp, one GPU's figures), "
          "Megatron-LM's theoretical memory report at tp 2, 4 and 8), which check memplan's counting rules against an independent derivation, and measurements "
          "on a CUDA device: ColossalAI's, of torchvision models' parameters, and whole training steps whose model, "
          "batch, precision and optimizer are stated (a notebook's resnet50 and vit_b_16 on an RTX 4090, a trainer's "
          "Llama 3.1 8B full fine-tune on an H100), and, one table per framework below, fine-tuning runs with LoRA and "
          "QLoRA. Other sources considered and why they were left out are listed "
          "in bench/published_gpu_sources.md.", ""]
    md += table(general)
    md += ["", "### Fine-tuning runs, by framework", "",
           "Peaks of fine-tuning steps measured by others on a GPU, one table per framework that ran them "
           "(tests/accuracy/published_finetune.py). Each row's memplan command sets the options from the source's "
           "own code and configuration (or the --recipe that follows that framework), never from its figure, and "
           "compares the memplan figure that matches the published metric (allocated_bytes for "
           "max_memory_allocated, reserved_bytes for max_memory_reserved); the setup column says where memplan "
           "cannot express the source's setup."]
    for fw in frameworks:
        md += ["", f"#### {fw}", ""]
        md += table([r for r in rs if r.get("framework") == fw])
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
