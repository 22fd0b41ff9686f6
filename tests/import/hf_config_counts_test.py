#!/usr/bin/python3
"""Parameter counts of real Hugging Face configs, exact against the published figures; their KV cache bytes per
token in `serve --graph decode`, against the hand count; the config reader's refusals (one message naming the
file and the key or value, exit 2, no crash).

tests/models/hf_configs/*.json are the configs as published on the Hugging Face Hub (huggingface.co/<id>/blob/main/
config.json, values copied by hand: memplan's tests never download). PUBLISHED is each model's parameter total
as the Hub publishes it for the model's safetensors weights (the "Model size" of the model page, exactly the
`safetensors.total` of https://huggingface.co/api/models/<id>, which is also `metadata.total_size` of
model.safetensors.index.json divided by 2 bytes per bfloat16 parameter). A hand count from the config's sizes
(embedding V·h; per layer q, k, v, o, q/k/v biases, gate/up/down, two norms, qwen3's q_norm and k_norm; final norm;
lm_head unless tied)
must give the same figure, so a mistyped config value is caught here rather than blamed on memplan. The mixtures of
experts (PUBLISHED_MOE) are published rounded: memplan's count must equal the hand count exactly, and both the
figure at its stated precision.

KV bytes per token and sequence in bf16: 2 (key and value) x layers x kv heads x head_dim x 2 B, the cache HF's
DynamicCache (and vLLM's paged cache) holds per token for these full-attention models.

Needs MEMPLAN_BIN (set by ctest).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIGS = os.path.join(ROOT, "tests", "models", "hf_configs")
MEMPLAN = os.environ.get("MEMPLAN_BIN", os.path.join(ROOT, "build", "memplan"))

PUBLISHED = {
    # https://huggingface.co/meta-llama/Llama-3.1-8B (safetensors total; index total_size 16,060,522,496 B)
    "Llama-3.1-8B": 8_030_261_248,
    # https://huggingface.co/meta-llama/Llama-3.1-70B (index total_size 141,107,412,992 B)
    "Llama-3.1-70B": 70_553_706_496,
    # https://huggingface.co/meta-llama/Llama-3.2-1B (tied head: the embedding is stored once)
    "Llama-3.2-1B": 1_235_814_400,
    # https://huggingface.co/meta-llama/Llama-3.2-3B (index total_size 6,425,499,648 B)
    "Llama-3.2-3B": 3_212_749_824,
    # https://huggingface.co/mistralai/Mistral-7B-v0.1 (index total_size 14,483,464,192 B)
    "Mistral-7B-v0.1": 7_241_732_096,
    # https://huggingface.co/Qwen/Qwen2.5-0.5B (model card: 0.49B, 0.36B non-embedding)
    "Qwen2.5-0.5B": 494_032_768,
    # https://huggingface.co/Qwen/Qwen2.5-1.5B (model card: 1.54B, 1.31B non-embedding)
    "Qwen2.5-1.5B": 1_543_714_304,
    # https://huggingface.co/Qwen/Qwen2.5-7B (index total_size 15,231,233,024 B; model card: 7.61B)
    "Qwen2.5-7B": 7_615_616_512,
    # https://huggingface.co/Qwen/Qwen2.5-72B-Instruct (model card: 72.7B, 70.0B non-embedding; 80 layers, 64 query and
    # 8 kv heads, q/k/v biases, an untied head)
    "Qwen2.5-72B-Instruct": 72_706_203_648,
    # https://huggingface.co/Qwen/Qwen3-8B (safetensors total; model card: 8.2B, 6.95B non-embedding, 36 layers,
    # 32 query and 8 kv heads): q_norm and k_norm add 2 x 128 per layer, no biases
    "Qwen3-8B": 8_190_735_360,
    # https://huggingface.co/google/gemma-2-2b (safetensors total; model card: 2.61B): tied head, four norms a layer
    "gemma-2-2b": 2_614_341_888,
    # https://huggingface.co/google/gemma-2-9b (safetensors total; model card: 9.24B)
    "gemma-2-9b": 9_241_705_984,
    # https://huggingface.co/google/gemma-2-27b (safetensors total; model card: 27.2B): head_dim 128 x 32 heads is
    # not hidden_size 4608
    "gemma-2-27b": 27_227_128_320,
    # https://huggingface.co/google/gemma-3-1b-pt (safetensors total; model card: 1B): q_norm and k_norm 2 x 256
    "gemma-3-1b-pt": 999_885_952,
    # https://huggingface.co/google/gemma-3-270m (safetensors total; model card: 270M, 170M of them embedding)
    "gemma-3-270m": 268_098_176,
    # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct (safetensors total; model card: 3.8B): fused qkv_proj
    # and gate_up_proj, untied head
    "Phi-3-mini-4k-instruct": 3_821_079_552,
    # https://huggingface.co/microsoft/Phi-3-medium-4k-instruct (safetensors total; model card: 14B): 10 kv heads
    "Phi-3-medium-4k-instruct": 13_960_238_080,
}

# Mixtures of experts: the published figures are rounded (model cards and papers state "46.7B"), so memplan's count is
# compared with its hand count exactly and with the figure at the figure's own precision (digits after the point).
# Each (total, non-embedding or None, digits, source). Non-embedding excludes the token embedding and the untied
# head. The cards' "activated" figures are not compared: their definitions differ (Qwen3-30B-A3B: 3.35B by hand with
# embedding and head, stated 3.3B).
PUBLISHED_MOE = {
    # https://mistral.ai/news/mixtral-of-experts/ (Mistral AI, 11 Dec 2023): "Mixtral has 46.7B total parameters but
    # only uses 12.9B parameters per token"; the paper (arXiv:2401.04088, section 2) rounds to 47B and 13B.
    "Mixtral-8x7B-v0.1": (46.7, None, 1, "mistral.ai/news/mixtral-of-experts"),
    # https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B (model card): "It has 14.3B parameters in total and 2.7B
    # activated parameters"; 60 routed experts of 1408, top-4, a shared expert of 5632 with its sigmoid gate.
    "Qwen1.5-MoE-A2.7B": (14.3, None, 1, "huggingface.co/Qwen/Qwen1.5-MoE-A2.7B"),
    # https://qwenlm.github.io/blog/qwen2/ (model table): Qwen2-57B-A14B, 57.41B parameters, 56.32B non-embedding.
    "Qwen2-57B-A14B": (57.41, 56.32, 2, "qwenlm.github.io/blog/qwen2"),
    # https://huggingface.co/Qwen/Qwen3-30B-A3B (model card): "Number of Parameters: 30.5B in total and 3.3B
    # activated; Number of Paramaters (Non-Embedding): 29.9B"; 128 experts of 768, top-8, no shared expert.
    "Qwen3-30B-A3B": (30.5, 29.9, 1, "huggingface.co/Qwen/Qwen3-30B-A3B"),
    # https://huggingface.co/Qwen/Qwen3-235B-A22B (model card): "235B in total and 22B activated", 234B non-embedding.
    "Qwen3-235B-A22B": (235, 234, 0, "huggingface.co/Qwen/Qwen3-235B-A22B"),
}

# Mixtures of experts: their decode graphs are 128 experts x 48 to 94 layers, which eager serve's search would
# estimate many times; their KV bytes are checked by serve --engine vllm's one profile step.
MOE = ("mixtral", "qwen2_moe", "qwen3_moe")
# Hybrid: a window on some layers (Gemma 2 even layers, Gemma 3 five of six), below the position limit.
HYBRID = ("gemma2", "gemma3_text")
# Architectures whose published configs put a window on every layer below the position limit: eager decode refused
# (transformers' cache keeps the last window - 1 tokens), vLLM's SlidingWindowSpec on every layer.
ALL_SLIDING = ("mistral", "phi3")


def hand_count(c: dict) -> int:
    h, f, layers, heads = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"]
    hd = c.get("head_dim", h // heads)
    kv = c.get("num_key_value_heads", heads) * hd
    q = heads * hd
    gemma = c["model_type"] in ("gemma2", "gemma3_text")
    layer = h * q + 2 * h * kv + q * h + 3 * h * f + (4 if gemma else 2) * h  # Gemma: four norms a layer
    if c["model_type"] == "gemma3_text":
        layer += 2 * hd  # Gemma3Attention: q_norm and k_norm over head_dim
    if gemma and c.get("attention_bias"):
        layer += q + 2 * kv + h  # Gemma2Attention: every projection's bias
    if c["model_type"] == "qwen2":
        layer += q + 2 * kv  # Qwen2Attention: q/k/v biases
    if c["model_type"] == "qwen3":
        layer += 2 * hd  # Qwen3Attention: q_norm and k_norm over head_dim
        layer += (q + 2 * kv + h) if c.get("attention_bias") else 0  # every projection's bias
    head = 0 if c.get("tie_word_embeddings", gemma) else c["vocab_size"] * h  # Gemma2Config defaults to tied
    return c["vocab_size"] * h + layers * layer + h + head


def moe_hand_count(c: dict) -> int:
    """hand_count with each sparse layer's MLP replaced by the router h·E, E experts of 3·h·f_e (Mixtral: f_e is
    intermediate_size) and Qwen2-MoE's shared expert 3·h·f_s with its gate h (MixtralSparseMoeBlock,
    Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock); a layer is sparse unless in mlp_only_layers or
    (l + 1) % decoder_sparse_step != 0."""
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    mixtral = c["model_type"] == "mixtral"
    experts = c["num_local_experts"] if mixtral else c["num_experts"]
    f_e = c["intermediate_size"] if mixtral else c["moe_intermediate_size"]
    sparse_mlp = h * experts + experts * 3 * h * f_e
    if c["model_type"] == "qwen2_moe":
        sparse_mlp += 3 * h * c["shared_expert_intermediate_size"] + h
    step, dense_only = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers") or []
    sparse = sum(1 for l in range(layers) if l not in dense_only and (l + 1) % step == 0)
    dense = dict(c, model_type={"mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3"}[c["model_type"]])
    return hand_count(dense) + sparse * (sparse_mlp - 3 * h * c["intermediate_size"])


def check_moe_counts() -> list:
    errors = []
    for name, (total, non_embedding, digits, source) in PUBLISHED_MOE.items():
        path = os.path.join(CONFIGS, f"{name}.json")
        with open(path) as f:
            config = json.load(f)
        hand = moe_hand_count(config)
        embedding = config["vocab_size"] * config["hidden_size"] * (1 if config.get("tie_word_embeddings") else 2)
        if round(hand / 1e9, digits) != total or (
                non_embedding is not None and round((hand - embedding) / 1e9, digits) != non_embedding):
            errors.append(f"{name}: the hand count from the config is {hand:,}; {source} states {total}B "
                          f"({non_embedding}B non-embedding)")
        out = memplan("inspect", path, "--graph", "train", "--batch", "1", "--dim", "seq=1", "--json")
        if out.returncode != 0:
            errors.append(f"{name}: memplan inspect exit {out.returncode}: {out.stderr}")
            continue
        count = json.loads(out.stdout)["parameters"]["count"]
        print(f"{name}: memplan {count:,}, by hand {hand:,}, published {total}B ({source})", flush=True)
        if count != hand or round(count / 1e9, digits) != total:
            errors.append(f"{name}: memplan counts {count:,} parameters, by hand {hand:,}, published {total}B")
    return errors


# gpt-oss (tests/models/hf_configs/gpt-oss-20b.json and gpt-oss-120b.json: https://huggingface.co/openai/gpt-oss-20b
# and https://huggingface.co/openai/gpt-oss-120b, config.json as published, MXFP4 experts). OpenAI's model card
# (arXiv:2508.10925, "gpt-oss-120b & gpt-oss-20b Model Card", Table 1): 20.9B total / 3.6B active, 116.8B / 5.1B; the
# active count takes each layer's attention, router, k = 4 experts and norms, and the unembedding (not the embedding).
PUBLISHED_GPT_OSS = {"gpt-oss-20b": (20.9, 3.6), "gpt-oss-120b": (116.8, 5.1)}


def gpt_oss_hand_count(c: dict) -> tuple:
    """(total, active) from the config: per layer q h·(n·hd) + n·hd, k and v h·(kv·hd) + kv·hd each, o (n·hd)·h + h,
    sinks n (GptOssAttention); router E·h + E (GptOssTopKRouter); experts E·(h·2I + 2I + I·h + h) (GptOssExperts);
    two norms 2h; embedding and head V·h each, final norm h."""
    h, hd, n, kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    e, i, k, v = c["num_local_experts"], c["intermediate_size"], c["num_experts_per_tok"], c["vocab_size"]
    attention = h * n * hd + n * hd + 2 * (h * kv * hd + kv * hd) + n * hd * h + h + n
    expert = h * 2 * i + 2 * i + i * h + h
    layers = c["num_hidden_layers"]
    total = layers * (attention + e * h + e + e * expert + 2 * h) + 2 * v * h + h
    active = layers * (attention + e * h + e + k * expert + 2 * h) + v * h
    return total, active


def check_gpt_oss() -> list:
    """gpt-oss: the parameter counts (memplan's on the config without its quantization_config, the bf16 model
    transformers' Mxfp4Config(dequantize=True) loads) against the hand count and the model card; serve --engine vllm on
    an H100 at 32k: KV bytes per token layers x 2 x 8 kv heads x 64 x 2 B (20b 49,152, 120b 73,728), half the layers
    windowed at 128 tokens (vLLM's hybrid groups), and the MXFP4 experts as vLLM 0.12's Triton backend holds them, a
    layer: E·2I·H / 2 + E·H·I / 2 blocks (I a multiple of 64: I_pad = I; triton_kernels' HopperMXValueLayout pads the rows to
    16 and the packed bytes to 32, which 2I, H, H / 2 and I / 2 are), E·2I·H / 32 + E·H·I / 32 scales as loaded (vLLM
    keeps the scale parameters) and again swizzled in HopperMXScaleLayout, num_warps 8, the rows padded to 256 and the
    scales to 2: E·r256(2I)·(H / 32) + E·r256(H)·(I / 32) (H / 32, I / 32 = 90, even), E·(2I + H)·4 float32 biases —
    20b 24 x 449,925,120 = 10,798,202,880 B, 120b 36 x 1,799,700,480 = 64,789,217,280 B."""
    errors = []
    for name, (total, active) in PUBLISHED_GPT_OSS.items():
        path = os.path.join(CONFIGS, f"{name}.json")
        with open(path) as f:
            c = json.load(f)
        hand, hand_active = gpt_oss_hand_count(c)
        if round(hand / 1e9, 1) != total or round(hand_active / 1e9, 1) != active:
            errors.append(f"{name}: by hand {hand:,} total, {hand_active:,} active; the model card {total}B / {active}B")
        with tempfile.TemporaryDirectory() as tmp:
            bf16 = os.path.join(tmp, f"{name}.json")
            with open(bf16, "w") as f:
                json.dump({key: value for key, value in c.items() if key != "quantization_config"}, f)
            out = memplan("inspect", bf16, "--graph", "train", "--batch", "1", "--dim", "seq=1", "--json")
        if out.returncode != 0:
            errors.append(f"{name}: memplan inspect exit {out.returncode}: {out.stderr}")
            continue
        count = json.loads(out.stdout)["parameters"]["count"]
        # --engine-version 0.12: the first release that ships triton_kernels, so the Triton backend is vLLM's own
        # choice on the H100 (Marlin before it: cost_models/mxfp4_experts.h).
        out = memplan("serve", path, "--engine", "vllm", "--graph", "decode", "--gpu", "H100-80GB", "--context", "32768",
                      "--engine-version", "0.12", "--json")
        # Exit 1 is an answer (docs/exit-codes.md): gpt-oss-120b's 32,768-token request does not fit beside its 64 GiB
        # of weights at gpu_memory_utilization 0.9; the JSON is printed either way.
        if out.returncode not in (0, 1):
            errors.append(f"{name}: serve --engine vllm exit {out.returncode}: {out.stderr}")
            continue
        j = json.loads(out.stdout)
        layers, e, h, i = c["num_hidden_layers"], c["num_local_experts"], c["hidden_size"], c["intermediate_size"]
        kv = layers * 2 * c["num_key_value_heads"] * c["head_dim"] * 2
        r256 = lambda n: -(-n // 256) * 256  # noqa: E731
        mxfp4 = layers * (e * 2 * i * h // 2 + e * h * i // 2 + (e * 2 * i * h // 32 + e * h * i // 32)
                          + (e * r256(2 * i) * (h // 32) + e * r256(h) * (i // 32)) + e * (2 * i + h) * 4)
        groups = [{"attention": "sliding_window", "sliding_window": 128, "layers": layers // 2, "bytes_per_token": kv // 2,
                   "vllm_groups": 1},
                  {"attention": "full", "sliding_window": None, "layers": layers // 2, "bytes_per_token": kv // 2,
                   "vllm_groups": 1}]
        moe = j["replaced"].get("fused_moe") or {}
        print(f"{name}: memplan {count:,} parameters, by hand {hand:,} ({hand_active:,} active), card {total}B / "
              f"{active}B; vLLM KV {j['kv_cache']['bytes_per_token']:,} B per token (by hand {kv:,}), MXFP4 experts "
              f"{moe.get('expert_weight_bytes')} B (by hand {mxfp4:,})", flush=True)
        if (count != hand or j["kv_cache"]["bytes_per_token"] != kv or j["kv_cache"]["layer_groups"] != groups
                or moe.get("expert_weight_bytes") != mxfp4 or moe.get("sparse_layers") != layers):
            errors.append(f"{name}: count {count:,}, serve {j['kv_cache']}, {moe}")
    return errors


def memplan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MEMPLAN, *args], capture_output=True, text=True, timeout=600)


def check_counts() -> list:
    errors = []
    for name, published in PUBLISHED.items():
        path = os.path.join(CONFIGS, f"{name}.json")
        with open(path) as f:
            config = json.load(f)
        if hand_count(config) != published:
            errors.append(f"{name}: the hand count from the config is {hand_count(config):,}, published {published:,}")
        out = memplan("inspect", path, "--graph", "train", "--batch", "1", "--dim", "seq=1", "--json")
        if out.returncode != 0:
            errors.append(f"{name}: memplan inspect exit {out.returncode}: {out.stderr}")
            continue
        count = json.loads(out.stdout)["parameters"]["count"]
        print(f"{name}: memplan {count:,}, published {published:,}", flush=True)
        if count != published:
            errors.append(f"{name}: memplan counts {count:,} parameters, published {published:,}")
    return errors


def check_moe_serve(name: str, path: str, c: dict, expected: int) -> list:
    """serve --engine vllm on a published mixture of experts, 8 H200s' worth (--memory 1128GiB, vLLM's default step
    of 8192 tokens: Qwen3-235B-A22B's 470 GB of bf16 weights fit): the KV bytes per token by hand, and every sparse
    layer's experts by vLLM's FusedMoE: w13 [E, 2·I, H] and w2 [E, H, I] in bf16, 3·E·H·I·2 B a layer
    (cost_models/vllm_fused_moe.h); the fused kernel named among the replacements."""
    out = memplan("serve", path, "--engine", "vllm", "--graph", "decode", "--memory", "1128GiB", "--context", "1024",
                  "--json")
    if out.returncode != 0:
        return [f"{name}: serve --engine vllm exit {out.returncode}: {out.stderr}"]
    j = json.loads(out.stdout)
    mixtral = c["model_type"] == "mixtral"
    experts = c["num_local_experts"] if mixtral else c["num_experts"]
    width = c["intermediate_size"] if mixtral else c["moe_intermediate_size"]
    dense = c.get("mlp_only_layers") or []
    step = c.get("decoder_sparse_step", 1)
    sparse = sum(1 for l in range(c["num_hidden_layers"]) if l not in dense and (l + 1) % step == 0)
    moe = j["replaced"].get("fused_moe") or {}
    by_hand = sparse * 3 * experts * c["hidden_size"] * width * 2
    print(f"{name}: vLLM KV {j['kv_cache']['bytes_per_token']:,} B per token, experts {moe.get('expert_weight_bytes')}"
          f" B, by hand {expected:,} and {by_hand:,}", flush=True)
    if (j["kv_cache"]["bytes_per_token"] != expected or moe.get("expert_weight_bytes") != by_hand
            or moe.get("sparse_layers") != sparse or moe.get("experts") != experts):
        return [f"{name}: serve --engine vllm: KV {j['kv_cache']['bytes_per_token']}, fused_moe {moe}"]
    return []


def check_kv_bytes() -> list:
    errors = []
    for name in [*PUBLISHED, *PUBLISHED_MOE]:
        path = os.path.join(CONFIGS, f"{name}.json")
        with open(path) as f:
            c = json.load(f)
        hd = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
        expected = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * hd * 2
        if c["model_type"] in MOE:
            errors += check_moe_serve(name, path, c, expected)
            continue
        out = memplan("serve", path, "--engine", "eager", "--graph", "decode", "--memory", "400GiB", "--context", "1024", "--dtype", "bf16",
                      "--json")
        if c["model_type"] in HYBRID:
            errors += check_hybrid(name, path, c, out, expected)
            continue
        if c["model_type"] in ALL_SLIDING:
            # Mistral-7B-v0.1's window of 4096 < 32768 positions, Phi-3's 2047 < 4096: eager refuses (transformers'
            # cache keeps the last window - 1 tokens, which memplan's decoder does not build), one line, naming
            # vLLM's engine instead.
            w, positions = c["sliding_window"], c["max_position_embeddings"]
            if (out.returncode != 2 or f'"sliding_window" is {w}' not in out.stderr or out.stderr.count("\n") != 1
                    or "serve --engine vllm sizes it" not in out.stderr):
                errors.append(f"{name}: eager decode with a sliding window: exit {out.returncode}, {out.stderr!r}")
            # vLLM sizes it: every layer a SlidingWindowSpec of the config's window, the cache's bytes per token as
            # full attention's, and one request of max_model_len (the config's max_position_embeddings) with steps
            # of 8192 tokens (vLLM's default on an H100) holds at most
            # cdiv(min(window - 1 + 8192, max_model_len), 16) + 1 blocks (kv_cache_interface.py
            # max_memory_usage_bytes): Mistral-7B-v0.1 769, Phi-3 257.
            out = memplan("serve", path, "--engine", "vllm", "--graph", "decode", "--gpu", "H100-80GB", "--json")
            if out.returncode != 0:
                errors.append(f"{name}: serve --engine vllm exit {out.returncode}: {out.stderr}")
                continue
            j = json.loads(out.stdout)
            per_request = -(-min(w - 1 + 8192, positions) // 16) + 1
            groups = [{"attention": "sliding_window", "sliding_window": w, "layers": c["num_hidden_layers"],
                       "bytes_per_token": expected, "vllm_groups": 1}]
            print(f"{name}: vLLM KV {j['kv_cache']['bytes_per_token']:,} B per token, "
                  f"{j['kv_cache']['blocks_per_request']} blocks a request, by hand {expected:,} and {per_request}")
            if (j["kv_cache"]["bytes_per_token"] != expected or j["kv_cache"]["layer_groups"] != groups
                    or j["kv_cache"]["blocks_per_request"] != per_request
                    or per_request != {"mistral": 769, "phi3": 257}[c["model_type"]]
                    or j["max_concurrency"] != j["num_gpu_blocks"] / per_request):
                errors.append(f"{name}: serve --engine vllm's window: {j['kv_cache']}, {j['max_concurrency']}")
            continue
        if out.returncode != 0:
            errors.append(f"{name}: memplan serve exit {out.returncode}: {out.stderr}")
            continue
        got = json.loads(out.stdout)["kv_cache_bytes_per_token"]
        print(f"{name}: KV cache {got:,} B per token, by hand {expected:,}", flush=True)
        if got != expected:
            errors.append(f"{name}: memplan serve says {got:,} KV bytes per token, by hand {expected:,}")
    return errors


def check_hybrid(name: str, path: str, c: dict, eager, expected: int) -> list:
    """Gemma: eager decode refused for its window; vLLM's hybrid groups by hand (kv_cache_utils.py
    _get_kv_cache_groups_uniform_page_size at 0.18.1: group_size the fewest layers of a kind, or the most when
    below 1.5 times the fewest; cdiv(n, group_size) groups a kind): Gemma 2's even layers slide (Gemma2DecoderLayer),
    Gemma 3's by layer_types or the pattern; every attention block and the head replaced by vLLM's kernels."""
    errors = []
    w, positions, layers = c["sliding_window"], c["max_position_embeddings"], c["num_hidden_layers"]
    if eager.returncode != 2 or f'"sliding_window" is {w}' not in eager.stderr or "serve --engine vllm sizes it" \
            not in eager.stderr:
        errors.append(f"{name}: eager decode with a sliding window: exit {eager.returncode}, {eager.stderr!r}")
    out = memplan("serve", path, "--engine", "vllm", "--graph", "decode", "--gpu", "H100-80GB", "--engine-version",
                  "0.18.1", "--json")
    if out.returncode != 0:
        return errors + [f"{name}: serve --engine vllm exit {out.returncode}: {out.stderr}"]
    j = json.loads(out.stdout)
    if c["model_type"] == "gemma2":
        sliding = [l % 2 == 0 for l in range(layers)]
    elif c.get("layer_types"):
        sliding = [t == "sliding_attention" for t in c["layer_types"]]
    else:
        pattern = c.get("sliding_window_pattern", 6)
        sliding = [(l + 1) % pattern != 0 for l in range(layers)]
    n_s, n_f = sum(sliding), layers - sum(sliding)
    size = max(n_s, n_f) if 2 * max(n_s, n_f) < 3 * min(n_s, n_f) else min(n_s, n_f)
    g_s, g_f = -(-n_s // size), -(-n_f // size)
    per_layer = expected // layers
    per_request = g_s * (-(-min(w - 1 + 8192, positions) // 16) + 1) + g_f * -(-positions // 16)
    kv = j["kv_cache"]
    want = {"layer_groups": [{"attention": "sliding_window", "sliding_window": w, "layers": n_s,
                              "bytes_per_token": per_layer * n_s, "vllm_groups": g_s},
                             {"attention": "full", "sliding_window": None, "layers": n_f,
                              "bytes_per_token": per_layer * n_f, "vllm_groups": g_f}],
            "blocks_per_request": per_request, "group_size": size, "padding_layers": (g_s + g_f) * size - layers}
    got = {k: kv.get(k) for k in want}
    blocks = j["memory"]["available_kv_cache_bytes"] // (16 * per_layer * size)
    print(f"{name}: vLLM groups {g_s} + {g_f} of {size}, {per_request} blocks a request, by hand", flush=True)
    if got != want or j["num_gpu_blocks"] != blocks or j["gpu_kv_cache_tokens"] != blocks // (g_s + g_f) * 16 \
            or j["max_concurrency"] != blocks / per_request or j["replaced"]["attention_kernels"] != layers \
            or j["replaced"]["lm_head"] is None:
        errors.append(f"{name}: serve --engine vllm's hybrid groups: {got} vs {want}, {j['num_gpu_blocks']}")
    return errors


def check_position_cap() -> list:
    """A config states its maximum position: serve's longest sequence stops there (Llama-3.2-1B: 131,072 tokens,
    max_position_embeddings of its config, which 400 GiB would exceed by far: 65,536 B of fp32 KV per token), and a
    --context above it is refused as vLLM refuses such a max_model_len."""
    errors = []
    path = os.path.join(CONFIGS, "Llama-3.2-1B.json")
    out = memplan("serve", path, "--engine", "eager", "--graph", "decode", "--memory", "400GiB", "--context", "4096", "--json")
    j = json.loads(out.stdout) if out.returncode == 0 else {}
    if j.get("max_position_cap") != 131072 or j.get("max_context_single_sequence") != 131072:
        errors.append(f"serve Llama-3.2-1B: exit {out.returncode}, cap {j.get('max_position_cap')}, longest "
                      f"{j.get('max_context_single_sequence')}; expected 131072 and 131072 ({out.stderr})")
    out = memplan("serve", path, "--engine", "eager", "--graph", "decode", "--memory", "400GiB", "--context", "131073")
    if out.returncode != 2 or "max_position_embeddings" not in out.stderr:
        errors.append(f"serve --context 131073 on Llama-3.2-1B: exit {out.returncode}, {out.stderr!r}")
    return errors


BASE = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 128}

GEMMA2 = {**BASE, "model_type": "gemma2", "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
          "query_pre_attn_scalar": 16, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
          "sliding_window": 64}
GEMMA3 = {**GEMMA2, "model_type": "gemma3_text", "attn_logit_softcapping": None, "final_logit_softcapping": None}
PHI3 = {**BASE, "model_type": "phi3", "hidden_act": "silu", "sliding_window": 64}
MIXTRAL = {**BASE, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
QWEN2_MOE = {**BASE, "model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
             "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64}
QWEN3_MOE = {**BASE, "model_type": "qwen3_moe", "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
             "moe_intermediate_size": 32}
GPT_OSS = {**BASE, "model_type": "gpt_oss", "head_dim": 16, "attention_bias": True, "rope_theta": 150000.0,
           "num_local_experts": 4, "num_experts_per_tok": 2, "experts_per_token": 2, "sliding_window": 8,
           "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0}

# (what is wrong, the config's text, words the one message must hold)
REFUSED = [
    ("malformed JSON", '{"model_type": "llama", "hidden_size": 64', ["not valid JSON"]),
    ("a number past a double", '{"model_type": "llama", "hidden_size": 1E99999}', ["not valid JSON", "number overflow"]),
    ("not an object", "[1, 2]", ["one JSON object"]),
    ("unknown model_type", json.dumps({**BASE, "model_type": "gpt_neox"}), ['model_type "gpt_neox"']),
    ("a Gemma key on llama", json.dumps({**BASE, "query_pre_attn_scalar": 16}), ['"query_pre_attn_scalar"']),
    ("missing key", json.dumps({k: v for k, v in BASE.items() if k != "vocab_size"}), ['"vocab_size" is missing']),
    ("unsupported key (MoE)", json.dumps({**BASE, "num_local_experts": 8}), ['"num_local_experts"']),
    ("quantized weights", json.dumps({**BASE, "quantization_config": {"bits": 4}}), ['"quantization_config"']),
    ("another activation", json.dumps({**BASE, "hidden_act": "gelu"}), ['"hidden_act"', '"gelu"']),
    ("attention dropout", json.dumps({**BASE, "attention_dropout": 0.1}), ['"attention_dropout"']),
    ("negative size", json.dumps({**BASE, "hidden_size": -64}), ['"hidden_size"', "-64"]),
    ("huge size", json.dumps({**BASE, "vocab_size": 1 << 62}), ['"vocab_size"']),
    ("too many layers", json.dumps({**BASE, "num_hidden_layers": 100000}), ['"num_hidden_layers"']),
    ("string size", json.dumps({**BASE, "hidden_size": "64"}), ['"hidden_size"', "integer"]),
    ("heads not a multiple of kv heads", json.dumps({**BASE, "num_key_value_heads": 3}), ["num_key_value_heads 3"]),
    ("qwen2 with attention_bias", json.dumps({**BASE, "model_type": "qwen2", "attention_bias": True}),
     ['"attention_bias"']),
    ("qwen3 without head_dim", json.dumps({**BASE, "model_type": "qwen3"}), ['"head_dim" is missing']),
    ("qwen3 with mlp_bias", json.dumps({**BASE, "model_type": "qwen3", "head_dim": 16, "mlp_bias": True}),
     ['"mlp_bias"']),
    ("gemma2 without query_pre_attn_scalar", json.dumps({k: v for k, v in GEMMA2.items() if k != "query_pre_attn_scalar"}),
     ['"query_pre_attn_scalar" is missing']),
    ("gemma2 without head_dim", json.dumps({k: v for k, v in GEMMA2.items() if k != "head_dim"}), ['"head_dim" is missing']),
    ("gemma2 with exact gelu", json.dumps({**GEMMA2, "hidden_activation": "gelu"}), ['"hidden_activation"', '"gelu"']),
    ("gemma2 with rope scaling", json.dumps({**GEMMA2, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
     ['"rope_scaling"']),
    ("gemma3 with yarn", json.dumps({**GEMMA3, "rope_scaling": {"rope_type": "yarn", "factor": 8.0}}),
     ['"rope_scaling"', "linear"]),
    ("gemma3 bidirectional", json.dumps({**GEMMA3, "use_bidirectional_attention": True}),
     ['"use_bidirectional_attention"']),
    ("gemma3 layer_types too short", json.dumps({**GEMMA3, "layer_types": ["sliding_attention"]}), ['"layer_types"']),
    ("gemma3 unknown layer type", json.dumps({**GEMMA3, "layer_types": ["sliding_attention", "chunked_attention"]}),
     ['"layer_types"', '"chunked_attention"']),
    ("phi3 longrope", json.dumps({**PHI3, "rope_scaling": {"type": "longrope", "long_factor": [1.0]}}),
     ['"rope_scaling"']),
    ("phi3 residual dropout", json.dumps({**PHI3, "resid_pdrop": 0.1}), ['"resid_pdrop"']),
    ("phi3 odd rotary dims", json.dumps({**PHI3, "partial_rotary_factor": 0.3125}), ['"partial_rotary_factor"']),
    ("phi3 attention_bias", json.dumps({**PHI3, "attention_bias": True}), ['"attention_bias"']),
    ("mixtral without experts", json.dumps({k: v for k, v in MIXTRAL.items() if k != "num_local_experts"}),
     ['"num_local_experts" is missing']),
    ("mixtral load-balancing loss", json.dumps({**MIXTRAL, "output_router_logits": True}), ['"output_router_logits"']),
    ("mixtral router jitter", json.dumps({**MIXTRAL, "router_jitter_noise": 0.01}), ['"router_jitter_noise"']),
    ("mixtral with a qwen2_moe key", json.dumps({**MIXTRAL, "moe_intermediate_size": 32}),
     ['"moe_intermediate_size" is not supported for model_type "mixtral"']),
    ("DeepSeek's shared experts on mixtral", json.dumps({**MIXTRAL, "n_shared_experts": 1}), ['"n_shared_experts"']),
    ("more experts per token than experts", json.dumps({**MIXTRAL, "num_experts_per_tok": 5}),
     ['"num_experts_per_tok" is 5']),
    ("huge expert count", json.dumps({**MIXTRAL, "num_local_experts": 1 << 40}), ['"num_local_experts"']),
    ("too many expert blocks", json.dumps({**MIXTRAL, "num_hidden_layers": 100, "num_local_experts": 4096}),
     ["expert blocks"]),
    ("qwen2_moe without its shared expert", json.dumps({k: v for k, v in QWEN2_MOE.items()
                                                         if k != "shared_expert_intermediate_size"}),
     ['"shared_expert_intermediate_size" is missing']),
    ("qwen2_moe mlp_only_layers out of range", json.dumps({**QWEN2_MOE, "mlp_only_layers": [2]}),
     ['"mlp_only_layers" holds 2']),
    ("qwen3_moe decoder_sparse_step 0", json.dumps({**QWEN3_MOE, "decoder_sparse_step": 0}),
     ['"decoder_sparse_step"']),
    ("qwen3_moe with a shared expert", json.dumps({**QWEN3_MOE, "shared_expert_intermediate_size": 64}),
     ['"shared_expert_intermediate_size" is not supported for model_type "qwen3_moe"']),
    # gpt_oss (onnx_import/hf_gpt_oss.cc): malformed or unmodelled configs, one message each.
    ("gpt_oss layer_types too short", json.dumps({**GPT_OSS, "layer_types": ["sliding_attention"]}),
     ['"layer_types" must list num_hidden_layers (2)']),
    ("gpt_oss layer_types unknown", json.dumps({**GPT_OSS, "layer_types": ["sliding_attention", "chunked_attention"]}),
     ['"layer_types" holds "chunked_attention"']),
    ("gpt_oss without biases", json.dumps({**GPT_OSS, "attention_bias": False}), ['"attention_bias" must be true']),
    ("gpt_oss another rope", json.dumps({**GPT_OSS, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
     ['"rope_scaling"', "rope_type yarn"]),
    ("gpt_oss yarn's attention_factor", json.dumps({**GPT_OSS, "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                                                                               "attention_factor": 1.2}}),
     ['rope_scaling key "attention_factor"']),
    ("gpt_oss experts_per_token differs", json.dumps({**GPT_OSS, "experts_per_token": 3}),
     ['"experts_per_token" and "num_experts_per_tok" differ']),
    ("gpt_oss more picks than experts", json.dumps({**GPT_OSS, "num_experts_per_tok": 5, "experts_per_token": 5}),
     ['"num_experts_per_tok" is 5, more than the 4 experts']),
    ("gpt_oss without sliding_window", json.dumps({k: v for k, v in GPT_OSS.items() if k != "sliding_window"}),
     ['"sliding_window" is missing']),
    ("gpt_oss router logits", json.dumps({**GPT_OSS, "output_router_logits": True}), ['"output_router_logits"']),
    ("gpt_oss a mixtral key", json.dumps({**GPT_OSS, "router_jitter_noise": 0.0}),
     ['"router_jitter_noise" is not supported for model_type "gpt_oss"']),
    ("gpt_oss mxfp4 outside serve", json.dumps({**GPT_OSS, "quantization_config": {"quant_method": "mxfp4"}}),
     ['"quantization_config" (mxfp4)', "Mxfp4Config(dequantize=True)"]),
]


def check_moe_routing() -> list:
    """--moe-routing: refused on an ONNX file, on a config without experts and for an unknown rule (one message,
    exit 2); on a mixture of experts both rules answer."""
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        dense, moe = os.path.join(tmp, "dense.json"), os.path.join(tmp, "mixtral.json")
        for path, config in ((dense, BASE), (moe, MIXTRAL)):
            with open(path, "w") as f:
                json.dump(config, f)
        onnx_file = os.path.join(ROOT, "tests", "models", "gpt_tiny.onnx")
        for model, routing, words in [
                (onnx_file, "worst", "--moe-routing chooses how a config.json's experts are routed"),
                (dense, "worst", 'model_type "llama" has no experts'),
                (moe, "busiest", "busiest")]:
            out = memplan("estimate", model, *(["--graph", "train"] if model != onnx_file else []),
                          "--moe-routing", routing)
            lines = out.stderr.strip().splitlines()
            if out.returncode != 2 or len(lines) != 1 or words not in lines[0]:
                errors.append(f"--moe-routing {routing} on {model}: exit {out.returncode}, {out.stderr!r}")
        for routing in ("balanced", "worst"):
            out = memplan("estimate", moe, "--graph", "train", "--batch", "1", "--dim", "seq=8", "--moe-routing", routing)
            if out.returncode != 0:
                errors.append(f"--moe-routing {routing}: exit {out.returncode}, {out.stderr!r}")
    return errors


def check_refusals() -> list:
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for what, text, words in REFUSED:
            path = os.path.join(tmp, "config.json")
            with open(path, "w") as f:
                f.write(text)
            out = memplan("estimate", path, "--graph", "train")
            lines = out.stderr.strip().splitlines()
            if out.returncode != 2 or len(lines) != 1 or not lines[0].startswith(f"memplan: error: {path}: ") or \
                    not all(w in lines[0] for w in words):
                errors.append(f"{what}: exit {out.returncode}, stderr {out.stderr!r}; expected one message with {words}")
        path = os.path.join(tmp, "gpt_oss.json")  # the valid small gpt_oss: train built, decode refused for its window
        with open(path, "w") as f:
            json.dump(GPT_OSS, f)
        train, decode = memplan("estimate", path, "--graph", "train", "--batch", "1", "--dim", "seq=8"), \
            memplan("estimate", path, "--graph", "decode")
        if train.returncode != 0 or decode.returncode != 2 or '"sliding_window" is 8' not in decode.stderr:
            errors.append(f"gpt_oss: train exit {train.returncode} ({train.stderr!r}), decode exit "
                          f"{decode.returncode} ({decode.stderr!r})")
        for base in (MIXTRAL, QWEN2_MOE, QWEN3_MOE):  # the valid small configs above: train, decode, prefill built
            path = os.path.join(tmp, f"{base['model_type']}.json")
            with open(path, "w") as f:
                json.dump(base, f)
            train, decode = memplan("estimate", path, "--graph", "train", "--batch", "1", "--dim", "seq=8"), \
                memplan("estimate", path, "--graph", "decode", "--dim", "batch_size=1", "--dim", "sequence_length=1",
                        "--dim", "past_sequence_length=8", "--dim", "total_sequence_length=9")
            if train.returncode != 0 or decode.returncode != 0:
                errors.append(f"{base['model_type']}: train exit {train.returncode} ({train.stderr!r}), decode exit "
                              f"{decode.returncode} ({decode.stderr!r})")
        # Gemma's and Phi-3's windows (64 < 128 positions): train built, decode refused for the window (not the
        # model_type); Phi-3's built without one.
        for base in (GEMMA2, GEMMA3, PHI3):
            path = os.path.join(tmp, f"{base['model_type']}.json")
            with open(path, "w") as f:
                json.dump(base, f)
            train, decode = memplan("estimate", path, "--graph", "train", "--batch", "1", "--dim", "seq=8"), \
                memplan("estimate", path, "--graph", "decode")
            if train.returncode != 0 or decode.returncode != 2 or '"sliding_window" is 64' not in decode.stderr:
                errors.append(f"{base['model_type']}: train exit {train.returncode} ({train.stderr!r}), decode exit "
                              f"{decode.returncode} ({decode.stderr!r})")
        path = os.path.join(tmp, "phi3.json")
        with open(path, "w") as f:
            json.dump({**PHI3, "sliding_window": None}, f)
        decode = memplan("estimate", path, "--graph", "decode", "--batch", "1", "--dim", "sequence_length=1",
                         "--dim", "past_sequence_length=8", "--dim", "total_sequence_length=9")
        if decode.returncode != 0:
            errors.append(f"phi3 without a window: decode exit {decode.returncode} ({decode.stderr!r})")
        path = os.path.join(tmp, "ok.json")
        with open(path, "w") as f:
            json.dump(BASE, f)
        for args, words in [([], ["--graph train|decode|prefill"]), (["--graph", "serve"], ["expected one of"])]:
            out = memplan("estimate", path, *args)
            if out.returncode != 2 or not all(w in out.stderr for w in words):
                errors.append(f"{args}: exit {out.returncode}, stderr {out.stderr!r}")
        big = os.path.join(tmp, "big.json")
        with open(big, "w") as f:
            f.write(" " * (17 << 20))  # over the 16 MiB a config is read up to: refused before it is read
        folder = os.path.join(tmp, "folder.json")
        os.mkdir(folder)
        for path, words in [(big, "at most 16 MiB"), (folder, "is not a file"), (os.path.join(tmp, "none.json"),
                                                                                  "cannot open")]:
            out = memplan("estimate", path, "--graph", "train")
            if out.returncode != 2 or words not in out.stderr or len(out.stderr.strip().splitlines()) != 1:
                errors.append(f"{path}: exit {out.returncode}, stderr {out.stderr!r}")
        out = memplan("estimate", os.path.join(ROOT, "tests", "models", "llama_tiny_train.onnx"), "--graph", "train")
        if out.returncode != 2 or "an ONNX file is one graph" not in out.stderr:
            errors.append(f"--graph on an ONNX file: exit {out.returncode}, stderr {out.stderr!r}")
    return errors


def check_tied_head_held_once() -> list:
    # A tied config's decode graph is constant-folded as torch.onnx.export folds it: the head reads a transposed
    # copy of the embedding (onnx::MatMul_N). The config states the tie, so memplan records it and holds the head
    # once under the default --tied-embeddings auto. Before, auto counted the copy: Qwen2.5-0.5B in bf16 was
    # 151,936 x 896 x 2 = 272,269,312 B heavier than what PyTorch (or vLLM) holds, 1.26e9 B instead of 0.99e9.
    # By hand: the published 494,032,768 parameters x 2 B, whatever --tied-embeddings says (the tie is proven).
    errors = []
    path = os.path.join(CONFIGS, "Qwen2.5-0.5B.json")
    weights = {}
    for tied in ("auto", "shape", "no"):
        out = memplan("serve", path, "--engine", "eager", "--graph", "decode", "--memory", "24GiB", "--context", "64",
                      "--dtype", "bf16", "--tied-embeddings", tied, "--json")
        if out.returncode != 0:
            return [f"serve Qwen2.5-0.5B --tied-embeddings {tied}: exit {out.returncode}: {out.stderr}"]
        weights[tied] = json.loads(out.stdout)["weights_bytes"]
    if not weights["auto"] == weights["shape"] == weights["no"]:  # a recorded tie is a proof, as one initializer is
        errors.append(f"Qwen2.5-0.5B decode weights by --tied-embeddings: {weights}")
    if not 494032768 * 2 <= weights["auto"] < 494032768 * 2 + 4096:  # and the rotary inv_freq buffer
        errors.append(f"Qwen2.5-0.5B decode weights {weights['auto']:,}, by hand 988,065,536 B and a few buffers")
    # The exported file keeps the tie (its metadata): the same weights from it.
    with tempfile.TemporaryDirectory() as d:
        onnx_path = os.path.join(d, "q.onnx")
        out = memplan("export", path, "--graph", "decode", "-o", onnx_path)
        if out.returncode != 0:
            return errors + [f"export: {out.stderr}"]
        out = memplan("serve", onnx_path, "--engine", "eager", "--memory", "24GiB", "--context", "64", "--dtype",
                      "bf16", "--json")
        if out.returncode != 0 or json.loads(out.stdout)["weights_bytes"] != weights["auto"]:
            errors.append(f"serve on the exported Qwen2.5-0.5B: exit {out.returncode}, {out.stdout[:200]}{out.stderr}")
    return errors


# deepseek-ai/DeepSeek-V3 (tests/models/hf_configs/DeepSeek-V3.json, https://huggingface.co/deepseek-ai/DeepSeek-V3/
# blob/main/config.json): "671B total parameters with 37B activated for each token" (github.com/deepseek-ai/DeepSeek-V3
# README.md); README_WEIGHTS.md: the Hub's 685B are 671B of the main model and 14B of the multi-token-prediction
# module (model.layers.61, num_nextn_predict_layers 1), which transformers does not build
# (DeepseekV3Model._keys_to_ignore_on_load_unexpected drops model.layers.61.*).
DEEPSEEK_V3_TOTAL = 671


def deepseek_hand_count(c: dict) -> int:
    """Embedding and head 2·V·h; per layer the attention (q_a h·r_q, q_a_layernorm r_q, q_b r_q·H·(nope + rope), or
    q_proj h·H·(nope + rope) when q_lora_rank is null; kv_a_proj_with_mqa h·(r_kv + rope), kv_a_layernorm r_kv,
    kv_b r_kv·H·(nope + v), o H·v·h), two norms 2h, and the MLP: the first first_k_dense_replace layers 3·h·I, the
    others the router E·h and (deepseek_v3's DeepseekV3TopkRouter only) its e_score_correction_bias E (stored in the
    checkpoint), E experts of 3·h·I_e and the shared experts 3·h·I_e·n_shared; final norm h."""
    h, heads, nope, rope, v = (c["hidden_size"], c["num_attention_heads"], c["qk_nope_head_dim"],
                               c["qk_rope_head_dim"], c["v_head_dim"])
    rq, rkv, e, ie = c["q_lora_rank"], c["kv_lora_rank"], c["n_routed_experts"], c["moe_intermediate_size"]
    q = h * heads * (nope + rope) if rq is None else h * rq + rq + rq * heads * (nope + rope)
    attention = q + h * (rkv + rope) + rkv + rkv * heads * (nope + v) + heads * v * h
    bias = e if c["model_type"] == "deepseek_v3" else 0
    dense = attention + 2 * h + 3 * h * c["intermediate_size"]
    sparse = attention + 2 * h + e * h + bias + e * 3 * h * ie + 3 * h * ie * c["n_shared_experts"]
    first, layers = c["first_k_dense_replace"], c["num_hidden_layers"]
    return 2 * c["vocab_size"] * h + first * dense + (layers - first) * sparse + h


def check_deepseek() -> list:
    """DeepSeek-V3: the parameter count (memplan's train graph of the config without its quantization_config, the
    fp8 checkpoint's parameters being the bf16 model's; the published file itself is refused there: its block-wise
    fp8 is sized by serve --engine vllm and sglang only, tests/cli/test_serve_fp8_block.py and
    test_serve_sglang_deepseek_fp8.py) against the hand count and the
    published 671B. serve --engine vllm's latent cache, 61 x (512 + 64) x 2 B = 70,272 B a token in bf16 where
    transformers' cache holds 61 x 128 x (192 + 128) x 2 B = 4,997,120 B, is tests/cli/test_serve_mla.py's (DeepSeekV3)."""
    errors = []
    path = os.path.join(CONFIGS, "DeepSeek-V3.json")
    with open(path) as f:
        c = json.load(f)
    hand = deepseek_hand_count(c)
    if hand != 671_026_419_200 or round(hand / 1e9) != DEEPSEEK_V3_TOTAL:
        errors.append(f"DeepSeek-V3: the hand count from the config is {hand:,}, published {DEEPSEEK_V3_TOTAL}B")
    out = memplan("inspect", path, "--graph", "train", "--batch", "1", "--dim", "seq=1", "--json")
    if out.returncode != 2 or "serve --engine vllm and sglang only" not in out.stderr or out.stderr.count("\n") != 1:
        errors.append(f"DeepSeek-V3 with its fp8 block quantization_config: exit {out.returncode}, {out.stderr!r}")
    with tempfile.TemporaryDirectory() as tmp:
        bf16 = os.path.join(tmp, "DeepSeek-V3-bf16.json")
        with open(bf16, "w") as f:
            json.dump({k: v for k, v in c.items() if k != "quantization_config"}, f)
        out = subprocess.run([MEMPLAN, "inspect", bf16, "--graph", "train", "--batch", "1", "--dim", "seq=1",
                              "--json"], capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            return errors + [f"DeepSeek-V3: memplan inspect exit {out.returncode}: {out.stderr}"]
        count = json.loads(out.stdout)["parameters"]["count"]
        print(f"DeepSeek-V3: memplan {count:,}, by hand {hand:,}, published {DEEPSEEK_V3_TOTAL}B", flush=True)
        if count != hand:
            errors.append(f"DeepSeek-V3: memplan counts {count:,} parameters, by hand {hand:,}")
    return errors


# deepseek-ai/DeepSeek-V2-Lite and DeepSeek-V2 (tests/models/hf_configs/DeepSeek-V2-Lite.json, DeepSeek-V2.json; the
# Hub's config.json files, https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json and
# .../DeepSeek-V2/blob/main/config.json): 15.7B parameters in total (2.4B activated a token) for DeepSeek-V2-Lite and
# 236B (21B activated) for DeepSeek-V2, as their model cards (README.md) and arXiv 2405.04434 state them. By hand
# (deepseek_hand_count):
#   V2-Lite: h 2048, 16 heads, q_proj 2048 x 16 x 192 = 6,291,456, kv_a 2048 x 576 = 1,179,648, kv_a_layernorm 512,
#     kv_b 512 x 16 x 256 = 2,097,152, o 2048 x 2048 = 4,194,304: attention 13,763,072, + norms 4,096 = 13,767,168
#     a layer; layer 0 dense 3 x 2048 x 10944 = 67,239,936; layers 1..26 the router 64 x 2048 = 131,072, 64 experts
#     x 3 x 2048 x 1408 = 553,648,128, shared 3 x 2048 x 2816 = 17,301,504 (571,080,704); embedding and head
#     2 x 102400 x 2048 = 419,430,400, final norm 2,048: 419,432,448 + 27 x 13,767,168 + 67,239,936
#     + 26 x 571,080,704 = 15,706,484,224 (15.7B).
#   V2: h 5120, 128 heads, q_a 5120 x 1536 = 7,864,320, q_a_layernorm 1,536, q_b 1536 x 128 x 192 = 37,748,736,
#     kv_a 5120 x 576 = 2,949,120, 512, kv_b 512 x 128 x 256 = 16,777,216, o 16,384 x 5120 = 83,886,080: attention
#     149,227,520, + norms 10,240 = 149,237,760 a layer; layer 0 dense 3 x 5120 x 12288 = 188,743,680; layers 1..59
#     the router 160 x 5120 = 819,200, 160 experts x 3 x 5120 x 1536 = 3,774,873,600, shared 3 x 5120 x 3072 =
#     47,185,920 (3,822,878,720); embedding and head 2 x 102400 x 5120 = 1,048,576,000, final norm 5,120:
#     1,048,581,120 + 60 x 149,237,760 + 188,743,680 + 59 x 3,822,878,720 = 235,741,434,880 (236B).
DEEPSEEK_V2 = {"DeepSeek-V2-Lite.json": (15_706_484_224, 15.7), "DeepSeek-V2.json": (235_741_434_880, 236)}


def check_deepseek_v2() -> list:
    """DeepSeek-V2-Lite and DeepSeek-V2: memplan's train graph's parameter count against the hand count above and the
    published totals. serve --engine vllm's latent cache is tests/cli/test_serve_mla.py's (DeepSeekV2Lite)."""
    errors = []
    for name, (by_hand, published) in DEEPSEEK_V2.items():
        with open(os.path.join(CONFIGS, name)) as f:
            c = json.load(f)
        hand = deepseek_hand_count(c)
        digits = 1 if published != int(published) else 0
        if hand != by_hand or round(hand / 1e9, digits) != published:
            errors.append(f"{name}: the hand count from the config is {hand:,}, published {published}B")
        out = subprocess.run([MEMPLAN, "inspect", os.path.join(CONFIGS, name), "--graph", "train", "--batch", "1",
                              "--dim", "seq=1", "--json"], capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            errors.append(f"{name}: memplan inspect exit {out.returncode}: {out.stderr}")
            continue
        count = json.loads(out.stdout)["parameters"]["count"]
        print(f"{name}: memplan {count:,}, by hand {hand:,}, published {published}B", flush=True)
        if count != hand:
            errors.append(f"{name}: memplan counts {count:,} parameters, by hand {hand:,}")
    return errors


def main() -> int:
    # --published: every real config at full size (counts and KV bytes: 21 graphs, three of them 128-expert MoE of
    # 250,000 nodes); the rest: the reader's rules and refusals on small or single configs. ctest runs them as two
    # tests so that the sanitizer pass, where a full-size MoE graph takes minutes, runs only the second.
    if sys.argv[1:] == ["--published"]:
        errors = (check_counts() + check_moe_counts() + check_kv_bytes() + check_deepseek() + check_deepseek_v2() +
                  check_gpt_oss())
    elif sys.argv[1:]:
        print("usage: hf_config_counts_test.py [--published]", file=sys.stderr)
        return 2
    else:
        errors = check_moe_routing() + check_position_cap() + check_refusals() + check_tied_head_held_once()
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
