#!/usr/bin/python3
"""The order of a config.json graph's parameters (onnx_import/hf_param_order.h) against transformers' own.

FSDP's flat parameter and DeepSpeed ZeRO's flat groups and partition boundaries follow model.parameters(), the order
in which each module's __init__ registers its submodules and parameters (a module's own parameters first, then its
children, recursively); memplan follows the graph's initializers. For a tiny config of each model_type, the
initializer names of memplan's --graph train (written by the hf_config_dump test tool) must equal, in order, the list
below, transcribed by hand from transformers' __init__ code (the independent source; commits as read):

  LlamaForCausalLM / LlamaModel / LlamaDecoderLayer / LlamaAttention / LlamaMLP (models/llama/modeling_llama.py,
  0022728): embed_tokens, layers, norm, then lm_head (a tied head is embed_tokens' tensor, listed once); a layer:
  self_attn (q_proj, k_proj, v_proj, o_proj; each Linear weight, then bias), mlp (gate_proj, up_proj, down_proj),
  input_layernorm, post_attention_layernorm. Mistral, Qwen2, Qwen3 the same; Qwen3Attention adds q_norm, k_norm
  after o_proj (as Qwen3MoeAttention, models/qwen3_moe/modeling_qwen3_moe.py, 00d4b3d).
  Gemma2DecoderLayer (gemma2, 006e869), Gemma3DecoderLayer (gemma3, 0018aa6): self_attn, mlp, input_layernorm,
  post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm; Gemma3Attention's q_norm, k_norm
  after o_proj. Phi3Attention (phi3, 00d4b3d): o_proj, then qkv_proj; Phi3MLP gate_up_proj, down_proj.
  MixtralDecoderLayer (mixtral, 00d4b3d): self_attn, block_sparse_moe (gate, experts: w1, w2, w3), norms.
  Qwen2MoeSparseMoeBlock (qwen2_moe, 00a3f93): gate, experts, shared_expert, shared_expert_gate; Qwen3MoeSparseMoeBlock
  gate, experts. DeepseekV3 (deepseek_v3, 00b676f): attention q_proj or q_a_proj, q_a_layernorm, q_b_proj, then
  kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; DeepseekV3MoE experts, gate (its weight, then the buffer
  e_score_correction_bias: the state dict's, and so torch.onnx's initializers', order), shared_experts.
  DeepseekV2 (deepseek_v2; transformers' modular_deepseek_v2.py, first release): DeepseekV2Attention registers as
  DeepseekV3Attention; DeepseekV2MoE experts, gate (DeepseekV2MoEGate: weight only), shared_experts.
  GptOssAttention (gpt_oss, 00d4b3d): sinks (its own parameter, before its children's), q/k/v/o with biases;
  GptOssMLP router (weight, bias), experts (gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias).

Needs HF_CONFIG_DUMP (set by ctest) and /usr/bin/python3 with onnx (and torch: the configs come from the other tests).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import hf_config_test  # noqa: E402
import hf_deepseek_test  # noqa: E402
import hf_deepseek_v2_test  # noqa: E402
import hf_gpt_oss_test  # noqa: E402
import hf_moe_test  # noqa: E402

DUMP = os.environ.get("HF_CONFIG_DUMP", os.path.join(ROOT, "build", "tests", "import", "hf_config_dump"))


def linear(prefix: str, bias: bool) -> list:
    return [f"{prefix}.weight"] + ([f"{prefix}.bias"] if bias else [])


def model(layers: list, tied: bool) -> list:
    return ["embed_tokens.weight", *[n for layer in layers for n in layer], "norm.weight"] + \
        ([] if tied else ["lm_head.weight"])


def norms(l: int, gemma: bool = False) -> list:
    names = [f"layers.{l}.input_layernorm.weight", f"layers.{l}.post_attention_layernorm.weight"]
    if gemma:
        names += [f"layers.{l}.pre_feedforward_layernorm.weight", f"layers.{l}.post_feedforward_layernorm.weight"]
    return names


def attention(l: int, bias: bool, o_bias: bool, qk_norm: bool = False) -> list:
    a = f"layers.{l}.self_attn"
    names = linear(f"{a}.q_proj", bias) + linear(f"{a}.k_proj", bias) + linear(f"{a}.v_proj", bias)
    names += linear(f"{a}.o_proj", o_bias)
    return names + ([f"{a}.q_norm.weight", f"{a}.k_norm.weight"] if qk_norm else [])


def mlp(prefix: str, bias: bool = False) -> list:
    return linear(f"{prefix}.gate_proj", bias) + linear(f"{prefix}.up_proj", bias) + linear(f"{prefix}.down_proj", bias)


def expected() -> dict:
    """name: (model_type, config.json, the parameter names in model.parameters() order)."""
    out = {}
    # llama: attention_bias (all four projections) and mlp_bias, untied head, 2 layers.
    c = hf_config_test.CONFIGS["llama_biases_head_dim"][1]
    out["llama_biases_head_dim"] = (hf_config_test.config_json("llama", c), model(
        [attention(l, True, True) + mlp(f"layers.{l}.mlp", True) + norms(l) for l in range(2)], tied=False))
    # qwen3: attention_bias, q_norm / k_norm after o_proj, tied head, 2 layers.
    c = hf_config_test.CONFIGS["qwen3_mha_bias_tied"][1]
    out["qwen3_mha_bias_tied"] = (hf_config_test.config_json("qwen3", c), model(
        [attention(l, True, True, qk_norm=True) + mlp(f"layers.{l}.mlp") + norms(l) for l in range(2)], tied=True))
    # qwen2: q/k/v biases, o_proj without, 2 layers, untied.
    c = hf_config_test.CONFIGS["qwen2_rep3"][1]
    out["qwen2_rep3"] = (hf_config_test.config_json("qwen2", c), model(
        [attention(l, True, False) + mlp(f"layers.{l}.mlp") + norms(l) for l in range(2)], tied=False))
    # gemma2: attention biases, four norms a layer, untied, 2 layers.
    c = hf_config_test.ARCH_CONFIGS["gemma2_mha_bias_untied"]
    out["gemma2_mha_bias_untied"] = (hf_config_test.arch_config_json("gemma2_mha_bias_untied", c), model(
        [attention(l, True, True) + mlp(f"layers.{l}.mlp") + norms(l, gemma=True) for l in range(2)], tied=False))
    # gemma3_text: q_norm / k_norm after o_proj, four norms, tied, 3 layers.
    c = hf_config_test.ARCH_CONFIGS["gemma3_mqa_layer_types"]
    out["gemma3_mqa_layer_types"] = (hf_config_test.arch_config_json("gemma3_mqa_layer_types", c), model(
        [attention(l, False, False, qk_norm=True) + mlp(f"layers.{l}.mlp") + norms(l, gemma=True) for l in range(3)],
        tied=True))
    # phi3: o_proj before qkv_proj, gate_up_proj before down_proj, tied, 2 layers.
    c = hf_config_test.ARCH_CONFIGS["phi3_mha_no_window"]
    out["phi3_mha_no_window"] = (hf_config_test.arch_config_json("phi3_mha_no_window", c), model(
        [[f"layers.{l}.self_attn.o_proj.weight", f"layers.{l}.self_attn.qkv_proj.weight",
          f"layers.{l}.mlp.gate_up_proj.weight", f"layers.{l}.mlp.down_proj.weight"] + norms(l) for l in range(2)],
        tied=True))
    # mixtral: 5 experts (w1, w2, w3 each), tied, 2 layers.
    c = hf_moe_test.CONFIGS["mixtral_k3_tied"]
    out["mixtral_k3_tied"] = (hf_moe_test.moe_config_json(c), model(
        [attention(l, False, False) + [f"layers.{l}.block_sparse_moe.gate.weight"] +
         [f"layers.{l}.block_sparse_moe.experts.{e}.{w}.weight" for e in range(5) for w in ("w1", "w2", "w3")] +
         norms(l) for l in range(2)], tied=True))
    # qwen2_moe: layer 0 dense (mlp_only_layers), layers 1 and 2 sparse with 4 experts and the shared expert.
    c = hf_moe_test.CONFIGS["qwen2_moe_shared_dense0"]
    sparse = lambda l: ([f"layers.{l}.mlp.gate.weight"] + [n for e in range(4) for n in mlp(f"layers.{l}.mlp.experts.{e}")]
                        + mlp(f"layers.{l}.mlp.shared_expert") + [f"layers.{l}.mlp.shared_expert_gate.weight"])
    out["qwen2_moe_shared_dense0"] = (hf_moe_test.moe_config_json(c), model(
        [attention(0, True, False) + mlp("layers.0.mlp") + norms(0)] +
        [attention(l, True, False) + sparse(l) + norms(l) for l in (1, 2)], tied=False))
    # qwen3_moe: q_norm / k_norm, 4 experts, untied, 2 layers.
    c = hf_moe_test.CONFIGS["qwen3_moe_gqa_head_dim"]
    out["qwen3_moe_gqa_head_dim"] = (hf_moe_test.moe_config_json(c), model(
        [attention(l, False, False, qk_norm=True) + [f"layers.{l}.mlp.gate.weight"] +
         [n for e in range(4) for n in mlp(f"layers.{l}.mlp.experts.{e}")] + norms(l) for l in range(2)], tied=False))
    # deepseek_v3 with q_lora_rank: layer 0 dense (first_k_dense_replace 1), layer 1 with 8 experts, one shared.
    c = hf_deepseek_test.CONFIGS["deepseek_lora_interleave"]
    mla = lambda l, q, bias: [f"layers.{l}.self_attn.{n}" for n in (
        (["q_proj.weight"] if q else ["q_a_proj.weight", *(["q_a_proj.bias"] if bias else []), "q_a_layernorm.weight",
                                      "q_b_proj.weight"]) +
        ["kv_a_proj_with_mqa.weight", *(["kv_a_proj_with_mqa.bias"] if bias else []), "kv_a_layernorm.weight",
         "kv_b_proj.weight", "o_proj.weight", *(["o_proj.bias"] if bias else [])])]
    moe = lambda l, experts: ([n for e in range(experts) for n in mlp(f"layers.{l}.mlp.experts.{e}")] +
                              [f"layers.{l}.mlp.gate.weight", f"layers.{l}.mlp.gate.e_score_correction_bias"] +
                              mlp(f"layers.{l}.mlp.shared_experts"))
    out["deepseek_lora_interleave"] = (hf_deepseek_test.config_json(c), model(
        [mla(0, False, False) + mlp("layers.0.mlp") + norms(0), mla(1, False, False) + moe(1, 8) + norms(1)],
        tied=False))
    # deepseek_v3 with q_proj (q_lora_rank null), attention_bias (kv_a_proj_with_mqa, o_proj), tied, every layer
    # sparse with 6 experts.
    c = hf_deepseek_test.CONFIGS["deepseek_qproj_yarn_bias_tied"]
    out["deepseek_qproj_yarn_bias_tied"] = (hf_deepseek_test.config_json(c), model(
        [mla(l, True, True) + moe(l, 6) + norms(l) for l in range(2)], tied=True))
    # deepseek_v2, V2-Lite-like: q_proj, layer 0 dense, layer 1 with 8 experts, two shared; DeepseekV2MoEGate has
    # its weight only.
    moe2 = lambda l, experts: ([n for e in range(experts) for n in mlp(f"layers.{l}.mlp.experts.{e}")] +
                               [f"layers.{l}.mlp.gate.weight"] + mlp(f"layers.{l}.mlp.shared_experts"))
    c = hf_deepseek_v2_test.CONFIGS["deepseek_v2_lite_greedy"]
    out["deepseek_v2_lite_greedy"] = (hf_deepseek_v2_test.config_json(c), model(
        [mla(0, True, False) + mlp("layers.0.mlp") + norms(0), mla(1, True, False) + moe2(1, 8) + norms(1)],
        tied=False))
    # deepseek_v2, V2-like: q_lora_rank, attention biases, tied, every layer sparse (8 experts in 4 groups).
    c = hf_deepseek_v2_test.CONFIGS["deepseek_v2_grouped_lora"]
    out["deepseek_v2_grouped_lora"] = (hf_deepseek_v2_test.config_json(c), model(
        [mla(l, False, True) + moe2(l, 8) + norms(l) for l in range(2)], tied=True))
    # gpt_oss: sinks first, q/k/v/o with biases, router, fused experts, 3 layers.
    c = hf_gpt_oss_test.CONFIGS["gpt_oss_mha_k3"]
    gpt = lambda l: ([f"layers.{l}.self_attn.sinks"] + attention(l, True, True) +
                     [f"layers.{l}.mlp.router.weight", f"layers.{l}.mlp.router.bias"] +
                     [f"layers.{l}.mlp.experts.{n}" for n in ("gate_up_proj", "gate_up_proj_bias", "down_proj",
                                                               "down_proj_bias")] + norms(l))
    out["gpt_oss_mha_k3"] = (hf_gpt_oss_test.config_json(c), model([gpt(l) for l in range(3)],
                                                                   tied=c.tie_word_embeddings))
    return out


def main() -> int:
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (config, names) in expected().items():
            config_path, out_path = os.path.join(tmp, f"{name}.json"), os.path.join(tmp, f"{name}.onnx")
            with open(config_path, "w") as f:
                json.dump(config, f, indent=2)
            subprocess.run([DUMP, config_path, "train", out_path], check=True)
            got = [t.name for t in onnx.load(out_path, load_external_data=False).graph.initializer]
            if got != names:
                first = next((i for i, (a, b) in enumerate(zip(got, names)) if a != b), min(len(got), len(names)))
                errors.append(f"{name} ({config['model_type']}): parameter {first} is "
                              f"{got[first] if first < len(got) else 'missing'} in memplan's graph, "
                              f"{names[first] if first < len(names) else 'none'} in transformers' order "
                              f"({len(got)} vs {len(names)} parameters)")
            print(f"{name} ({config['model_type']}): {len(names)} parameters, {'OK' if got == names else 'FAILED'}",
                  flush=True)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
