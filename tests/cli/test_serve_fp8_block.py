"""`memplan serve --engine vllm` on block-wise fp8 checkpoints (quantization_config weight_block_size [128, 128],
cost_models/vllm_fp8_block.h), numbers by hand. Each case compares the checkpoint with the same config without its
quantization_config (the bfloat16 model vLLM would load), so every other weights term cancels.

Dense (a llama: hidden 512, 4 heads of 128, 2 KV heads, intermediate 768, 2 layers, vocab 512), tp 1, per layer:
  qkv_proj out 512 + 256 + 256 = 1,024, in 512: 524,288 fp8 B + ceil(1024/128) 8 x 4 scales x 4 B = 128
  o_proj 512 x 512: 262,144 + 4 x 4 x 4 = 64; gate_up_proj out 1,536, in 512: 786,432 + 12 x 4 x 4 = 192;
  down_proj out 512, in 768: 393,216 + 4 x 6 x 4 = 96. fp8 1,966,080 + scales 480 = 1,966,560 a layer, 3,933,120
  for 2; the bf16 layers 2 x 1,966,080 x 2 B = 7,864,320: 3,931,200 B less.
tp 2, a rank's layer: qkv out 256 + 128 + 128 (each shard a multiple of 128), in 512: 262,144 + 4 x 4 x 4 = 64;
  o_proj in 256, out 512: 131,072 + 4 x 2 x 4 = 32; gate_up out 384 + 384: 393,216 + 6 x 4 x 4 = 96; down in 384:
  196,608 + 4 x 3 x 4 = 48. 983,040 + 240 = 983,280 a layer, 1,966,560 for 2, for bf16's 3,932,160: 1,965,600 less.
  The quantized input of a layer of K inputs at 64 tokens: 64 K + 64 (K / 128) x 4 B: K 512 -> 33,792; 768 -> 50,688.
  intermediate_size 640 at tp 2: gate_proj's shard of 320 is not a multiple of 128: vLLM's validate_fp8_block_shape
  refuses it.

MoE + MLA (deepseek_v3: hidden 256, 4 heads, q_lora_rank 128, kv_lora_rank 128, nope 128, rope 64, v 128; layer 0
dense of 256, layer 1 sparse: 4 experts of 256, top-2, one shared expert of 256; vocab 256), tp 1:
  attention a layer: fused q_a + kv_a_with_mqa out 128 + 192 = 320, in 256: 81,920 + 3 x 2 x 4 = 24; q_b out
  4 x 192 = 768, in 128: 98,304 + 6 x 1 x 4 = 24; kv_b out 4 x 256 = 1,024, in 128: 131,072 + 8 x 4 = 32; o_proj
  out 256, in 512: 131,072 + 2 x 4 x 4 = 32: 442,480; the dense MLP and the shared expert (gate_up out 512, in 256:
  131,072 + 32; down 65,536 + 16): 196,656 each. Linear layers 2 x 442,480 + 2 x 196,656 = 1,278,272 for the
  graph's 1,277,952 x 2 B = 2,555,904. Experts (Fp8MoEMethod): 4 x 3 x 256 x 256 = 786,432 fp8 B, scales 4 x (w13
  2 x 2 x 2 + w2 2 x 2) x 4 B = 192, for the graph's 1,572,864. MLA's dequantized kv_b_proj (W_UV, W_UK_T):
  2 layers x 128 x 4 heads x 256 x 2 B = 524,288. The router (256 x 4 in bf16) stays the graph's.
  Weights: 2,555,904 + 1,572,864 - 1,278,272 - 786,624 - 524,288 = 1,539,584 B less than bf16's.
  The kernel's quantized activations (64 tokens, k 2): 64 x 256 + 64 x 2 x 4 = 16,896 and 128 x 256 + 128 x 2 x 4
  = 33,792: 50,688 B on the router's step, beside the unquantized kernel's buffers.
tp 2 (2 heads a rank, I_p 128 for the experts, 128 for the dense MLP and the shared expert): attention a layer
  81,944 (replicated) + q_b 384 x 128 = 49,152 + 12 + kv_b 512 x 128 = 65,536 + 16 + o_proj 256 x 256 = 65,536 + 16
  = 262,212; the dense MLP and the shared expert: gate_up 256 x 256 = 65,536 + 16, down 256 x 128 = 32,768 + 8:
  98,328 each. Linear 721,080 for 720,896 x 2 = 1,441,792; experts 4 x 3 x 128 x 256 = 393,216 + 4 x (2 x 1 x 2 +
  2 x 1) x 4 = 96 for 786,432; MLA 2 x 128 x 2 x 256 x 2 = 262,144. 851,688 B less.
  With 2 heads, tp 2 refuses: q_b_proj's shard is one head of 192 outputs, not a multiple of 128.
"""
import json
import os
import tempfile
import unittest

import jsonschema

from tiny_serve import SRC, VLLM, TinyConfigCase, deepseek_v3_config, run, write_config

FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def dense_config(directory, **overrides):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512,
              "intermediate_size": 768, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 512, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu"}
    return write_config(directory, config, **overrides)


def mla_config(directory, **overrides):
    return deepseek_v3_config(directory, hidden=256, heads=4, q_lora=128, kv_lora=128, nope=128, rope=64, v=128,
                              intermediate=256, moe_intermediate=256, vocab=256, **overrides)


class Fp8Case(TinyConfigCase):
    def pair(self, *extra):
        """(bf16, fp8) answers: the config without and with the block-wise quantization_config."""
        bf16 = self.vllm(*extra)
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", type(self).make_config(d, quantization_config=FP8), *VLLM, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return bf16, json.loads(p.stdout)

    def refused(self, words, *extra, **overrides):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", type(self).make_config(d, **{"quantization_config": FP8, **overrides}), *VLLM, *extra)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(words, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


class DenseByHand(Fp8Case):
    make_config = staticmethod(dense_config)

    def test_tp1_and_tp2_weights(self):
        for tp, quantized, less in ((1, 3933120, 3931200), (2, 1966560, 1965600)):
            bf16, fp8 = self.pair("--tp", str(tp))
            self.assertEqual(fp8["memory"]["quantized_linear_bytes"], quantized, tp)
            self.assertEqual(bf16["memory"]["weights_bytes"] - fp8["memory"]["weights_bytes"], less, tp)
            f = fp8["replaced"]["fp8_block"]
            self.assertEqual(f["weight_block_size"], [128, 128])
            width = 768 // tp if "down_proj" in f["input_quant_layer"] else 512
            self.assertEqual(f["input_quant_bytes"], 64 * width + 64 * (width // 128) * 4)
            # The forward's peak: the graph's less what the fp8 layers save, or a quantized input's step above it.
            self.assertGreaterEqual(fp8["profile_run"]["forward_peak_allocated_bytes"],
                                    bf16["profile_run"]["forward_peak_allocated_bytes"] - less)
            with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as s:
                jsonschema.validate(fp8, json.load(s))

    def test_shapes_vllm_refuses(self):
        self.refused("validate_fp8_block_shape", "--tp", "2", intermediate_size=640)
        # Block-wise scales with static activations: Fp8Config refuses them.
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", dense_config(d, quantization_config={**FP8, "activation_scheme": "static"}), *VLLM)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("dynamic activations", p.stderr)
        self.refused("two positive integers", quantization_config={**FP8, "weight_block_size": [128]})
        # A GPU whose fp8 kernels are not the sized ones: B200 (10.0), and --arch sm80 (FP8 Marlin).
        self.refused("block-wise fp8 on compute capability 10.0", "--arch", "sm100")
        self.refused("FP8 Marlin", "--arch", "sm80")

    def test_an_ignored_lm_head_changes_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", dense_config(d, quantization_config={**FP8, "ignored_layers": ["lm_head"]}), *VLLM)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["memory"]["quantized_linear_bytes"], 3933120)
        self.refused("layers left unquantized",
                     quantization_config={**FP8, "ignored_layers": ["model.layers.0.mlp.down_proj"]})


class MlaMoeByHand(Fp8Case):
    make_config = staticmethod(mla_config)

    def test_tp1_and_tp2_weights(self):
        for tp, linear, experts, scales, graph_experts, mla, less in (
                (1, 1278272, 786432, 192, 1572864, 524288, 1539584),
                (2, 721080, 393216, 96, 786432, 262144, 851688)):
            bf16, fp8 = self.pair("--tp", str(tp))
            f = fp8["replaced"]["fp8_block"]
            self.assertEqual((f["expert_fp8_bytes"], f["expert_scale_bytes"], f["graph_expert_bytes"]),
                             (experts, scales, graph_experts), tp)
            self.assertEqual(f["mla_dequantized_kv_b_proj_bytes"], mla, tp)
            self.assertEqual(f["routers_unquantized"], 1)
            self.assertEqual(fp8["memory"]["quantized_linear_bytes"], linear + experts + scales, tp)
            self.assertEqual(bf16["memory"]["weights_bytes"] - fp8["memory"]["weights_bytes"], less, tp)
            self.assertEqual(fp8["replaced"]["fused_moe"]["block_size_m"], 64)
            self.assertEqual(fp8["replaced"]["fused_moe"]["expert_weight_bytes"], experts + scales)
        bf16, fp8 = self.pair()
        self.assertEqual(fp8["replaced"]["fp8_block"]["moe_quantized_activation_bytes"], 50688)
        # The same kernel buffers (block_size_m 64 either way at 64 tokens for 4 experts), plus the quantized
        # activations, on the same router step.
        self.assertEqual(fp8["replaced"]["fused_moe"]["peak_allocated_bytes"],
                         bf16["replaced"]["fused_moe"]["peak_allocated_bytes"] + 50688)

    def test_expert_parallel_holds_whole_fp8_experts(self):
        # --enable-expert-parallel at tp 2: the MoE's tp_size is 1, rank 0 holds 2 of the 4 experts whole (I = 256):
        # w13 [2, 512, 256] + w2 [2, 256, 256] fp8 = 2 x 3 x 256 x 256 = 393,216 B (tensor parallelism's 4 x 3 x 128 x
        # 256 alike); scales w13 [2, 2 x 2, 2] + w2 [2, 2, 2] = 24 x 4 B = 96 (tensor parallelism's [4, 2, 2] + [4, 2,
        # 1] alike); plus expert parallelism's map, int32 [4] for the one sparse layer: 16 B more weights. The graph's
        # tensor-parallel share of the experts, 786,432 B in bf16, is what they replace. The kernel's quantized
        # activations at the full width (64 tokens, k 2): 64 x 256 + 64 x 2 x 4 = 16,896 and [128, 256] + 128 x 2 x 4
        # = 33,792: 50,688 B, where tensor parallelism's I_p 128 gives 16,896 + 128 x 128 + 128 x 1 x 4 = 33,792.
        _, tp = self.pair("--tp", "2")
        _, ep = self.pair("--tp", "2", "--enable-expert-parallel")
        f = ep["replaced"]["fp8_block"]
        self.assertEqual((f["expert_fp8_bytes"], f["expert_scale_bytes"], f["graph_expert_bytes"]), (393216, 96, 786432))
        self.assertEqual(ep["replaced"]["fused_moe"]["local_experts"], 2)
        self.assertEqual(ep["replaced"]["fused_moe"]["expert_map_bytes"], 16)
        self.assertEqual(ep["memory"]["weights_bytes"] - tp["memory"]["weights_bytes"], 16)
        self.assertEqual(tp["replaced"]["fp8_block"]["moe_quantized_activation_bytes"], 33792)
        self.assertEqual(f["moe_quantized_activation_bytes"], 50688)

    def test_shapes_vllm_refuses(self):
        self.refused("q_b_proj", "--tp", "2", num_attention_heads=2, num_key_value_heads=2)
        # Experts of 192 (not a multiple of block_n 128; two shared experts make a shared MLP of 384, which passes):
        # Fp8MoEMethod.create_weights raises.
        self.refused("Fp8MoEMethod", moe_intermediate_size=192, n_shared_experts=2)


def qwen3_moe_config(directory, **overrides):
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 256,
              "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "head_dim": 128, "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
              "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "norm_topk_prob": True,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
              "router_aux_loss_coef": 0.001, "attention_bias": False}
    return write_config(directory, config, **overrides)


class Qwen3MoeRouterByHand(Fp8Case):
    """qwen3_moe (hidden 256, 2 + 2 + 2 heads of 128, one sparse layer of 4 experts of 128), tp 1: qkv out 768, in
    256: 196,608 + 6 x 2 x 4 = 48; o_proj 256 x 256: 65,536 + 16; the router, a ReplicatedLinear given the
    quant_config (qwen3_moe.py at 2e0831b), out 4, in 256: 1,024 + 1 x 2 x 4 = 8; experts 4 x 3 x 128 x 256 =
    393,216 + 4 x (2 x 1 x 2 + 2 x 1) x 4 = 96: 656,552 B quantized for the graph's 656,384 x 2 = 1,312,768: 656,216
    less. With "model.layers.0.mlp.gate" in modules_to_not_convert the router stays bf16 (2,048 B): 655,520 quantized,
    655,200 less."""
    make_config = staticmethod(qwen3_moe_config)

    def test_the_router_is_quantized_unless_listed(self):
        bf16, fp8 = self.pair()
        self.assertEqual(fp8["memory"]["quantized_linear_bytes"], 656552)
        self.assertEqual(bf16["memory"]["weights_bytes"] - fp8["memory"]["weights_bytes"], 656216)
        self.assertEqual(fp8["replaced"]["fp8_block"]["routers_unquantized"], 0)
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", qwen3_moe_config(d, quantization_config={
                **FP8, "modules_to_not_convert": ["lm_head", "model.layers.0.mlp.gate"]}), *VLLM)
        self.assertEqual(p.returncode, 0, p.stderr)
        listed = json.loads(p.stdout)
        self.assertEqual(listed["memory"]["quantized_linear_bytes"], 655520)
        self.assertEqual(bf16["memory"]["weights_bytes"] - listed["memory"]["weights_bytes"], 655200)
        self.assertEqual(listed["replaced"]["fp8_block"]["routers_unquantized"], 1)


class Published(unittest.TestCase):
    """Full-size configs with the published block-wise fp8 quantization_config (DeepSeek-V3's own file; Qwen3's
    bf16 configs with the quantization_config of Qwen's *-FP8 releases, method fp8, e4m3, dynamic, [128, 128]): one
    rank's weights by hand."""

    def serve(self, config, *args):
        with tempfile.TemporaryDirectory() as d:
            path = write_config(d, config)
            p = run("serve", path, "--engine", "vllm", "--graph", "decode", *args, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_deepseek_v3_on_8_h200(self):
        """Per rank at tp 8 (16 heads, I_p 2304 dense and 256 for the experts):
        attention a layer: fused q_a + kv_a 2112 x 7168 = 15,138,816 + 17 x 56 x 4 = 3,808; q_b 3072 x 1536 =
          4,718,592 + 24 x 12 x 4 = 1,152; kv_b 4096 x 512 = 2,097,152 + 32 x 4 x 4 = 512; o_proj 7168 x 2048 =
          14,680,064 + 56 x 16 x 4 = 3,584: 36,643,680, x 61 = 2,235,264,480;
        dense MLP (3 layers): gate_up 4608 x 7168 = 33,030,144 + 36 x 56 x 4 = 8,064; down 7168 x 2304 = 16,515,072 +
          56 x 18 x 4 = 4,032: 49,557,312, x 3 = 148,671,936;
        shared expert (58 layers): gate_up 512 x 7168 = 3,670,016 + 4 x 56 x 4 = 896; down 7168 x 256 = 1,835,008 +
          56 x 2 x 4 = 448: 5,506,368, x 58 = 319,369,344;
        experts (58 layers): 256 x 3 x 256 x 7168 = 1,409,286,144 + 256 x (2 x 2 x 56 + 56 x 2) x 4 = 344,064, x 58 =
          81,758,552,064. Quantized: 84,461,857,824 B.
        bf16 and float32 beside them: embedding and head 2 x 129,280 / 8 x 7168 x 2 = 463,339,520; norms (61 x
          (2 x 7168 + 1536 + 512) + 7168) x 2 = 2,013,184; routers 58 x 256 x 7168 x 2 = 212,860,928;
          e_score_correction_bias 58 x 256 x 4 = 59,392; the rotary cache 163,840 x 64 x 2 = 20,971,520;
          MLA's dequantized kv_b_proj 61 x 512 x 16 x 256 x 2 = 255,852,544: 955,097,088.
        85,416,954,912 B a rank (79.6 GiB, where bf16 would be about 158 GiB), plus the graph's few constants.
        The cache: 61 x 576 x 2 = 70,272 B a token on every rank."""
        with open(os.path.join(SRC, "tests", "models", "hf_configs", "DeepSeek-V3.json")) as f:
            config = json.load(f)
        j = self.serve(config, "--gpu", "H200", "--tp", "8")
        self.assertEqual(j["memory"]["quantized_linear_bytes"], 84461857824)
        self.assertEqual(j["replaced"]["fp8_block"]["mla_dequantized_kv_b_proj_bytes"], 255852544)
        self.assertGreaterEqual(j["memory"]["weights_bytes"], 85416954912)
        self.assertLess(j["memory"]["weights_bytes"], 85416954912 + (64 << 10))
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 70272)
        self.assertEqual(j["replaced"]["fp8_block"]["routers_unquantized"], 58)
        self.assertTrue(j["starts"], j["refusal"])
        m = j["memory"]
        self.assertEqual(m["available_kv_cache_bytes"],
                         m["requested_bytes"] - m["weights_bytes"] - m["activation_peak_bytes"] - m["non_torch_bytes"])
        self.assertEqual(j["gpu_kv_cache_tokens"], m["available_kv_cache_bytes"] // (64 * 70272) * 64)

    def test_qwen3_8b_fp8(self):
        """Qwen3-8B (36 layers, hidden 4096, 32 + 8 + 8 heads of 128, intermediate 12288), tp 1, a layer: qkv
        6144 x 4096 = 25,165,824 + 48 x 32 x 4 = 6,144; o_proj 4096 x 4096 = 16,777,216 + 32 x 32 x 4 = 4,096; gate_up
        24576 x 4096 = 100,663,296 + 192 x 32 x 4 = 24,576; down 4096 x 12288 = 50,331,648 + 32 x 96 x 4 = 12,288:
        192,985,088, x 36 = 6,947,463,168 B. Beside them in bf16: embedding and head 2 x 151,936 x 4096 x 2 =
        2,489,319,424, norms (36 x (2 x 4096 + 128 + 128) + 4096) x 2 = 616,448, the rotary cache 40,960 x 128 x 2 =
        10,485,760: 9,447,884,800 B, plus the graph's constants."""
        with open(os.path.join(SRC, "tests", "models", "hf_configs", "Qwen3-8B.json")) as f:
            config = json.load(f)
        config["quantization_config"] = {**FP8, "fmt": "e4m3"}
        j = self.serve(config, "--gpu", "H100-80GB")
        self.assertEqual(j["memory"]["quantized_linear_bytes"], 6947463168)
        self.assertGreaterEqual(j["memory"]["weights_bytes"], 9447884800)
        self.assertLess(j["memory"]["weights_bytes"], 9447884800 + (64 << 10))

    def test_qwen3_30b_a3b_fp8(self):
        """Qwen3-30B-A3B (48 layers, hidden 2048, 32 + 4 + 4 heads of 128, 128 experts of 768, top-8), tp 1, a layer:
        qkv 5120 x 2048 = 10,485,760 + 40 x 16 x 4 = 2,560; o_proj 2048 x 4096 = 8,388,608 + 16 x 32 x 4 = 2,048;
        experts 128 x 3 x 768 x 2048 = 603,979,776 + 128 x (2 x 6 x 16 + 16 x 6) x 4 = 147,456: 623,006,208, x 48 =
        29,904,297,984 B. vLLM's qwen3_moe gate is a ReplicatedLinear given the quant_config: without a list naming it,
        fp8 too, 128 x 2048 = 262,144 + 1 x 16 x 4 = 64 a layer, 12,585,984 for 48: 29,916,883,968 B quantized.
        Beside them in bf16: embedding and head 2 x 151,936 x 2048 x 2 = 1,244,659,712, norms (48 x (2 x 2048 + 128 +
        128) + 2048) x 2 = 421,888, the rotary cache 40,960 x 128 x 2 = 10,485,760: 31,172,451,328 B, plus the graph's
        constants; with every "model.layers.N.mlp.gate" in modules_to_not_convert the routers stay bf16 (48 x 128 x
        2048 x 2 = 25,165,824): 29,904,297,984 quantized, 31,185,031,168 B. The bf16 model's linear layers, routers and
        experts, 48 x (18,874,368 + 262,144 + 603,979,776) x 2 = 59,819,163,648 B, less the quantized: 29,902,279,680 B
        less. At --tp 4 each expert is 192 wide a rank, not a multiple of 128: Fp8MoEMethod refuses."""
        with open(os.path.join(SRC, "tests", "models", "hf_configs", "Qwen3-30B-A3B.json")) as f:
            config = json.load(f)
        bf16 = self.serve(config, "--gpu", "H100-80GB")
        config["quantization_config"] = FP8
        j = self.serve(config, "--gpu", "H100-80GB")
        self.assertEqual(j["memory"]["quantized_linear_bytes"], 29916883968)
        self.assertGreaterEqual(j["memory"]["weights_bytes"], 31172451328)
        self.assertLess(j["memory"]["weights_bytes"], 31172451328 + (64 << 10))
        self.assertEqual(bf16["memory"]["weights_bytes"] - j["memory"]["weights_bytes"], 29902279680)
        self.assertEqual(j["replaced"]["fp8_block"]["routers_unquantized"], 0)
        gates = [f"model.layers.{i}.mlp.gate" for i in range(48)]
        listed = self.serve({**config, "quantization_config": {**FP8, "modules_to_not_convert": ["lm_head"] + gates}},
                            "--gpu", "H100-80GB")
        self.assertEqual(listed["memory"]["quantized_linear_bytes"], 29904297984)
        self.assertEqual(listed["memory"]["weights_bytes"] - j["memory"]["weights_bytes"], 31185031168 - 31172451328)
        self.assertEqual(listed["replaced"]["fp8_block"]["routers_unquantized"], 48)
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", write_config(d, config), "--engine", "vllm", "--graph", "decode", "--gpu", "H100-80GB",
                    "--tp", "4")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("output of 192 a rank is not a multiple of block_n 128", p.stderr)

if __name__ == "__main__":
    unittest.main()
