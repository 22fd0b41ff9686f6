"""`memplan serve --engine sglang` on DeepSeek-V3's block-fp8 checkpoint (quantization_config fp8, e4m3, dynamic,
weight_block_size [128, 128]) as SGLang loads it, numbers by hand: cost_models/sglang_weights.h (the linear modules,
the experts, MoEGate, shared-experts fusion, Fp8KVCacheMethod's k_scale/v_scale) and cost_models/sglang_mla.h
(post_load_weights: kv_b_proj dequantized to bf16 for w_kc and w_vc), read in sgl-project/sglang
python/sglang/srt/models/deepseek_v2.py at 3e4a39ee, layers/quantization/fp8.py at 00563d3 and kv_cache.py at
078e5e2. The pool is cost_models/sglang_engine.h's rule over these weights.
"""
import json
import os
import tempfile
import unittest

import jsonschema

from tiny_serve import SRC, TinyConfigCase, deepseek_v3_config, run

BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
DYNAMIC = {"quant_method": "fp8", "activation_scheme": "dynamic"}


def mla_config(directory, **overrides):
    """test_serve_fp8_block.py's: hidden 256, 4 heads, q_lora_rank 128, kv_lora_rank 128, nope 128, rope 64, v 128;
    layer 0 dense of 256, layer 1 sparse of 4 routed experts of 256 and one shared; vocab 256, 256 positions."""
    return deepseek_v3_config(directory, hidden=256, heads=4, q_lora=128, kv_lora=128, nope=128, rope=64, v=128,
                              intermediate=256, moe_intermediate=256, vocab=256, **overrides)


GIB = 1 << 30
MLA = ["--engine", "sglang", "--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64",
       "--mem-fraction-static", "0.8", "--json"]


def pool_tokens(free_before, weights, fraction, cell):
    """profile_max_num_token by hand: the two GiB floats, the rest, int(rest x 2^30) // cell."""
    total, available = free_before / GIB, (free_before - weights) / GIB
    return int((available - total * (1 - fraction)) * GIB) // cell


class DeepSeekV3BlockFp8ByHand(TinyConfigCase):
    """The tiny deepseek_v3 with DeepSeek-V3's quantization_config (fp8, e4m3, dynamic, [128, 128]), as SGLang loads
    it (cost_models/sglang_weights.h, sglang_mla.h; deepseek_v2.py at 3e4a39ee), sm90, tp 1:
      bf16 parameters (2,198,276 in all): embedding and head 2 x 256 x 256 = 131,072; a layer's q_a_proj 128 x 256
        = 32,768, q_b_proj 768 x 128 = 98,304, kv_a_proj_with_mqa 192 x 256 = 49,152, kv_b_proj 1,024 x 128 =
        131,072, o_proj 256 x 512 = 131,072 (442,368) and norms 128 + 128 + 256 + 256 = 768; layer 0's MLP 3 x 256 x
        256 = 196,608; layer 1's router 4 x 256 = 1,024, e_score_correction_bias 4, experts 4 x 3 x 256 x 256 =
        786,432, shared expert 196,608; the final norm 256. x 2 B = 4,396,552 B, + the graph's constants c.
      SGLang, fp8: fused_qkv_a_proj_with_mqa out 320, in 256: 81,920 + ceil(320 / 128) x 2 x 4 = 24; q_b_proj
        98,304 + 6 x 1 x 4 = 24; kv_b_proj 131,072 + 8 x 1 x 4 = 32; o_proj 131,072 + 2 x 4 x 4 = 32: 442,480 a
        layer; the dense MLP and the shared expert (fused or not, the same bytes): gate_up 131,072 + 4 x 2 x 4 = 32,
        down 65,536 + 2 x 2 x 4 = 16: 196,656 each. Linear modules 2 x 442,480 + 2 x 196,656 = 1,278,272 B.
        Experts (Fp8MoEMethod): 786,432 + 4 x (2 x 2 x 2 + 2 x 2) x 4 = 192: 786,624 B.
        In bf16 or float32 beside them: embedding and head 262,144; norms (2 x 768 + 256) x 2 = 3,584; router
        (MoEGate, no quant method) 2,048; bias float32 16; the rotary cache [256, 64] float32 65,536; w_kc and w_vc
        from the dequantized bf16 kv_b_proj, 2 layers x 4 heads x (128 + 128) x 128 x 2 = 524,288; k_scale and
        v_scale of attn_mqa and attn_mha, 2 x 2 x 8 = 32.
        Weights 1,278,272 + 786,624 + 262,144 + 3,584 + 2,048 + 16 + 65,536 + 524,288 + 32 = 2,922,544 B + c.
      Pool (--memory 1GiB --reserve 0 --mem-fraction-static 0.8): cell 2 x (128 + 64) x 2 = 768 B a token;
        tokens = int(((2^30 - W) / 2^30 - 0.2) x 2^30) // 768.
      The same config without quantization_config (bf16): the graph's 4,396,552 + c, bias 8 more (float32), rotary
        65,536, w_kc and w_vc copies of the bf16 kv_b_proj 524,288: 2,063,840 B more than fp8's (4,128,768 of linear
        and expert weights less 1,278,272 + 786,624 + 32).
    tp 2 (2 heads a rank, I_p 128): embedding and head halves 131,072; attention a layer 81,944 (replicated) +
      q_b 384 x 128 = 49,152 + 3 x 1 x 4 = 12 + kv_b 65,536 + 16 + o_proj 256 x 256 = 65,536 + 16 = 262,212; dense MLP
      and shared expert gate_up 65,536 + 16, down 32,768 + 8 = 98,328 each: 721,080; experts 393,216 + 4 x (2 x 1 x 2
      + 2 x 1) x 4 = 96; norms, router, bias, rotary whole 3,584 + 2,048 + 16 + 65,536; w_kc/w_vc 2 x 2 x 256 x 128
      x 2 = 262,144; scales 32: 1,578,824 B + c.
    One head a rank (rope 128, so that q_b's shard of 256 and kv_a's 256 are whole blocks; intermediate and experts
      512, I_p 128; tp 4): w_vc is a view of the dequantized w, which stays whole: 2 layers x (128 + 128 + 128) x 128
      x 2 = 196,608 B (the bf16 checkpoint's: w_kc alone, 2 x 128 x 128 x 2 = 65,536).
    """
    make_config = staticmethod(mla_config)

    def sglang(self, config, *extra, rc=0):
        p = run("serve", config, *MLA, *extra)
        self.assertEqual(p.returncode, rc, p.stderr)
        j = json.loads(p.stdout)
        with open(os.path.join(SRC, "docs", "schemas", "serve.engine.schema.json")) as f:
            jsonschema.validate(j, json.load(f))
        return j

    def constants(self):
        e = run("serve", self.config, "--engine", "eager", "--graph", "decode", "--memory", "1GiB", "--context", "64",
                "--max-batched-tokens", "64", "--dtype", "bf16", "--json")
        self.assertEqual(e.returncode, 0, e.stderr)
        c = json.loads(e.stdout)["weights_bytes"] - 4396552
        self.assertGreaterEqual(c, 0)
        self.assertLess(c, 64 << 10)
        return c

    def pair(self, *extra):
        with tempfile.TemporaryDirectory() as d:
            fp8 = self.sglang(mla_config(d, quantization_config=BLOCK), *extra)
        return self.sglang(self.config, *extra), fp8

    def test_tp1_every_weight_and_the_pool(self):
        bf16, fp8 = self.pair()
        c = self.constants()
        q = fp8["sglang"]["quantization"]
        self.assertEqual((q["method"], q["routers_unquantized"]), ("fp8", 0))
        self.assertEqual((q["linear_bytes"], q["vllm_linear_bytes"]), (1278272, 1278272))
        self.assertEqual((q["expert_bytes"], q["kv_scale_bytes"]), (786624, 32))
        self.assertEqual(fp8["sglang"]["mla_absorbed_bytes"], 524288)
        self.assertEqual(fp8["sglang"]["rotary_cache_bytes"], 65536)
        weights = 2922544 + c
        self.assertEqual(fp8["memory"]["weights_bytes"], weights)
        self.assertEqual(bf16["memory"]["weights_bytes"] - weights, 2063840)
        self.assertEqual(fp8["kv_cache"]["bytes_per_token"], 768)
        tokens = pool_tokens(GIB, weights, 0.8, 768)
        self.assertEqual(fp8["sglang"]["profiled_tokens"], tokens)
        self.assertEqual(fp8["kv_cache_tokens"], tokens)
        text = run("serve", self.config, *MLA[:-1]).stdout
        self.assertIn("w_kc and w_vc copies of kv_b_proj", text)

    def test_tp2(self):
        bf16, fp8 = self.pair("--tp", "2")
        q = fp8["sglang"]["quantization"]
        self.assertEqual((q["linear_bytes"], q["expert_bytes"], q["kv_scale_bytes"]), (721080, 393312, 32))
        self.assertEqual(fp8["sglang"]["mla_absorbed_bytes"], 262144)
        self.assertEqual(fp8["memory"]["weights_bytes"], 1578824 + self.constants())

    def test_one_head_a_rank_keeps_the_dequantized_kv_b_proj(self):
        sizes = dict(qk_rope_head_dim=128, intermediate_size=512, moe_intermediate_size=512)
        with tempfile.TemporaryDirectory() as d:
            bf16 = self.sglang(mla_config(d, **sizes), "--tp", "4")
        with tempfile.TemporaryDirectory() as d:
            fp8 = self.sglang(mla_config(d, quantization_config=BLOCK, **sizes), "--tp", "4")
        self.assertEqual(bf16["sglang"]["mla_absorbed_bytes"], 65536)
        self.assertEqual(fp8["sglang"]["mla_absorbed_bytes"], 196608)

    def refused(self, words, quantization, *extra):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", mla_config(d, quantization_config=quantization), *MLA, *extra)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(words, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_what_is_not_sized_is_refused(self):
        # post_load_weights: a per-tensor fp8 kv_b_proj (channel_quant_to_tensor_quant) and other blocks
        # (block_quant_to_tensor_quant) become fp8 copies with a per-tensor scale: not sized.
        self.refused("channel_quant_to_tensor_quant", DYNAMIC)
        self.refused("block_quant_to_tensor_quant", {**BLOCK, "weight_block_size": [64, 64]})
        # FP8 Marlin below 8.9, DeepGEMM's UE8M0 scales on Blackwell.
        self.refused("FP8 Marlin", BLOCK, "--arch", "sm80")
        self.refused("not sized", BLOCK, "--arch", "sm100")


class PublishedDeepSeekV3(unittest.TestCase):
    """DeepSeek-V3 (tests/models/hf_configs/DeepSeek-V3.json, its own block-fp8 quantization_config) on 8 H200s, as
    SGLang serves it by default (--tp 8; --reserve 1GiB outside PyTorch). A rank's weights (test_serve_fp8_block.py
    test_deepseek_v3_on_8_h200's modules, which SGLang holds alike):
      fp8 linear modules and experts 84,461,857,824 B (attention 61 x 36,643,680, dense MLPs 3 x 49,557,312, shared
        experts 58 x 5,506,368 (fused into the FusedMoE as expert 256 on Hopper at tp 8: the same bytes), experts 58
        x 1,409,630,208);
      embedding and head 2 x 129,280 / 8 x 7168 x 2 = 463,339,520; norms (61 x (2 x 7168 + 1536 + 512) + 7168) x 2 =
        2,013,184; routers (MoEGate, bf16) 58 x 256 x 7168 x 2 = 212,860,928; e_score_correction_bias 58 x 256 x 4 =
        59,392; SGLang's rotary cache in float32, 163,840 rows (4,096 x yarn factor 40) x 64 x 4 = 41,943,040;
        w_kc and w_vc from kv_b_proj dequantized to bf16, 61 x 16 x 256 x 512 x 2 = 255,852,544; k_scale and
        v_scale 61 x 2 x 8 = 976: 85,437,927,408 B, + the graph's constants.
      mem_fraction_static: H200 143,771 MiB, chunked prefill 8192, CUDA-graph batches 512 (tp >= 4): reserved
        512 + 12,288 + 1,024 + 1,024 = 14,848 MiB, round(128,923 / 143,771, 3) = round(0.89672, 3) = 0.897.
      Pool: free before the weights 143,771 x 2^20 - 2^30 = 149,681,078,272 B; cell 61 x 576 x 2 = 70,272 B (the
        latent whole on every rank); tokens = int(rest x 2^30) // 70,272: 694,814 with the graph's 2,848 B of
        constants (W = 85,437,930,256 B).
    H100-80GB: 85.4 GB of weights a rank do not fit its 85,045,477,376 B (SGLang's "Not enough memory")."""

    PATH = os.path.join(SRC, "tests", "models", "hf_configs", "DeepSeek-V3.json")

    def answer(self, gpu):
        p = run("serve", self.PATH, "--graph", "decode", "--engine", "sglang", "--gpu", gpu, "--tp", "8",
                "--reserve", "1GiB", "--json")
        self.assertIn(p.returncode, (0, 1), p.stderr)
        return json.loads(p.stdout)

    def test_h200(self):
        j = self.answer("H200")
        g = j["sglang"]
        self.assertEqual((g["reserved_mib"], g["mem_fraction_static"], g["mla_attention_backend"]), (14848, 0.897, "fa3"))
        self.assertEqual(g["quantization"]["kv_scale_bytes"], 976)
        self.assertEqual(g["mla_absorbed_bytes"], 255852544)
        self.assertEqual(g["rotary_cache_bytes"], 41943040)
        weights = j["memory"]["weights_bytes"]
        self.assertGreaterEqual(weights, 85437927408)
        self.assertLess(weights, 85437927408 + (64 << 10))
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 70272)
        free = 143771 * (1 << 20) - GIB
        self.assertEqual(free, 149681078272)
        tokens = pool_tokens(free, weights, 0.897, 70272)
        self.assertEqual(g["profiled_tokens"], tokens)
        self.assertEqual(j["kv_cache_tokens"], tokens)
        self.assertTrue(690000 < tokens < 700000, tokens)

    def test_h100_does_not_start(self):
        j = self.answer("H100-80GB")
        self.assertFalse(j["starts"])
        self.assertIn("Not enough memory", j["refusal"])



if __name__ == "__main__":
    unittest.main()
