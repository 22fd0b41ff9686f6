"""`memplan serve --engine trtllm` on quantized config.json checkpoints (cost_models/trtllm_engine.h
trtllm_quantization_check), numbers by hand.

TensorRT-LLM 1.0's PyTorch backend takes a config.json quantization_config only as quant_method "fp8" with
weight_block_size (QuantAlgo.FP8_BLOCK_SCALES) or "mxfp4" (llmapi/llm_utils.py ModelLoader.
_update_from_hf_quant_config); any other raises NotImplementedError. A block-fp8 Linear
(_torch/modules/linear.py FP8BlockScalesLinearMethod.create_weights) holds weight fp8 [out, in], weight_scale float32
[ceil(out / 128), ceil(in / 128)] and two float32 scalars, input_scale and inv_input_scale; the LM head, the embedding
and the norms stay in the model's type.

The dense llama of test_serve_fp8_block.py (hidden 512, 4 heads of 128, 2 KV heads, intermediate 768, 2 layers,
vocab 512, bf16), on H100-80GB (compute capability 9.0), tp 1, a layer's four modules (qkv_proj, o_proj,
gate_up_proj, down_proj):
  qkv_proj out 512 + 256 + 256 = 1,024, in 512: 524,288 fp8 B + 8 x 4 scales x 4 B = 128 + 8 = 524,424
  o_proj 512 x 512: 262,144 + 4 x 4 x 4 = 64 + 8 = 262,216
  gate_up_proj out 1,536, in 512: 786,432 + 12 x 4 x 4 = 192 + 8 = 786,632
  down_proj out 512, in 768: 393,216 + 4 x 6 x 4 = 96 + 8 = 393,320
  a layer 1,966,592, two 3,933,184; the bf16 layers 2 x 1,966,080 x 2 B = 7,864,320: 3,931,136 B less (vLLM's
  3,931,200 less 8 modules x 8 B of scalars).
  The rest (embedding 512 x 512 x 2, LM head 512 x 512 x 2, norms (2 x 2 + 1) x 512 x 2) is the same in both.
tp 2 (a rank: qkv out 256 + 128 + 128, o_proj in 256, gate_up out 384 + 384, down in 384): 983,040 fp8 B + 240 B of
  grids a layer as vLLM's, + 4 x 8 = 32 B of scalars: 983,312 a layer, 1,966,624 for 2, for bf16's 3,932,160:
  1,965,536 B less.
The KV cache is bf16 (kv_cache_quant_algo is ModelOpt's, not a config.json's): 2 x 2 layers x 2 heads x 128 x 2 B
  = 2,048 B a token; with --kv-cache-dtype fp8 (KvCacheConfig.dtype) 1,024 B, and the estimate
  (_get_cache_size_per_token) divides by 1 x 2 layers x (128 x 2 // 1) x 2 = 1,024 B:
  max_tokens = int((total - peak) x 0.9 // 1,024), blocks = ceil(max_tokens / 32) (calculate_max_num_blocks).
"""
import json
import math
import os
import tempfile
import unittest

import jsonschema

from tiny_serve import SRC, run, write_config

FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
BASE = ["--engine", "trtllm", "--graph", "decode", "--reserve", "0", "--context", "64", "--max-num-tokens", "64"]
TRTLLM = [*BASE, "--gpu", "H100-80GB", "--json"]


def dense_config(directory, **overrides):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512,
              "intermediate_size": 768, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 512, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu"}
    return write_config(directory, config, **overrides)


def serve(path, *extra, rc=0):
    p = run("serve", path, *TRTLLM, *extra)
    assert p.returncode == rc, (p.returncode, p.stderr)
    return json.loads(p.stdout)


def refused(test, path, *extra, says):
    p = run("serve", path, *BASE, "--gpu", "H100-80GB", *extra)
    test.assertEqual(p.returncode, 2, p.stderr)
    test.assertIn(says, p.stderr)
    test.assertEqual(p.stderr.count("\n"), 1, p.stderr)


class BlockFp8ByHand(unittest.TestCase):
    def test_weights(self):
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as e:
            for tp, less in ((1, 3_931_136), (2, 1_965_536)):
                q = serve(dense_config(d, quantization_config=FP8), "--tp", str(tp))
                bf16 = serve(dense_config(e), "--tp", str(tp))
                with open(os.path.join(SRC, "docs", "schemas", "serve.engine.schema.json")) as f:
                    jsonschema.validate(q, json.load(f))
                self.assertEqual(bf16["memory"]["weights_bytes"] - q["memory"]["weights_bytes"], less, tp)
                t = q["trtllm"]["quantization"]
                self.assertEqual((t["method"], t["layout"], t["quantized_modules"]),
                                 ("fp8", "FP8BlockScalesLinearMethod", 8))
                self.assertEqual(t["scalar_bytes"], 64)
                self.assertEqual(t["linear_bytes"], 3_933_120 if tp == 1 else 1_966_560)  # vLLM's grid bytes
                self.assertIsNone(bf16["trtllm"]["quantization"])

    def test_max_tokens_with_an_fp8_cache(self):
        with tempfile.TemporaryDirectory() as d:
            j = serve(dense_config(d, quantization_config=FP8), "--kv-cache-dtype", "fp8")
            t, m = j["trtllm"], j["memory"]
            self.assertEqual(j["kv_cache"]["bytes_per_token"], 1024)
            self.assertEqual(t["estimate_kv_bytes_per_token"], 1024)
            peak = m["weights_bytes"] + m["activation_peak_bytes"] + m["non_torch_bytes"]
            available = (m["total_bytes"] - peak) * 0.9
            self.assertEqual(t["estimated_max_tokens"], int(available // 1024))
            self.assertEqual(t["blocks"], math.ceil(int(available // 1024) / 32))
            self.assertEqual(j["kv_cache_tokens"], t["blocks"] * 32)
            self.assertTrue(j["starts"])
            bf16_cache = serve(dense_config(d, quantization_config=FP8))
            self.assertEqual(bf16_cache["trtllm"]["estimate_kv_bytes_per_token"], 2048)


class Refusals(unittest.TestCase):
    def test_what_tensorrt_llm_does_not_load(self):
        with tempfile.TemporaryDirectory() as d:
            per_tensor = {"quant_method": "fp8", "activation_scheme": "dynamic"}
            refused(self, dense_config(d, quantization_config=per_tensor),
                    says="TensorRT-LLM 1.0's PyTorch backend raises NotImplementedError")
            gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}
            refused(self, dense_config(d, quantization_config=gptq), says="quantized (gptq)")
            refused(self, dense_config(d, quantization_config=dict(FP8, weight_block_size=[64, 64])),
                    says="holds 128 x 128 blocks only")
            # 2 KV heads over 4 ranks: the heads' weights are repeated, their block scales are not.
            refused(self, dense_config(d, quantization_config=FP8), "--tp", "4",
                    says="repeats k_proj's and v_proj's weight but not their block scales")

    def test_other_commands_name_trtllm(self):
        # The importer's refusal outside serve names every engine that sizes a 128 x 128 block-fp8 config.
        with tempfile.TemporaryDirectory() as d:
            p = run("estimate", dense_config(d, quantization_config=FP8), "--graph", "decode")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("(fp8) is modelled by serve --engine vllm, sglang and trtllm only", p.stderr)

    def test_other_capabilities(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", dense_config(d, quantization_config=FP8), *BASE, "--gpu", "L40S")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("block-fp8 GEMM on compute capability 8.9 is not modelled", p.stderr)


if __name__ == "__main__":
    unittest.main()
