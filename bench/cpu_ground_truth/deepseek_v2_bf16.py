#!/usr/bin/python3
"""A tiny DeepSeek-V2 (tests/models/hf_deepseek_v2.py, the eager expert loop) stored in bfloat16
(model.to(torch.bfloat16): --precision bf16), one training step on the CPU, against memplan on the config.json written
beside this script (deepseek_v2_tiny.json; tests/import/hf_deepseek_v2_test.py checks, for its configs, that memplan
builds the twin's graph node for node); the measurements go to deepseek_v2_bf16_truth.json, which
tests/accuracy/accuracy.py gates at 1 %.

    /usr/bin/python3 bench/cpu_ground_truth/deepseek_v2_bf16.py [--memplan build/memplan]

What bfloat16 shows that float32 cannot: DeepseekV2MoEGate (transformers' modular_deepseek_v2.py, first release) views
the block's tokens itself and computes F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
.softmax(dim=-1, dtype=torch.float32): float32 copies of the tokens and of the gate's weight, float32 logits, scores,
group mask and top-k weights; each expert's output times its float32 weight is float32 until the cast back. In float32
those casts are no-ops. The causal mask is made in the model's type (transformers builds it in the inputs' dtype).
The rotary runs as transformers' apply_rotary_emb does in bfloat16 (modeling_deepseek_v2.py at 0233e509): a float32
copy of q_pe and k_pe (xq.float()) rotated by float32 tables (DeepseekV2RotaryEmbedding.forward computes freqs_cis
with autocast off and does not cast it to x's type) and cast back (.type_as(xq)); hf_deepseek_v2.py's complex_rotary
leaves the two casts out (x.float() would be a Cast in its export, type_as none), so this script wraps it with them.
memplan does not model that float32 island; measured, it moves this peak by about 2 KB (0.04 %). The norms, the
attention's softmax and the loss run in bfloat16 as the plain-PyTorch model writes them (memplan without --upcast).
Protocol and memplan's flags: grouped_mm_deepseek.py's
(measure.py's warm-up step, set-to-none zero_grad, one profiled step with cross-entropy and SGD momentum foreach;
memplan --runtime ideal --torch 1.13, resident + live bytes at the peak, the batch included), with --precision bf16.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "import"))
import measure  # noqa: E402  (puts tests/models on sys.path)
import zoo  # noqa: E402
import hf_deepseek_v2  # noqa: E402
import hf_deepseek_v2_test  # noqa: E402
import llama  # noqa: E402

# DeepSeek-V2's shape in small: q_lora_rank, group_limited_greedy (8 experts in 4 groups, 2 kept, top-2),
# routed_scaling_factor 16 as DeepSeek-V2's, two shared experts, one dense layer first.
CFG = hf_deepseek_v2.DeepseekV2Config(
    llama.LlamaConfig("deepseek_v2_tiny", "made up", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, vocab_size=256, rope_theta=10000.0,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, head_dim_override=16),
    q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16, n_routed_experts=8,
    num_experts_per_tok=2, moe_intermediate_size=64, n_shared_experts=2, first_k_dense_replace=1, n_group=4,
    topk_group=2, norm_topk_prob=False, routed_scaling_factor=16.0, rope_interleave=False,
    topk_method="group_limited_greedy")
CONFIG = os.path.join(HERE, "deepseek_v2_tiny.json")
OUT = os.path.join(HERE, "deepseek_v2_bf16_truth.json")


def as_transformers(module_dtype):
    """llama.causal_additive_mask cast to the model's type, and complex_rotary on a float32 copy cast back
    (module docstring)."""
    mask, rotary = llama.causal_additive_mask, hf_deepseek_v2.complex_rotary
    llama.causal_additive_mask = lambda *a, **k: mask(*a, **k).to(module_dtype)
    hf_deepseek_v2.complex_rotary = lambda x, *a: rotary(x.float(), *a).type_as(x)


def forward(m, inputs, use_checkpoint, **_):
    return m(inputs[0])


def measured_peak(batch: int, seq: int) -> dict:
    torch.manual_seed(zoo.SEED)
    module = hf_deepseek_v2.DeepseekV2(CFG)
    zoo.fill_distinct(module)
    module = module.train().to(torch.bfloat16)
    optimizer = measure.make_optimizer("momentum", list(module.parameters()))
    gen = torch.Generator().manual_seed(zoo.SEED + 2)
    inputs = llama.make_inputs(CFG.base, batch, seq, zoo.SEED)
    targets = torch.randint(0, CFG.base.vocab_size, (batch, seq), generator=gen)
    m = measure.profile_steady_step(
        module, optimizer, list(inputs) + [targets],
        lambda: measure.training_step(module, inputs, targets, optimizer, forward, False, "cross-entropy"))
    return {"model": "deepseek_v2_tiny", "onnx": os.path.relpath(CONFIG, ROOT), "batch": batch, "seq": seq,
            "precision": "bf16", "experts_implementation": "eager", "optimizer": "momentum",
            "optimizer_settings": measure.describe_optimizer(optimizer), "loss": "cross-entropy", "checkpoint": [], **m}


def memplan_peak(binary: str, batch: int, seq: int) -> int:
    return measure.memplan_training_peak(binary, CONFIG, batch, seq, "--precision", "bf16", "--optimizer", "momentum",
                                         "--optimizer-impl", "foreach-torch1", "--experts-implementation", "eager")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    with open(CONFIG, "w") as f:  # the file memplan reads, written from the same config
        json.dump(hf_deepseek_v2_test.config_json(CFG), f, indent=2)
        f.write("\n")
    as_transformers(torch.bfloat16)
    measure.measure_batches(OUT, "bench/cpu_ground_truth/deepseek_v2_bf16.py", 64, lambda batch: measured_peak(batch, 64),
                            lambda batch: memplan_peak(a.memplan, batch, 64))


if __name__ == "__main__":
    main()
