"""`memplan serve --engine vllm` on fp8 mixtures of experts that were refused before: per-tensor fp8 experts
(quantization_config without weight_block_size, as AutoFP8 writes it, or --quantization fp8 on a bfloat16 config) and
block-wise fp8 on mixtral and qwen2_moe, whose routers vLLM builds with quant_config=None (mixtral.py at f0e2695,
MixtralMoE.__init__; qwen2_moe.py at 8bbabf0, Qwen2MoeSparseMoeBlock.__init__, whose shared_expert_gate is a
torch.nn.Linear). Numbers by hand from vLLM's fp8.py at 1436674 (Fp8MoEMethod.create_weights and
process_weights_after_loading, Fp8LinearMethod) and fused_moe.py at 13cb3e4 (fused_experts_impl); each case compares
the checkpoint with the same config without its quantization_config, so every other weights term cancels.

Tiny mixtral (hidden 256, 2 heads and 2 KV heads of 128, one sparse layer of 4 experts of 256, top-2, vocab 256),
per-tensor fp8, tp 1 (vllm_weights.h: a linear module is out x in fp8 bytes + one float32 weight scale after
requantize-to-max, + one float32 input scale when static):
  qkv_proj out 256 + 256 + 256 = 768, in 256: 196,608 + 4 (+ 4 static); o_proj 256 x 256: 65,536 + 4 (+ 4);
  the router stays bfloat16 (MixtralMoE's gate: quant_config=None).
  experts: w13 [4, 512, 256] + w2 [4, 256, 256] fp8 = 4 x 3 x 256 x 256 = 786,432 B; w13_weight_scale [4, 2] becomes
  max_w13_scales [4] (16 B) and w2_weight_scale [4] (16 B); static: w13_input_scale and w2_input_scale [4] become
  their max, one float each (8 B). Static: 196,616 + 65,544 + 786,472 = 1,048,632 B quantized; dynamic: 196,612 +
  65,540 + 786,464 = 1,048,616. The bf16 graph's (196,608 + 65,536 + 786,432) x 2 = 2,097,152: 1,048,520 B less
  (static), 1,048,536 (dynamic).
  The kernel at 64 tokens (M 64, k 2): BLOCK_SIZE_M stays get_default_config's unquantized 64 (M > E); scaled_fp8_quant
  of the chunk fp8 [64, 256] = 16,384 and of intermediate_cache2 fp8 [128, 256] = 32,768: 49,152 B static (the layer's
  input scales), + a float32 [1] scale for each when dynamic: 49,160.
tp 2 (1 head a rank, I_p 128): qkv out 384, in 256: 98,304 + 8; o_proj in 128: 32,768 + 8; experts 4 x 3 x 128 x 256
  = 393,216 + 40: 524,344 B quantized (static) for the graph's (98,304 + 32,768 + 393,216) x 2 = 1,048,576: 524,232
  less. Quantized activations: 16,384 + 128 x 128 = 32,768.
tp 2 with --enable-expert-parallel (the MoE's tp_size 1, 2 whole experts a rank): 2 x 3 x 256 x 256 = 393,216 fp8 B
  and scales [2] + [2] floats + the 2 static scalars = 24 B, plus the expert map int32 [4] (16 B): weights 40 - 24 - 16
  = 0 B apart from tensor parallelism's; the activations at I 256: 16,384 + 32,768 = 49,152.
Block-wise [128, 128] on the same mixtral, tp 1: qkv 196,608 + 6 x 2 x 4 = 196,656; o_proj 65,536 + 2 x 2 x 4 =
  65,552; experts 786,432 + 4 x (2 x 2 x 2 + 2 x 2) x 4 = 192: 1,048,832 B quantized, 1,048,320 less; the router
  bf16. Quantized activations 64 x 256 + 64 x 2 x 4 = 16,896 and 128 x 256 + 128 x 2 x 4 = 33,792: 50,688.
Tiny qwen2_moe (hidden 256, 2 + 2 + 2 heads of 128 with qkv biases, one sparse layer of 4 experts of 128, top-2, a
  shared expert of 256 and its sigmoid gate), block-wise [128, 128], tp 1: qkv 196,656; o_proj 65,552; the shared
  expert's gate_up (one merged module on the block's input) out 512, in 256: 131,072 + 4 x 2 x 4 = 131,104; its down
  out 256, in 256: 65,552; experts 4 x 3 x 128 x 256 = 393,216 + 4 x (2 x 1 x 2 + 2 x 1) x 4 = 96. The router [4, 256]
  and the shared_expert_gate [1, 256] stay bf16. 852,176 B quantized for the graph's (196,608 + 65,536 + 131,072 +
  65,536 + 393,216) x 2 = 1,703,936: 851,760 less. Activations 16,896 + 128 x 128 + 128 x 1 x 4 = 16,896: 33,792.
Tiny qwen3_moe (the same attention, 4 experts of 128, no shared expert), per-tensor dynamic: the router is a
  ReplicatedLinear given the quant_config (qwen3_moe.py at 2e0831b): 1,024 + 4; qkv 196,612, o_proj 65,540, experts
  393,216 + 32: 656,428 B quantized for 656,384 x 2 = 1,312,768: 656,340 less.
"""
import json
import os
import tempfile
import unittest

import jsonschema

from tiny_serve import SRC, VLLM, TinyConfigCase, run, write_config

STATIC = {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}
DYNAMIC = {"quant_method": "fp8", "activation_scheme": "dynamic"}
BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def mixtral_config(directory, **overrides):
    config = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 256,
              "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu", "num_local_experts": 4,
              "num_experts_per_tok": 2, "output_router_logits": False, "router_aux_loss_coef": 0.02,
              "sliding_window": None}
    return write_config(directory, config, **overrides)


def qwen2_moe_config(directory, **overrides):
    config = {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 256,
              "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu", "num_experts": 4,
              "num_experts_per_tok": 2, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 256,
              "norm_topk_prob": False, "decoder_sparse_step": 1, "output_router_logits": False,
              "router_aux_loss_coef": 0.001, "use_sliding_window": False}
    return write_config(directory, config, **overrides)


def qwen3_moe_config(directory, **overrides):
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 256,
              "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "head_dim": 128, "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
              "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "norm_topk_prob": True,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
              "router_aux_loss_coef": 0.001, "attention_bias": False}
    return write_config(directory, config, **overrides)


class Fp8MoeCase(TinyConfigCase):
    def with_quantization(self, quantization, *extra):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", type(self).make_config(d, quantization_config=quantization), *VLLM, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def refused(self, words, quantization, *extra):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", type(self).make_config(d, quantization_config=quantization), *VLLM, *extra)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(words, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def check_schema(self, j):
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as s:
            jsonschema.validate(j, json.load(s))


class MixtralPerTensorByHand(Fp8MoeCase):
    make_config = staticmethod(mixtral_config)

    def test_static_and_dynamic_at_tp1(self):
        bf16 = self.vllm()
        for quantization, quantized, less, scales, activations in ((STATIC, 1048632, 1048520, 40, 49152),
                                                                   (DYNAMIC, 1048616, 1048536, 32, 49160)):
            fp8 = self.with_quantization(quantization)
            scheme = quantization["activation_scheme"]
            self.assertEqual(fp8["memory"]["quantized_linear_bytes"], quantized, scheme)
            self.assertEqual(bf16["memory"]["weights_bytes"] - fp8["memory"]["weights_bytes"], less, scheme)
            f = fp8["replaced"]["fp8_per_tensor"]
            self.assertNotIn("fp8_block", fp8["replaced"])
            self.assertEqual(f["activation_scheme"], scheme)
            self.assertEqual((f["expert_fp8_bytes"], f["expert_scale_bytes"], f["graph_expert_bytes"]),
                             (786432, scales, 1572864), scheme)
            self.assertEqual(f["routers_unquantized"], 1)
            self.assertEqual(f["moe_quantized_activation_bytes"], activations, scheme)
            moe = fp8["replaced"]["fused_moe"]
            self.assertEqual(moe["block_size_m"], 64)
            self.assertEqual(moe["expert_weight_bytes"], 786432 + scales)
            # The unquantized kernel's buffers plus the quantized activations, on the same router step.
            self.assertEqual(moe["peak_allocated_bytes"],
                             bf16["replaced"]["fused_moe"]["peak_allocated_bytes"] + activations, scheme)
            self.check_schema(fp8)

    def test_tp2_and_expert_parallel(self):
        bf16 = self.vllm("--tp", "2")
        tp = self.with_quantization(STATIC, "--tp", "2")
        self.assertEqual(tp["memory"]["quantized_linear_bytes"], 524344)
        self.assertEqual(bf16["memory"]["weights_bytes"] - tp["memory"]["weights_bytes"], 524232)
        self.assertEqual(tp["replaced"]["fp8_per_tensor"]["moe_quantized_activation_bytes"], 32768)
        ep = self.with_quantization(STATIC, "--tp", "2", "--enable-expert-parallel")
        f = ep["replaced"]["fp8_per_tensor"]
        self.assertEqual((f["expert_fp8_bytes"], f["expert_scale_bytes"], f["graph_expert_bytes"]), (393216, 24, 786432))
        self.assertEqual(ep["replaced"]["fused_moe"]["local_experts"], 2)
        self.assertEqual(ep["replaced"]["fused_moe"]["expert_map_bytes"], 16)
        self.assertEqual(ep["memory"]["weights_bytes"], tp["memory"]["weights_bytes"])
        self.assertEqual(f["moe_quantized_activation_bytes"], 49152)

    def test_quantization_flag_on_the_bf16_config(self):
        # --quantization fp8 on a bfloat16 checkpoint: Fp8MoEMethod quantizes the experts at load (empty_like fp8
        # tensors replace the loaded ones, w13_weight_scale re-made [E]), no input scales: the dynamic numbers.
        j = self.vllm("--quantization", "fp8")
        self.assertEqual(j["memory"]["quantized_linear_bytes"], 1048616)
        self.assertEqual(j["replaced"]["fp8_per_tensor"]["expert_scale_bytes"], 32)

    def test_router_listed_the_autofp8_way_and_refusals(self):
        # AutoFP8's Mixtral example ignores "re:.*gate": the routers, block_sparse_moe.gate, beside lm_head. The
        # router is unquantized anyway: nothing changes.
        listed = {**STATIC, "ignored_layers": ["lm_head", "model.layers.0.block_sparse_moe.gate"]}
        self.assertEqual(self.with_quantization(listed)["memory"]["quantized_linear_bytes"], 1048632)
        self.refused("layers left unquantized", {**STATIC, "ignored_layers": ["model.layers.0.self_attn.o_proj"]})
        # ROCm (MI300X, 9.4): fnuz rescale and AITER layouts not sized.
        with tempfile.TemporaryDirectory() as d:
            budget = VLLM.index("--memory")
            p = run("serve", mixtral_config(d, quantization_config=STATIC), *VLLM[:budget], *VLLM[budget + 2:],
                    "--gpu", "MI300X")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("ROCm", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        # Below 8.9 vLLM runs FP8 Marlin: refused as for any fp8 checkpoint.
        self.refused("FP8 Marlin", STATIC, "--arch", "sm80")

    def test_text_output(self):
        with tempfile.TemporaryDirectory() as d:
            args = [a for a in VLLM if a != "--json"]
            p = run("serve", mixtral_config(d, quantization_config=STATIC), *args)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("per-tensor fp8 (static activations)", p.stdout)


class MixtralBlockByHand(Fp8MoeCase):
    make_config = staticmethod(mixtral_config)

    def test_block_wise_at_tp1(self):
        bf16 = self.vllm()
        fp8 = self.with_quantization(BLOCK)
        self.assertEqual(fp8["memory"]["quantized_linear_bytes"], 1048832)
        self.assertEqual(bf16["memory"]["weights_bytes"] - fp8["memory"]["weights_bytes"], 1048320)
        f = fp8["replaced"]["fp8_block"]
        self.assertEqual((f["expert_fp8_bytes"], f["expert_scale_bytes"]), (786432, 192))
        self.assertEqual(f["routers_unquantized"], 1)
        self.assertEqual(f["moe_quantized_activation_bytes"], 50688)
        self.check_schema(fp8)


class Qwen2MoeBlockByHand(Fp8MoeCase):
    make_config = staticmethod(qwen2_moe_config)

    def test_block_wise_at_tp1(self):
        bf16 = self.vllm()
        fp8 = self.with_quantization(BLOCK)
        self.assertEqual(fp8["memory"]["quantized_linear_bytes"], 852176)
        self.assertEqual(bf16["memory"]["weights_bytes"] - fp8["memory"]["weights_bytes"], 851760)
        f = fp8["replaced"]["fp8_block"]
        self.assertEqual((f["expert_fp8_bytes"], f["expert_scale_bytes"]), (393216, 96))
        self.assertEqual(f["routers_unquantized"], 1)
        self.assertEqual(f["moe_quantized_activation_bytes"], 33792)
        self.check_schema(fp8)


class Qwen3MoePerTensorByHand(Fp8MoeCase):
    make_config = staticmethod(qwen3_moe_config)

    def test_the_router_is_quantized(self):
        bf16 = self.vllm()
        fp8 = self.with_quantization(DYNAMIC)
        self.assertEqual(fp8["memory"]["quantized_linear_bytes"], 656428)
        self.assertEqual(bf16["memory"]["weights_bytes"] - fp8["memory"]["weights_bytes"], 656340)
        self.assertEqual(fp8["replaced"]["fp8_per_tensor"]["routers_unquantized"], 0)


class Published(unittest.TestCase):
    """Full-size configs. Mixtral-8x7B (tests/models/hf_configs/Mixtral-8x7B-v0.1.json) with the quantization_config
    AutoFP8 writes for its Mixtral example (neuralmagic/AutoFP8 examples/example_mixtral.py: activation_scheme static,
    ignore_patterns "re:.*lm_head" and "re:.*gate"; auto_fp8/quantize.py save_quantized_model: quant_method fp8,
    activation_scheme, ignored_layers), as neuralmagic's Mixtral-8x7B-Instruct-v0.1-FP8 was made; Qwen1.5-MoE-A2.7B
    with the block-wise quantization_config of Qwen's *-FP8 releases."""

    def serve(self, config, *args):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", write_config(d, config), "--engine", "vllm", "--graph", "decode", *args, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_mixtral_8x7b_per_tensor_static(self):
        """Mixtral-8x7B (32 layers, hidden 4096, 32 + 8 + 8 heads of 128, 8 experts of 14336, vocab 32000), a layer
        at tp 1: qkv 6144 x 4096 = 25,165,824 + 8; o_proj 4096 x 4096 = 16,777,216 + 8; experts 8 x 3 x 14336 x 4096
        = 1,409,286,144 + 8 x 4 + 8 x 4 + 8 = 72: 1,451,229,272, x 32 = 46,439,336,704 B quantized. Beside them in
        bf16: embedding and head 2 x 32000 x 4096 x 2 = 524,288,000, routers 32 x 8 x 4096 x 2 = 2,097,152, norms
        (32 x 2 x 4096 + 4096) x 2 = 532,480, the rotary cache 32768 x 128 x 2 = 8,388,608: 535,306,240;
        46,974,642,944 B, plus the graph's constants.
        tp 2 (16 + 4 + 4 heads, I_p 7168): qkv 3072 x 4096 + 8, o_proj 4096 x 2048 + 8, experts 8 x 3 x 7168 x 4096
        + 72: 725,614,680 a layer, 23,219,669,760 for 32; beside: embedding and head halves 262,144,000, routers,
        norms and the rotary cache whole 11,018,240: 23,492,832,000 B."""
        with open(os.path.join(SRC, "tests", "models", "hf_configs", "Mixtral-8x7B-v0.1.json")) as f:
            config = json.load(f)
        config["quantization_config"] = {
            "quant_method": "fp8", "activation_scheme": "static",
            "ignored_layers": ["lm_head"] + [f"model.layers.{i}.block_sparse_moe.gate" for i in range(32)]}
        for tp, quantized, weights in (("1", 46439336704, 46974642944), ("2", 23219669760, 23492832000)):
            j = self.serve(config, "--gpu", "H100-80GB", "--tp", tp)
            self.assertEqual(j["memory"]["quantized_linear_bytes"], quantized, tp)
            self.assertGreaterEqual(j["memory"]["weights_bytes"], weights, tp)
            self.assertLess(j["memory"]["weights_bytes"], weights + (64 << 10), tp)
            self.assertEqual(j["replaced"]["fp8_per_tensor"]["routers_unquantized"], 32)
            self.assertTrue(j["starts"], j["refusal"])

    def test_qwen1_5_moe_block_wise(self):
        """Qwen1.5-MoE-A2.7B (24 layers, hidden 2048, 16 + 16 + 16 heads of 128, 60 experts of 1408, top-4, a shared
        expert of 5632, vocab 151936), [128, 128] at tp 1, a layer: qkv 6144 x 2048 = 12,582,912 + 48 x 16 x 4 =
        12,585,984; o_proj 4,194,304 + 16 x 16 x 4 = 4,195,328; the shared gate_up 11264 x 2048 = 23,068,672 + 88 x 16
        x 4 = 23,074,304; its down 2048 x 5632 = 11,534,336 + 16 x 44 x 4 = 11,537,152; experts 60 x 3 x 1408 x 2048 =
        519,045,120 + 60 x (2 x 11 x 16 + 16 x 11) x 4 = 126,720: 570,564,608, x 24 = 13,693,550,592 B quantized.
        Beside them in bf16: embedding and head 2 x 151936 x 2048 x 2 = 1,244,659,712, qkv biases 24 x 6144 x 2 =
        294,912, norms (24 x 2 x 2048 + 2048) x 2 = 200,704, routers 24 x 60 x 2048 x 2 = 5,898,240, shared expert
        gates 24 x 2048 x 2 = 98,304, the rotary cache 32768 x 128 x 2 = 8,388,608: 1,259,540,480; 14,953,091,072 B,
        plus the graph's constants."""
        with open(os.path.join(SRC, "tests", "models", "hf_configs", "Qwen1.5-MoE-A2.7B.json")) as f:
            config = json.load(f)
        config["quantization_config"] = BLOCK
        j = self.serve(config, "--gpu", "H100-80GB")
        self.assertEqual(j["memory"]["quantized_linear_bytes"], 13693550592)
        self.assertGreaterEqual(j["memory"]["weights_bytes"], 14953091072)
        self.assertLess(j["memory"]["weights_bytes"], 14953091072 + (64 << 10))
        self.assertEqual(j["replaced"]["fp8_block"]["routers_unquantized"], 24)


if __name__ == "__main__":
    unittest.main()
